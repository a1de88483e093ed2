#include "engine/runtime/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "engine/errors.hpp"

namespace pipetune::runtime {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'P', 'T', 'C', 'K', 'P', 'T', '0', '1'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 8;  // magic, version, rank, payload size

std::uint64_t checksum(const char* data, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ULL;
  }
  return h;
}

// Little-endian fixed-width writer / bounds-checked reader.
class Writer {
 public:
  void u32(std::uint32_t v) { raw(&v, 4); }
  void u64(std::uint64_t v) { raw(&v, 8); }
  void i64(std::int64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void floats(const std::vector<float>& v) {
    u64(v.size());
    raw(v.data(), v.size() * sizeof(float));
  }
  void raw(const void* p, std::size_t n) {
    const char* c = static_cast<const char*>(p);
    bytes.insert(bytes.end(), c, c + n);
  }
  std::vector<char> bytes;
};

class Reader {
 public:
  Reader(const char* data, std::size_t size, std::string file)
      : data_(data), size_(size), file_(std::move(file)) {}
  std::uint32_t u32() { return pod<std::uint32_t>(); }
  std::uint64_t u64() { return pod<std::uint64_t>(); }
  std::int64_t i64() { return pod<std::int64_t>(); }
  std::string str() {
    const std::uint64_t n = u64();
    need(n, "string");
    std::string s(data_ + pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  std::vector<float> floats() {
    const std::uint64_t n = u64();
    if (n > (size_ - pos_) / sizeof(float))
      fail("tensor of " + std::to_string(n) + " floats overruns the file");
    std::vector<float> v(static_cast<std::size_t>(n));
    std::memcpy(v.data(), data_ + pos_, v.size() * sizeof(float));
    pos_ += v.size() * sizeof(float);
    return v;
  }
  bool done() const { return pos_ == size_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError("checkpoint file '" + file_ + "': " + what);
  }

 private:
  template <class T>
  T pod() {
    need(sizeof(T), "field");
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  void need(std::uint64_t n, const char* what) const {
    if (n > size_ - pos_) fail(std::string("truncated (a ") + what + " runs past the end)");
  }
  const char* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::string file_;
};

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.bin", rank);
  return buf;
}

[[noreturn]] void io_error(const std::string& what, const fs::path& path) {
  throw std::runtime_error("checkpoint: " + what + " '" + path.string() +
                           "': " + std::strerror(errno));
}

void write_file_synced(const fs::path& path, const char* data, std::size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error("cannot create", path);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, data + done, size - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      io_error("cannot write", path);
    }
    done += static_cast<std::size_t>(w);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    io_error("cannot sync", path);
  }
  if (::close(fd) != 0) io_error("cannot close", path);
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some file systems refuse directory fsync
  (void)::fsync(fd);
  ::close(fd);
}

std::vector<char> read_whole(const fs::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("checkpoint: cannot open " + what + " '" + path.string() + "'");
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return data;
}

std::string unique_suffix() {
  std::random_device rd;
  return std::to_string(::getpid()) + "-" + std::to_string(rd());
}

}  // namespace

const NamedBuffer* RankCheckpoint::find(const std::string& name) const {
  for (const NamedBuffer& b : buffers)
    if (b.name == name) return &b;
  return nullptr;
}

void write_checkpoint(const fs::path& dir, const CheckpointManifest& manifest,
                      const std::vector<RankCheckpoint>& ranks) {
  const fs::path target = fs::absolute(dir).lexically_normal();
  const fs::path parent = target.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    throw std::runtime_error("checkpoint: parent directory '" + parent.string() +
                             "' does not exist");
  if (fs::exists(target, ec) && !fs::is_directory(target, ec))
    throw std::runtime_error("checkpoint: '" + target.string() + "' exists and is not a directory");
  const fs::path tmp = parent / (target.filename().string() + ".tmp-" + unique_suffix());
  try {
    if (!fs::create_directory(tmp, ec) || ec) io_error("cannot create directory", tmp);
    std::ostringstream m;
    m << "format = " << manifest.format_version << "\nstep = " << manifest.step
      << "\nworld = " << manifest.world << "\nmodel = " << manifest.model
      << "\nplan = " << manifest.plan << "\nseed = " << manifest.seed << "\n";
    const std::string text = m.str();
    for (const RankCheckpoint& r : ranks) {
      Writer payload;
      payload.u32(static_cast<std::uint32_t>(r.buffers.size()));
      for (const NamedBuffer& b : r.buffers) {
        payload.str(b.name);
        payload.floats(b.values);
      }
      payload.i64(r.loader.epoch);
      payload.i64(r.loader.part);
      payload.i64(r.loader.sample);
      payload.i64(r.loader.sample_tokens);
      payload.u32(static_cast<std::uint32_t>(r.meta.size()));
      for (const auto& [k, v] : r.meta) {
        payload.str(k);
        payload.str(v);
      }
      Writer file;
      file.raw(kMagic, sizeof kMagic);
      file.u32(kVersion);
      file.u32(static_cast<std::uint32_t>(r.rank));
      file.u64(payload.bytes.size());
      file.raw(payload.bytes.data(), payload.bytes.size());
      file.u64(checksum(payload.bytes.data(), payload.bytes.size()));
      write_file_synced(tmp / rank_file_name(r.rank), file.bytes.data(), file.bytes.size());
    }
    // The manifest last: a directory with a manifest is complete.
    write_file_synced(tmp / "manifest.txt", text.data(), text.size());
    sync_directory(tmp);
    const fs::path old = parent / (target.filename().string() + ".old-" + unique_suffix());
    const bool replacing = fs::exists(target, ec);
    if (replacing && ::rename(target.c_str(), old.c_str()) != 0)
      io_error("cannot move aside", target);
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      const int saved = errno;
      if (replacing) (void)::rename(old.c_str(), target.c_str());
      errno = saved;
      io_error("cannot rename into place", target);
    }
    sync_directory(parent);
    if (replacing) fs::remove_all(old, ec);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

CheckpointManifest read_checkpoint_manifest(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError("checkpoint '" + dir.string() + "' is not a directory");
  const fs::path path = dir / "manifest.txt";
  const std::vector<char> raw = read_whole(path, "manifest");
  std::istringstream in(std::string(raw.begin(), raw.end()));
  std::map<std::string, std::string> kv;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const auto eq = line.find(" = ");
    if (eq == std::string::npos)
      throw InputError("checkpoint manifest '" + path.string() + "' line " +
                       std::to_string(lineno) + ": expected 'key = value'");
    kv[line.substr(0, eq)] = line.substr(eq + 3);
  }
  auto get = [&](const char* key) {
    auto it = kv.find(key);
    if (it == kv.end())
      throw InputError("checkpoint manifest '" + path.string() + "': missing key '" + key + "'");
    return it->second;
  };
  auto number = [&](const char* key) -> std::int64_t {
    const std::string v = get(key);
    try {
      std::size_t used = 0;
      const long long x = std::stoll(v, &used);
      if (used != v.size()) throw std::invalid_argument(v);
      return x;
    } catch (const std::exception&) {
      throw InputError("checkpoint manifest '" + path.string() + "': '" + key +
                       "' is not a number: " + v);
    }
  };
  CheckpointManifest m;
  m.format_version = static_cast<int>(number("format"));
  if (m.format_version != 1)
    throw InputError("checkpoint manifest '" + path.string() + "': format " +
                     std::to_string(m.format_version) + " is not supported (this build reads 1)");
  m.step = number("step");
  m.world = static_cast<int>(number("world"));
  if (m.step < 0 || m.world < 1)
    throw InputError("checkpoint manifest '" + path.string() + "': bad step or world");
  m.model = get("model");
  m.plan = get("plan");
  m.seed = static_cast<std::uint64_t>(number("seed"));
  return m;
}

RankCheckpoint read_rank_checkpoint(const fs::path& dir, int rank) {
  const fs::path path = dir / rank_file_name(rank);
  const std::vector<char> raw = read_whole(path, "rank file");
  Reader header(raw.data(), raw.size(), path.string());
  if (raw.size() < kHeaderBytes + 8)
    header.fail("truncated (" + std::to_string(raw.size()) + " bytes)");
  if (std::memcmp(raw.data(), kMagic, sizeof kMagic) != 0)
    header.fail("not a pipetune checkpoint (bad magic)");
  Reader h(raw.data() + 8, raw.size() - 8, path.string());
  const std::uint32_t version = h.u32();
  if (version != kVersion) header.fail("version " + std::to_string(version) + " is not supported");
  const std::uint32_t file_rank = h.u32();
  if (static_cast<int>(file_rank) != rank)
    header.fail("holds rank " + std::to_string(file_rank) + ", expected " + std::to_string(rank));
  const std::uint64_t payload_size = h.u64();
  if (payload_size != raw.size() - kHeaderBytes - 8)
    header.fail("truncated or padded: header says " + std::to_string(payload_size) +
                " payload bytes, file has " + std::to_string(raw.size() - kHeaderBytes - 8));
  const char* payload = raw.data() + kHeaderBytes;
  std::uint64_t stored = 0;
  std::memcpy(&stored, payload + payload_size, 8);
  if (stored != checksum(payload, static_cast<std::size_t>(payload_size)))
    header.fail("checksum mismatch (corrupted)");
  Reader r(payload, static_cast<std::size_t>(payload_size), path.string());
  RankCheckpoint c;
  c.rank = rank;
  const std::uint32_t buffers = r.u32();
  for (std::uint32_t i = 0; i < buffers; ++i) {
    NamedBuffer b;
    b.name = r.str();
    b.values = r.floats();
    c.buffers.push_back(std::move(b));
  }
  c.loader.epoch = r.i64();
  c.loader.part = r.i64();
  c.loader.sample = r.i64();
  c.loader.sample_tokens = r.i64();
  const std::uint32_t metas = r.u32();
  for (std::uint32_t i = 0; i < metas; ++i) {
    std::string k = r.str();
    c.meta[k] = r.str();
  }
  if (!r.done()) r.fail("trailing bytes in the payload");
  return c;
}

}  // namespace pipetune::runtime
