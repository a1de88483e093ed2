// Reading a checkpoint: every length is checked against the bytes left before it is used, and
// the CRC, magic, version and the manifest's rank, world and step are verified.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/checkpoint/checkpoint_format.hpp"
#include "engine/errors.hpp"

namespace pipetune::checkpoint {

namespace {

using namespace format;

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
      corrupt(what + " count " + std::to_string(c) + " overruns the file (" +
              std::to_string(remaining()) + " bytes left)");
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

// The fixed header of a rank file: what it says it holds and how long its payload is.
struct RankFileHeader {
  std::uint32_t rank = 0, world = 0, reserved = 0;
  std::int64_t step = 0;
  std::uint64_t payload = 0;
};

// Reads the header (magic, version, rank, world, step, payload size) and bounds the reader to
// the payload, which must fill the file up to its checksum.
RankFileHeader read_header(RankFileReader& r, const fs::path& path, std::uint64_t size) {
  char magic[sizeof kMagic];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    bad_file(path, "bad magic (not a pipetune checkpoint rank file)");
  const std::uint32_t version = r.u32();
  if (version != kVersion)
    bad_file(path, "version " + std::to_string(version) + " is not supported (this build reads " +
                       std::to_string(kVersion) + ")");
  RankFileHeader h;
  h.rank = r.u32();
  h.world = r.u32();
  h.reserved = r.u32();
  h.step = r.i64();
  h.payload = r.u64();
  if (h.payload != size - kHeaderBytes - kTrailerBytes)
    bad_file(path, "truncated or padded (the header promises " + std::to_string(h.payload) +
                       " payload bytes, the file holds " +
                       std::to_string(size - kHeaderBytes - kTrailerBytes) + ")");
  r.set_end(kHeaderBytes + h.payload);
  return h;
}

// One tensor: name, shape (at most kMaxDims dimensions) and values, as many as the shape holds.
NamedTensor read_tensor(RankFileReader& r) {
  NamedTensor t;
  t.name = r.str("tensor name");
  const std::uint64_t ndim = r.count(8, "tensor '" + t.name + "' dimension");
  if (ndim > kMaxDims)
    r.corrupt("tensor '" + t.name + "' has " + std::to_string(ndim) + " dimensions");
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
      r.corrupt("tensor '" + t.name + "' shape does not match its " +
                std::to_string(t.values.size()) + " values");
  }
  return t;
}

// The payload: tensors, RNG state, data loader position and meta entries, read to its end.
void read_payload(RankFileReader& r, RankCheckpoint& c) {
  const std::uint64_t tensors = r.count(8 + 8 + 8, "tensor");
  for (std::uint64_t i = 0; i < tensors; ++i) c.buffers.push_back(read_tensor(r));
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
  if (r.remaining() != 0)
    r.corrupt(std::to_string(r.remaining()) + " unread bytes at the end of the payload");
}

void check_crc(RankFileReader& r, const fs::path& path) {
  const std::uint32_t computed = r.crc();
  const std::uint32_t stored = r.stored_crc();
  if (stored != computed) {
    char b[96];
    std::snprintf(b, sizeof b,
                  "checksum mismatch (stored %08x, computed %08x): the file is corrupted", stored,
                  computed);
    bad_file(path, b);
  }
}

// The header's reserved field is zero and its rank, world and step are the ones asked for.
void check_header_matches(const RankFileHeader& h, const fs::path& path,
                          const CheckpointManifest& manifest, int rank) {
  if (h.reserved != 0)
    bad_file(path, "corrupted header (reserved field is " + std::to_string(h.reserved) + ")");
  if (h.rank != static_cast<std::uint32_t>(rank))
    bad_file(path, "holds rank " + std::to_string(h.rank) + ", expected " + std::to_string(rank));
  if (h.world != static_cast<std::uint32_t>(manifest.world) || h.step != manifest.step)
    bad_file(path, "belongs to a checkpoint of world " + std::to_string(h.world) + " at step " +
                       std::to_string(h.step) + ", the manifest says world " +
                       std::to_string(manifest.world) + " at step " +
                       std::to_string(manifest.step));
}

RankCheckpoint read_rank_file(const fs::path& path, const CheckpointManifest& manifest, int rank) {
  InputFile file(path, " (the manifest says world = " + std::to_string(manifest.world) + ")");
  const std::uint64_t size = file.size();
  if (size < kHeaderBytes + kTrailerBytes)
    bad_file(path, "truncated (" + std::to_string(size) + " bytes, shorter than the " +
                       std::to_string(kHeaderBytes + kTrailerBytes) + "-byte header and checksum)");
  RankFileReader r(file);
  const RankFileHeader header = read_header(r, path, size);
  RankCheckpoint c;
  c.rank = rank;
  read_payload(r, c);
  check_crc(r, path);
  check_header_matches(header, path, manifest, rank);
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

CheckpointManifest read_checkpoint_manifest(const fs::path& dir) {
  check_directory(dir);
  const fs::path path = dir / kManifestName;
  InputFile file(path, "");
  if (file.size() > kMaxManifestBytes)
    bad_file(path, "too large for a manifest (" + std::to_string(file.size()) + " bytes)");
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  file.read(text.data(), text.size());
  return parse_manifest_text(text, path);
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

}  // namespace pipetune::checkpoint
