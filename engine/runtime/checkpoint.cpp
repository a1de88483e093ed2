#include "engine/runtime/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string_view>

#include "engine/errors.hpp"

namespace pipetune::runtime {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'P', 'T', 'C', 'K', 'R', 'A', 'N', 'K'};
constexpr std::uint32_t kVersion = kCheckpointFormatVersion;
constexpr std::uint64_t kHeaderBytes = 40;  // magic, version, rank, world, reserved, step, size
constexpr std::uint64_t kTrailerBytes = 4;  // CRC-32
constexpr const char* kManifestName = "manifest.txt";
constexpr std::uint64_t kMaxManifestBytes = 16u << 20;
constexpr std::uint64_t kMaxDims = 64;
constexpr int kMaxWorld = 1 << 20;
constexpr std::size_t kIoChunk = 1u << 20;
constexpr std::size_t kMaxSyscallBytes = 1u << 30;

// ---- CRC-32, slicing by 8 ------------------------------------------------------------------

using CrcTables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr CrcTables make_crc_tables() {
  CrcTables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t s = 1; s < 8; ++s)
    for (std::size_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}

constexpr CrcTables kCrc = make_crc_tables();

// ---- little-endian fields -------------------------------------------------------------------

void put_le(char* out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}

std::uint64_t get_le(const char* in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.bin", rank);
  return buf;
}

// The rank of "rank-<digits>.bin", or -1 for any other name.
int parse_rank_file_name(const std::string& name) {
  constexpr std::string_view prefix = "rank-", suffix = ".bin";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  int rank = -1;
  const auto [end, ec] = std::from_chars(first, last, rank);
  if (ec != std::errc() || end != last ||
      !std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return rank;
}

bool is_checkpoint_entry(const std::string& name) {
  return name == kManifestName || parse_rank_file_name(name) >= 0;
}


// ---- errors ---------------------------------------------------------------------------------

[[noreturn]] void write_error(const std::string& what, const fs::path& path, int err) {
  throw std::runtime_error("checkpoint: cannot " + what + " '" + path.string() +
                           "': " + std::strerror(err));
}

[[noreturn]] void bad_file(const fs::path& path, const std::string& what) {
  throw InputError("checkpoint file '" + path.string() + "': " + what);
}

// ---- writing --------------------------------------------------------------------------------

// A new file written through a buffer, with a running CRC of everything put(); finish() appends
// nothing by itself, flushes, fsyncs and closes. Throws std::runtime_error naming the file.
class OutputFile {
 public:
  explicit OutputFile(fs::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) write_error("create", path_, errno);
    buffer_.reserve(kIoChunk);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  void put(const void* data, std::size_t size) {
    crc_ = crc32(data, size, crc_);
    written_ += size;
    append(static_cast<const char*>(data), size);
  }
  void put_unchecked(const void* data, std::size_t size) {
    append(static_cast<const char*>(data), size);
  }
  void u32(std::uint32_t v) {
    char b[4];
    put_le(b, v, 4);
    put(b, 4);
  }
  void u64(std::uint64_t v) {
    char b[8];
    put_le(b, v, 8);
    put(b, 8);
  }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void str(const std::string& s) {
    u64(s.size());
    put(s.data(), s.size());
  }
  void floats(const std::vector<float>& v) {
    u64(v.size());
    if constexpr (std::endian::native == std::endian::little) {
      put(v.data(), v.size() * sizeof(float));
    } else {
      for (float f : v) u32(std::bit_cast<std::uint32_t>(f));
    }
  }

  std::uint32_t crc() const { return crc_; }
  std::uint64_t written() const { return written_; }

  void finish() {
    flush();
    if (::fsync(fd_) != 0) write_error("sync", path_, errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) write_error("close", path_, errno);
  }

 private:
  void append(const char* data, std::size_t size) {
    if (buffer_.size() + size > kIoChunk) {
      flush();
      if (size >= kIoChunk) return write_all(data, size);
    }
    buffer_.insert(buffer_.end(), data, data + size);
  }
  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  void write_all(const char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t w = ::write(fd_, data, std::min(size, kMaxSyscallBytes));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) write_error("write", path_, w < 0 ? errno : ENOSPC);
      data += w;
      size -= static_cast<std::size_t>(w);
    }
  }

  fs::path path_;
  int fd_ = -1;
  std::vector<char> buffer_;
  std::uint32_t crc_ = 0;
  std::uint64_t written_ = 0;
};

std::uint64_t payload_bytes(const RankCheckpoint& r) {
  std::uint64_t bytes = 8;
  for (const NamedTensor& t : r.buffers)
    bytes += 8 + t.name.size() + 8 + 8 * t.shape.size() + 8 + sizeof(float) * t.values.size();
  bytes += 8 + 8 * r.rng_state.size();
  bytes += 4 * 8;
  bytes += 8;
  for (const auto& [key, value] : r.meta) bytes += 8 + key.size() + 8 + value.size();
  return bytes;
}

void write_rank_file(const fs::path& path, const CheckpointManifest& manifest,
                     const RankCheckpoint& r) {
  const std::uint64_t payload = payload_bytes(r);
  OutputFile f(path);
  f.put(kMagic, sizeof kMagic);
  f.u32(kVersion);
  f.u32(static_cast<std::uint32_t>(r.rank));
  f.u32(static_cast<std::uint32_t>(manifest.world));
  f.u32(0);
  f.i64(manifest.step);
  f.u64(payload);
  f.u64(r.buffers.size());
  for (const NamedTensor& t : r.buffers) {
    f.str(t.name);
    f.u64(t.shape.size());
    for (std::int64_t d : t.shape) f.i64(d);
    f.floats(t.values);
  }
  f.u64(r.rng_state.size());
  for (std::uint64_t w : r.rng_state) f.u64(w);
  f.i64(r.loader.epoch);
  f.i64(r.loader.part);
  f.i64(r.loader.sample);
  f.i64(r.loader.sample_tokens);
  f.u64(r.meta.size());
  for (const auto& [key, value] : r.meta) {
    f.str(key);
    f.str(value);
  }
  if (f.written() != kHeaderBytes + payload)
    throw std::logic_error("checkpoint: rank file size miscounted for '" + path.string() + "'");
  char trailer[4];
  put_le(trailer, f.crc(), 4);
  f.put_unchecked(trailer, sizeof trailer);
  f.finish();
}

// Manifest values are one line each: backslash, control characters and DEL are escaped.
std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  return out;
}

bool unescape(const std::string& s, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return false;
    switch (s[i]) {
      case '\\':
        out += '\\';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'x': {
        unsigned value = 0;
        if (i + 2 >= s.size()) return false;
        const auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, value, 16);
        if (ec != std::errc() || end != s.data() + i + 3) return false;
        out += static_cast<char>(value);
        i += 2;
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

std::string manifest_text(const CheckpointManifest& m) {
  return "# pipetune checkpoint\nformat = " + std::to_string(kCheckpointFormatVersion) +
         "\nstep = " + std::to_string(m.step) + "\nworld = " + std::to_string(m.world) +
         "\nmodel = " + escape(m.model) + "\nplan = " + escape(m.plan) +
         "\nseed = " + std::to_string(m.seed) + "\n";
}

void validate_arguments(const CheckpointManifest& manifest,
                        const std::vector<RankCheckpoint>& ranks) {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("write_checkpoint: " + what);
  };
  if (manifest.world < 1 || manifest.world > kMaxWorld)
    fail("world " + std::to_string(manifest.world) + " is outside 1.." + std::to_string(kMaxWorld));
  if (manifest.step < 0) fail("step " + std::to_string(manifest.step) + " is negative");
  if (ranks.size() != static_cast<std::size_t>(manifest.world))
    fail(std::to_string(ranks.size()) + " ranks given for world " + std::to_string(manifest.world));
  std::vector<bool> seen(ranks.size(), false);
  for (const RankCheckpoint& r : ranks) {
    const std::string who = "rank " + std::to_string(r.rank);
    if (r.rank < 0 || r.rank >= manifest.world) fail(who + " is outside the world");
    if (seen[static_cast<std::size_t>(r.rank)]) fail(who + " is given twice");
    seen[static_cast<std::size_t>(r.rank)] = true;
    std::set<std::string_view> names;
    for (const NamedTensor& t : r.buffers) {
      if (!names.insert(t.name).second) fail(who + ": tensor '" + t.name + "' is given twice");
      if (t.shape.empty()) continue;
      if (t.shape.size() > kMaxDims) fail(who + ": tensor '" + t.name + "' has too many dims");
      std::uint64_t product = 1;
      bool overflow = false;
      for (std::int64_t d : t.shape) {
        if (d < 0) fail(who + ": tensor '" + t.name + "' has a negative dimension");
        const auto ud = static_cast<std::uint64_t>(d);
        if (ud != 0 && product > UINT64_MAX / ud) overflow = true;
        product *= ud;
      }
      if (overflow || product != t.values.size())
        fail(who + ": tensor '" + t.name + "' has " + std::to_string(t.values.size()) +
             " values, which its shape does not hold");
    }
  }
}

// ---- destination ----------------------------------------------------------------------------

struct Destination {
  fs::path target;  // absolute, symbolic links resolved
  fs::path parent;
};

// Throws unless `target` is a directory holding only checkpoint files (or nothing).
void ensure_replaceable(const fs::path& target) {
  struct stat st {};
  if (::lstat(target.c_str(), &st) != 0) write_error("inspect", target, errno);
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error("checkpoint: '" + target.string() + "' exists and is not a directory");
  std::error_code ec;
  for (fs::directory_iterator it(target, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_checkpoint_entry(name))
      throw std::runtime_error("checkpoint: '" + target.string() +
                               "' is not a checkpoint directory (it holds '" + name +
                               "'); refusing to replace it");
  }
  if (ec) write_error("list", target, ec.value());
}

Destination destination(const fs::path& dir) {
  if (dir.empty()) throw std::runtime_error("checkpoint: no directory given");
  std::error_code ec;
  fs::path target = fs::absolute(dir, ec);
  if (ec) write_error("resolve", dir, ec.value());
  fs::path resolved = fs::weakly_canonical(target, ec);
  target = ec ? target.lexically_normal() : resolved;
  if (!target.has_filename()) target = target.parent_path();
  if (target == target.root_path() || target.filename() == "." || target.filename() == "..")
    throw std::runtime_error("checkpoint: '" + dir.string() + "' cannot be a checkpoint directory");
  Destination d{target, target.parent_path()};
  struct stat st {};
  if (::stat(d.parent.c_str(), &st) != 0) write_error("use parent directory", d.parent, errno);
  if (!S_ISDIR(st.st_mode))
    throw std::runtime_error("checkpoint: parent '" + d.parent.string() + "' is not a directory");
  if (::access(d.parent.c_str(), W_OK | X_OK) != 0) write_error("write into", d.parent, errno);
  if (::lstat(d.target.c_str(), &st) == 0)
    ensure_replaceable(d.target);
  else if (errno != ENOENT)
    write_error("inspect", d.target, errno);
  return d;
}

std::string unique_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(static_cast<std::uint64_t>(ticks) & 0xffffffu);
}

// A fresh sibling directory ".<name>.<kind>-<unique>".
fs::path sibling_name(const Destination& d, const char* kind) {
  return d.parent / ("." + d.target.filename().string() + "." + kind + "-" + unique_suffix());
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some file systems refuse directory fsync
  (void)::fsync(fd);
  ::close(fd);
}

// Moves the complete directory `tmp` to d.target, replacing an old checkpoint there. Afterwards
// `tmp` no longer exists, or holds nothing the caller must keep (it removes it on failure).
void install(const fs::path& tmp, const Destination& d) {
  struct stat st {};
  if (::lstat(d.target.c_str(), &st) != 0) {
    if (errno != ENOENT) write_error("inspect", d.target, errno);
#ifdef RENAME_NOREPLACE
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, d.target.c_str(), RENAME_NOREPLACE) == 0)
      return sync_directory(d.parent);
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
      write_error("rename into place", d.target, errno);
#endif
    if (::rename(tmp.c_str(), d.target.c_str()) != 0)
      write_error("rename into place", d.target, errno);
    return sync_directory(d.parent);
  }
  ensure_replaceable(d.target);  // again: it may have changed since destination()
  std::error_code ec;
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, d.target.c_str(), RENAME_EXCHANGE) == 0) {
    sync_directory(d.parent);
    fs::remove_all(tmp, ec);  // now the old checkpoint
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
    write_error("swap into place", d.target, errno);
#endif
  const fs::path old = sibling_name(d, "old");
  if (::rename(d.target.c_str(), old.c_str()) != 0) write_error("move aside", d.target, errno);
  if (::rename(tmp.c_str(), d.target.c_str()) != 0) {
    const int err = errno;
    (void)::rename(old.c_str(), d.target.c_str());
    write_error("rename into place", d.target, err);
  }
  sync_directory(d.parent);
  fs::remove_all(old, ec);
}

// ---- reading --------------------------------------------------------------------------------

// An open regular file; InputError naming it when it is missing or not a file.
class InputFile {
 public:
  InputFile(fs::path path, const std::string& missing_hint) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      const int err = errno;
      if (err == ENOENT) bad_file(path_, "missing" + missing_hint);
      bad_file(path_, std::string("cannot open: ") + std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      bad_file(path_, std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) bad_file(path_, "not a regular file");
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() { ::close(fd_); }

  const fs::path& path() const { return path_; }
  std::uint64_t size() const { return size_; }

  // Exactly `size` bytes at the current offset; a file that shrank is "truncated".
  void read(char* out, std::size_t size) {
    while (size > 0) {
      const ssize_t r = ::read(fd_, out, std::min(size, kMaxSyscallBytes));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0)
        throw std::runtime_error("checkpoint: cannot read '" + path_.string() +
                                 "': " + std::strerror(errno));
      if (r == 0) bad_file(path_, "truncated (the file shrank while being read)");
      out += r;
      size -= static_cast<std::size_t>(r);
    }
  }

 private:
  fs::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Reads a rank file front to back through a buffer, keeping a CRC of what it consumed and
// refusing to read past `end` (header plus payload), so every length is checked before use.
class RankFileReader {
 public:
  explicit RankFileReader(InputFile& file) : file_(file), end_(file.size()) {}

  void set_end(std::uint64_t end) { end_ = end; }
  std::uint64_t remaining() const { return end_ - pos_; }
  std::uint32_t crc() const { return crc_; }

  void bytes(char* out, std::size_t size) {
    if (size > remaining()) corrupt("a field runs past the end of the payload");
    take(out, size);
    crc_ = crc32(out, size, crc_);
    pos_ += size;
  }
  std::uint32_t u32() {
    char b[4];
    bytes(b, 4);
    return static_cast<std::uint32_t>(get_le(b, 4));
  }
  std::uint64_t u64() {
    char b[8];
    bytes(b, 8);
    return get_le(b, 8);
  }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }

  // A count of items of at least `min_item_bytes` each, checked against the bytes left.
  std::uint64_t count(std::uint64_t min_item_bytes, const std::string& what) {
    const std::uint64_t c = u64();
    if (c > remaining() / min_item_bytes)
      corrupt(what + " count " + std::to_string(c) + " overruns the file (" + std::to_string(remaining()) + " bytes left)");
    return c;
  }
  std::string str(const char* what) {
    const std::uint64_t size = count(1, std::string(what) + " byte");
    std::string s(static_cast<std::size_t>(size), '\0');
    bytes(s.data(), s.size());
    return s;
  }
  std::vector<float> floats(const std::string& what) {
    const std::uint64_t c = count(sizeof(float), what + " value");
    std::vector<float> v(static_cast<std::size_t>(c));
    bytes(reinterpret_cast<char*>(v.data()), v.size() * sizeof(float));
    if constexpr (std::endian::native != std::endian::little) {
      for (float& f : v) {
        char b[4];
        std::memcpy(b, &f, 4);
        f = std::bit_cast<float>(static_cast<std::uint32_t>(get_le(b, 4)));
      }
    }
    return v;
  }

  // The stored CRC (the 4 bytes after `end`), read without checking.
  std::uint32_t stored_crc() {
    while (pos_ < end_) {  // skip to the trailer, folding the rest into the CRC
      char scratch[4096];
      const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(sizeof scratch, remaining()));
      take(scratch, k);
      crc_ = crc32(scratch, k, crc_);
      pos_ += k;
    }
    char b[4];
    take(b, 4);
    pos_ += 4;
    end_ = pos_;
    return static_cast<std::uint32_t>(get_le(b, 4));
  }

  // A malformed payload: a checksum mismatch when the CRC disagrees (the usual cause), else the
  // structural problem itself (a file consistent with its CRC but not with this format).
  [[noreturn]] void corrupt(const std::string& what) {
    if (pos_ <= end_ && end_ + kTrailerBytes == file_.size()) {
      const std::uint32_t stored = stored_crc();
      if (stored != crc_)
        bad_file(file_.path(), "checksum mismatch: the file is corrupted (" + what + ")");
    }
    bad_file(file_.path(), "corrupted: " + what);
  }

 private:
  void take(char* out, std::size_t size) {
    while (size > 0) {
      if (next_ == buffer_.size()) {
        if (size >= kIoChunk) {
          file_.read(out, size);
          filled_ += size;
          return;
        }
        const auto fill =
            static_cast<std::size_t>(std::min<std::uint64_t>(kIoChunk, file_.size() - filled_));
        if (fill == 0) bad_file(file_.path(), "truncated");
        buffer_.resize(fill);
        file_.read(buffer_.data(), fill);
        filled_ += fill;
        next_ = 0;
      }
      const std::size_t k = std::min(size, buffer_.size() - next_);
      std::memcpy(out, buffer_.data() + next_, k);
      next_ += k;
      out += k;
      size -= k;
    }
  }

  InputFile& file_;
  std::uint64_t end_;
  std::uint64_t pos_ = 0;     // bytes consumed
  std::uint64_t filled_ = 0;  // bytes read from the file into the buffer
  std::uint32_t crc_ = 0;
  std::vector<char> buffer_;
  std::size_t next_ = 0;
};

RankCheckpoint read_rank_file(const fs::path& path, const CheckpointManifest& manifest, int rank) {
  InputFile file(path, " (the manifest says world = " + std::to_string(manifest.world) + ")");
  const std::uint64_t size = file.size();
  if (size < kHeaderBytes + kTrailerBytes)
    bad_file(path, "truncated (" + std::to_string(size) + " bytes, shorter than the " +
                       std::to_string(kHeaderBytes + kTrailerBytes) + "-byte header and checksum)");
  RankFileReader r(file);
  char magic[sizeof kMagic];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    bad_file(path, "bad magic (not a pipetune checkpoint rank file)");
  const std::uint32_t version = r.u32();
  if (version != kVersion)
    bad_file(path,
             "version " + std::to_string(version) + " is not supported (this build reads " + std::to_string(kVersion) + ")");
  const std::uint32_t file_rank = r.u32();
  const std::uint32_t file_world = r.u32();
  const std::uint32_t reserved = r.u32();
  const std::int64_t file_step = r.i64();
  const std::uint64_t payload = r.u64();
  if (payload != size - kHeaderBytes - kTrailerBytes)
    bad_file(path, "truncated or padded (the header promises " + std::to_string(payload) +
                       " payload bytes, the file holds " + std::to_string(size - kHeaderBytes - kTrailerBytes) +
                       ")");
  r.set_end(kHeaderBytes + payload);

  RankCheckpoint c;
  c.rank = rank;
  const std::uint64_t tensors = r.count(8 + 8 + 8, "tensor");
  for (std::uint64_t i = 0; i < tensors; ++i) {
    NamedTensor t;
    t.name = r.str("tensor name");
    const std::uint64_t ndim = r.count(8, "tensor '" + t.name + "' dimension");
    if (ndim > kMaxDims) r.corrupt("tensor '" + t.name + "' has " + std::to_string(ndim) + " dimensions");
    t.shape.resize(static_cast<std::size_t>(ndim));
    for (std::int64_t& d : t.shape) d = r.i64();
    t.values = r.floats("tensor '" + t.name + "'");
    if (!t.shape.empty()) {
      std::uint64_t product = 1;
      bool fits = true;
      for (std::int64_t d : t.shape) {
        const auto ud = static_cast<std::uint64_t>(d);
        if (d < 0 || (ud != 0 && product > UINT64_MAX / ud)) fits = false;
        product *= ud;
      }
      if (!fits || product != t.values.size())
        r.corrupt("tensor '" + t.name + "' shape does not match its " + std::to_string(t.values.size()) +
                  " values");
    }
    c.buffers.push_back(std::move(t));
  }
  const std::uint64_t words = r.count(8, "rng word");
  c.rng_state.resize(static_cast<std::size_t>(words));
  for (std::uint64_t& w : c.rng_state) w = r.u64();
  c.loader.epoch = r.i64();
  c.loader.part = r.i64();
  c.loader.sample = r.i64();
  c.loader.sample_tokens = r.i64();
  const std::uint64_t metas = r.count(16, "meta entry");
  for (std::uint64_t i = 0; i < metas; ++i) {
    std::string key = r.str("meta key");
    c.meta[std::move(key)] = r.str("meta value");
  }
  if (r.remaining() != 0) r.corrupt(std::to_string(r.remaining()) + " unread bytes at the end of the payload");
  const std::uint32_t computed = r.crc();
  const std::uint32_t stored = r.stored_crc();
  if (stored != computed) {
    char b[96];
    std::snprintf(b, sizeof b,
                  "checksum mismatch (stored %08x, computed %08x): the file is corrupted", stored,
                  computed);
    bad_file(path, b);
  }
  if (reserved != 0) bad_file(path, "corrupted header (reserved field is " + std::to_string(reserved) + ")");
  if (file_rank != static_cast<std::uint32_t>(rank))
    bad_file(path, "holds rank " + std::to_string(file_rank) + ", expected " + std::to_string(rank));
  if (file_world != static_cast<std::uint32_t>(manifest.world) || file_step != manifest.step)
    bad_file(path, "belongs to a checkpoint of world " + std::to_string(file_world) + " at step " +
                       std::to_string(file_step) + ", the manifest says world " +
                       std::to_string(manifest.world) + " at step " +
                       std::to_string(manifest.step));
  return c;
}

void check_directory(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) throw InputError("checkpoint '" + dir.string() + "' does not exist");
    throw InputError("checkpoint '" + dir.string() + "': " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode))
    throw InputError("checkpoint '" + dir.string() + "' is not a directory");
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    const std::uint32_t lo =
        (static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24) ^
        crc;
    const std::uint32_t hi =
        static_cast<std::uint32_t>(p[4]) | static_cast<std::uint32_t>(p[5]) << 8 |
        static_cast<std::uint32_t>(p[6]) << 16 | static_cast<std::uint32_t>(p[7]) << 24;
    crc = kCrc[7][lo & 0xffu] ^ kCrc[6][(lo >> 8) & 0xffu] ^ kCrc[5][(lo >> 16) & 0xffu] ^
          kCrc[4][lo >> 24] ^ kCrc[3][hi & 0xffu] ^ kCrc[2][(hi >> 8) & 0xffu] ^
          kCrc[1][(hi >> 16) & 0xffu] ^ kCrc[0][hi >> 24];
  }
  for (; size > 0; --size, ++p) crc = (crc >> 8) ^ kCrc[0][(crc ^ *p) & 0xffu];
  return ~crc;
}

const NamedTensor* RankCheckpoint::find(const std::string& name) const {
  for (const NamedTensor& t : buffers)
    if (t.name == name) return &t;
  return nullptr;
}

void check_checkpoint_destination(const fs::path& dir) {
  (void)destination(dir);
}

void write_checkpoint(const fs::path& dir, const CheckpointManifest& manifest,
                      const std::vector<RankCheckpoint>& ranks) {
  validate_arguments(manifest, ranks);
  const Destination d = destination(dir);
  fs::path tmp;
  for (int attempt = 0;; ++attempt) {
    tmp = sibling_name(d, "tmp");
    if (::mkdir(tmp.c_str(), 0755) == 0) break;
    if (errno != EEXIST || attempt == 8) write_error("create directory", tmp, errno);
  }
  try {
    for (const RankCheckpoint& r : ranks)
      write_rank_file(tmp / rank_file_name(r.rank), manifest, r);
    const std::string text = manifest_text(manifest);
    OutputFile m(tmp / kManifestName);
    m.put(text.data(), text.size());
    m.finish();
    sync_directory(tmp);
    install(tmp, d);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

CheckpointManifest read_checkpoint_manifest(const fs::path& dir) {
  check_directory(dir);
  const fs::path path = dir / kManifestName;
  InputFile file(path, "");
  if (file.size() > kMaxManifestBytes)
    bad_file(path, "too large for a manifest (" + std::to_string(file.size()) + " bytes)");
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  file.read(text.data(), text.size());

  auto fail = [&](const std::string& what) -> void { bad_file(path, what); };
  std::map<std::string, std::string> kv;
  std::size_t start = 0;
  for (int lineno = 1; start < text.size(); ++lineno) {
    std::size_t stop = text.find('\n', start);
    if (stop == std::string::npos) stop = text.size();
    std::string line = text.substr(start, stop - start);
    start = stop + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.front() == '#') continue;
    const std::string at = "line " + std::to_string(lineno) + ": ";
    const auto eq = line.find('=');
    if (eq == std::string::npos) fail(at + "expected 'key = value'");
    std::string key = line.substr(0, eq);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    std::string raw = line.substr(eq + 1);
    if (!raw.empty() && raw.front() == ' ') raw.erase(0, 1);
    std::string value;
    if (key.empty()) fail(at + "expected 'key = value'");
    if (!unescape(raw, value)) fail(at + "bad escape in the value of '" + key + "'");
    if (!kv.emplace(key, std::move(value)).second) fail(at + "key '" + key + "' is repeated");
  }
  auto get = [&](const char* key) -> const std::string& {
    const auto it = kv.find(key);
    if (it == kv.end()) bad_file(path, std::string("missing key '") + key + "'");
    return it->second;
  };
  auto number = [&](const char* key, auto& out) {
    const std::string& v = get(key);
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      bad_file(path, std::string("'") + key + "' is not a valid number: '" + v + "'");
  };
  CheckpointManifest m;
  number("format", m.format_version);
  if (m.format_version != kCheckpointFormatVersion)
    bad_file(path, "format " + std::to_string(m.format_version) +
                       " is not supported (this build reads " +
                       std::to_string(kCheckpointFormatVersion) + ")");
  for (const auto& [key, value] : kv)
    if (key != "format" && key != "step" && key != "world" && key != "model" && key != "plan" &&
        key != "seed")
      bad_file(path, "unknown key '" + key + "'");
  number("step", m.step);
  number("world", m.world);
  number("seed", m.seed);
  if (m.step < 0) bad_file(path, "step " + std::to_string(m.step) + " is negative");
  if (m.world < 1 || m.world > kMaxWorld)
    bad_file(path,
             "world " + std::to_string(m.world) + " is outside 1.." + std::to_string(kMaxWorld));
  m.model = get("model");
  m.plan = get("plan");
  return m;
}

RankCheckpoint read_rank_checkpoint(const fs::path& dir, int rank) {
  const CheckpointManifest manifest = read_checkpoint_manifest(dir);
  if (rank < 0 || rank >= manifest.world)
    throw InputError("checkpoint '" + dir.string() + "': rank " + std::to_string(rank) +
                     " is outside its world of " + std::to_string(manifest.world));
  return read_rank_file(dir / rank_file_name(rank), manifest, rank);
}

LoadedCheckpoint read_checkpoint(const fs::path& dir) {
  LoadedCheckpoint loaded;
  loaded.manifest = read_checkpoint_manifest(dir);
  const int world = loaded.manifest.world;
  // The rank files present must be exactly 0 .. world-1; report a disagreement with the manifest
  // before reading gigabytes of the others.
  std::vector<bool> present(static_cast<std::size_t>(world), false);
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int rank = parse_rank_file_name(it->path().filename().string());
    if (rank >= world)
      bad_file(it->path(), "rank " + std::to_string(rank) +
                               " is beyond the manifest's world = " + std::to_string(world));
    if (rank >= 0) present[static_cast<std::size_t>(rank)] = true;
  }
  if (ec) throw InputError("checkpoint '" + dir.string() + "': cannot list: " + ec.message());
  for (int rank = 0; rank < world; ++rank)
    if (!present[static_cast<std::size_t>(rank)])
      bad_file(dir / rank_file_name(rank),
               "missing (the manifest says world = " + std::to_string(world) + ")");
  loaded.ranks.reserve(static_cast<std::size_t>(world));
  for (int rank = 0; rank < world; ++rank)
    loaded.ranks.push_back(read_rank_file(dir / rank_file_name(rank), loaded.manifest, rank));
  return loaded;
}

}  // namespace pipetune::runtime
