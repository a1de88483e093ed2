// Writing a checkpoint: rank files through a CRC-keeping buffer, into a temporary sibling
// directory that is fsync'ed and renamed (or swapped) into place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string_view>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/checkpoint/checkpoint_format.hpp"
#include "engine/errors.hpp"

namespace pipetune::checkpoint {

namespace {

using namespace format;

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

struct Destination {
  fs::path target;  // absolute, symbolic links resolved
  fs::path parent;
};

// Throws unless `target` is a directory holding only checkpoint files (or nothing).
void ensure_replaceable(const fs::path& target) {
  struct stat st {};
  if (::lstat(target.c_str(), &st) != 0) write_error("inspect", target, errno);
  if (!S_ISDIR(st.st_mode)) {
    const char* kind = S_ISREG(st.st_mode)    ? "a file"
                       : S_ISLNK(st.st_mode)  ? "a symbolic link to nothing"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    throw std::runtime_error("checkpoint: '" + target.string() + "' is " + kind +
                             ", not a directory");
  }
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

}  // namespace

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

}  // namespace pipetune::checkpoint
