// Checkpoints. The format on its own: everything round-trips bit for bit (NaN payloads, empty
// tensors, rng and loader state, meta); every truncation, flipped byte, bad magic or version,
// absurd length and manifest/rank-file disagreement is an InputError naming the file; a failed
// write (unwritable parent, disk full, a file or foreign directory in the way) is a runtime error
// that leaves the old checkpoint or none and no temporary directory. Through the trainer:
// checkpoint_resume_test.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/data/random.hpp"
#include "engine/errors.hpp"
#include "tests/engine/checkpoint/checkpoint_test_support.hpp"

namespace pipetune::checkpoint {
namespace {

using test_support::expect_input_error;
using test_support::read_file;
using test_support::ScratchTest;
using test_support::write_file;

namespace fs = std::filesystem;

// ---- helpers --------------------------------------------------------------------------------

void write_text(const fs::path& p, const std::string& text) {
  write_file(p, std::vector<char>(text.begin(), text.end()));
}

std::string read_text(const fs::path& p) {
  const std::vector<char> b = read_file(p);
  return {b.begin(), b.end()};
}

std::uint64_t get_le(const std::vector<char>& b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
  return v;
}

void put_le(std::vector<char>& b, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Rewrites the CRC trailer so that a deliberate edit reaches the checks behind the checksum.
void fix_crc(std::vector<char>& b) {
  put_le(b, b.size() - 4, crc32(b.data(), b.size() - 4), 4);
}

std::vector<float> floats_from_bits(const std::vector<std::uint32_t>& bits) {
  std::vector<float> v(bits.size());
  std::memcpy(v.data(), bits.data(), bits.size() * sizeof(float));  // no float register on the way
  return v;
}

const std::vector<std::uint32_t> kSpecialBits = {
    0x7fc00000u,  // quiet NaN
    0x7fc00001u,  // quiet NaN with a payload
    0xffc12345u,  // negative quiet NaN with a payload
    0x7f800001u,  // signalling NaN
    0x7f800000u,  // +inf
    0xff800000u,  // -inf
    0x80000000u,  // -0
    0x00000001u,  // smallest subnormal
};

CheckpointManifest sample_manifest(int world, std::int64_t step = 7) {
  CheckpointManifest m;
  m.step = step;
  m.world = world;
  m.model = "tiny gpt";
  m.plan =
      "{\n  \"tp\": 2,\t\"note\": \"a\\\\b\r\x01\x7f\"\n}  ";  // JSON, escapes, trailing spaces
  m.seed = std::numeric_limits<std::uint64_t>::max();
  return m;
}

// A rank of every kind of content; `big_floats` adds a tensor larger than the I/O buffer.
RankCheckpoint sample_rank(int rank, std::size_t big_floats = 0) {
  RankCheckpoint c;
  c.rank = rank;
  c.buffers.push_back({"w", {0.5f, 1, 2, 3, 4, static_cast<float>(rank)}, {2, 3}});
  c.buffers.push_back({"empty", {}, {0}});
  c.buffers.push_back({"empty 3d", {}, {4, 0, 2}});
  c.buffers.push_back({"flat", {1, 2, 3, 4, 5}, {}});
  c.buffers.push_back({"flat empty", {}, {}});
  c.buffers.push_back({"scalar", {42}, {1}});
  c.buffers.push_back({"special", floats_from_bits(kSpecialBits), {2, 2, 2}});
  c.buffers.push_back({"", {-1}, {}});
  if (big_floats > 0) {
    std::vector<float> big(big_floats);
    data::Xoshiro256 g(static_cast<std::uint64_t>(rank));
    for (float& f : big) f = std::bit_cast<float>(static_cast<std::uint32_t>(g.next()));
    c.buffers.push_back({"big", std::move(big), {}});
  }
  data::Xoshiro256 g(1000 + static_cast<std::uint64_t>(rank));
  for (int i = 0; i < 4; ++i) c.rng_state.push_back(g.next());
  c.loader = {rank, 2, 1000 + rank, 4096};
  c.meta = {{"a", "b"}, {"", "empty key"}, {"bytes", std::string("x\0y\n\xff", 5)}, {"k", ""}};
  return c;
}

std::vector<RankCheckpoint> sample_ranks(int world, std::size_t big_floats = 0) {
  std::vector<RankCheckpoint> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(sample_rank(r, big_floats));
  return ranks;
}

void expect_same_rank(const RankCheckpoint& want, const RankCheckpoint& got) {
  EXPECT_EQ(got.rank, want.rank);
  ASSERT_EQ(got.buffers.size(), want.buffers.size());
  for (std::size_t i = 0; i < want.buffers.size(); ++i) {
    const NamedTensor& a = want.buffers[i];
    const NamedTensor& b = got.buffers[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.shape, a.shape) << a.name;
    ASSERT_EQ(b.values.size(), a.values.size()) << a.name;
    if (a.values.empty()) continue;  // memcmp must not see the null data() of an empty one
    EXPECT_EQ(std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)), 0)
        << "tensor '" << a.name << "' differs bit-wise";
  }
  EXPECT_EQ(got.rng_state, want.rng_state);
  EXPECT_EQ(got.loader, want.loader);
  EXPECT_EQ(got.meta, want.meta);
}

void expect_same_manifest(const CheckpointManifest& want, const CheckpointManifest& got) {
  EXPECT_EQ(got.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.world, want.world);
  EXPECT_EQ(got.model, want.model);
  EXPECT_EQ(got.plan, want.plan);
  EXPECT_EQ(got.seed, want.seed);
}

// Runs `f`, which must throw a runtime error that is not an InputError, naming `fragment`.
void expect_write_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected a runtime error";
  } catch (const InputError& e) {
    ADD_FAILURE() << "a write failure is not an InputError: " << e.what();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// Simulates a full disk: files may not grow past `bytes` (EFBIG) while this lives.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    previous_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, previous_);
  }

 private:
  rlimit old_{};
  sighandler_t previous_ = nullptr;
};

// ---- the format -----------------------------------------------------------------------------

using CheckpointFormatTest = ScratchTest;

TEST(CheckpointCrc, MatchesZlibCrc32) {
  EXPECT_EQ(crc32("", 0), 0u);
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(crc32("The quick brown fox jumps over the lazy dog", 43), 0x414FA339u);
  // Slicing by 8 against the bit-at-a-time definition, at every length and alignment to 40.
  std::vector<unsigned char> bytes(64);
  data::Xoshiro256 g(3);
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(g.next());
  for (std::size_t start = 0; start < 8; ++start)
    for (std::size_t len = 0; start + len <= 48; ++len) {
      std::uint32_t c = 0xffffffffu;
      for (std::size_t i = start; i < start + len; ++i) {
        c ^= bytes[i];
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
      }
      ASSERT_EQ(crc32(bytes.data() + start, len), ~c) << start << "+" << len;
      ASSERT_EQ(crc32(bytes.data() + start + len / 2, len - len / 2,
                      crc32(bytes.data() + start, len / 2)),
                ~c)
          << "chained";
    }
}

TEST_F(CheckpointFormatTest, RoundTripPreservesEveryBit) {
  const CheckpointManifest manifest = sample_manifest(3, 123456789012);
  std::vector<RankCheckpoint> ranks = sample_ranks(3);
  ranks[1] = sample_rank(1, 600'000);  // 2.4 MB: more than one I/O buffer
  std::swap(ranks[0], ranks[2]);       // any order
  write_checkpoint(dir_ / "ck", manifest, ranks);
  std::swap(ranks[0], ranks[2]);

  const LoadedCheckpoint loaded = read_checkpoint(dir_ / "ck");
  expect_same_manifest(manifest, loaded.manifest);
  expect_same_manifest(manifest, read_checkpoint_manifest(dir_ / "ck"));
  ASSERT_EQ(loaded.ranks.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_same_rank(ranks[static_cast<std::size_t>(r)], loaded.ranks[static_cast<std::size_t>(r)]);
    expect_same_rank(ranks[static_cast<std::size_t>(r)], read_rank_checkpoint(dir_ / "ck", r));
  }
  const NamedTensor* special = loaded.ranks[0].find("special");
  ASSERT_NE(special, nullptr);
  EXPECT_TRUE(std::isnan(special->values[0]));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(special->values[3]), 0x7f800001u);
  EXPECT_EQ(loaded.ranks[0].find("missing"), nullptr);
  EXPECT_EQ(entries(), std::vector<std::string>{"ck"}) << "temporary directory left behind";
  EXPECT_EQ(entries(dir_ / "ck"), (std::vector<std::string>{"manifest.txt", "rank-00000.bin",
                                                            "rank-00001.bin", "rank-00002.bin"}));
}

TEST_F(CheckpointFormatTest, FilesFollowTheDocumentedLayout) {
  const CheckpointManifest manifest = sample_manifest(2, 9);
  write_checkpoint(dir_ / "ck", manifest, sample_ranks(2));
  const std::vector<char> b = read_file(dir_ / "ck" / "rank-00001.bin");
  ASSERT_GE(b.size(), 44u);
  EXPECT_EQ(std::string(b.data(), 8), "PTCKRANK");
  EXPECT_EQ(get_le(b, 8, 4), 2u);   // version
  EXPECT_EQ(get_le(b, 12, 4), 1u);  // rank
  EXPECT_EQ(get_le(b, 16, 4), 2u);  // world
  EXPECT_EQ(get_le(b, 20, 4), 0u);  // reserved
  EXPECT_EQ(get_le(b, 24, 8), 9u);  // step
  EXPECT_EQ(get_le(b, 32, 8), b.size() - 44);
  EXPECT_EQ(get_le(b, 40, 8), 8u);           // tensors
  EXPECT_EQ(get_le(b, 48, 8), 1u);           // name bytes
  EXPECT_EQ(b[56], 'w');                     // name
  EXPECT_EQ(get_le(b, 57, 8), 2u);           // ndim
  EXPECT_EQ(get_le(b, 65, 8), 2u);           // dims
  EXPECT_EQ(get_le(b, 73, 8), 3u);           //
  EXPECT_EQ(get_le(b, 81, 8), 6u);           // values
  EXPECT_EQ(get_le(b, 89, 4), 0x3f000000u);  // 0.5f, little-endian
  EXPECT_EQ(get_le(b, b.size() - 4, 4), crc32(b.data(), b.size() - 4));
  EXPECT_EQ(read_text(dir_ / "ck" / "manifest.txt"),
            "# pipetune checkpoint\nformat = 2\nstep = 9\nworld = 2\nmodel = tiny gpt\n"
            "plan = {\\n  \"tp\": 2,\\t\"note\": \"a\\\\\\\\b\\r\\x01\\x7f\"\\n}  \n"
            "seed = 18446744073709551615\n");
}

TEST_F(CheckpointFormatTest, OverwriteReplacesTheOldCheckpointWhole) {
  const fs::path ck = dir_ / "ck";
  write_checkpoint(ck, sample_manifest(2, 1), sample_ranks(2));
  write_checkpoint(ck, sample_manifest(3, 2), sample_ranks(3));
  LoadedCheckpoint loaded = read_checkpoint(ck);
  EXPECT_EQ(loaded.manifest.step, 2);
  EXPECT_EQ(loaded.ranks.size(), 3u);
  write_checkpoint(ck, sample_manifest(1, 3), sample_ranks(1));  // fewer ranks: no stale files
  loaded = read_checkpoint(ck);
  EXPECT_EQ(loaded.manifest.step, 3);
  EXPECT_EQ(entries(ck), (std::vector<std::string>{"manifest.txt", "rank-00000.bin"}));
  EXPECT_EQ(entries(), std::vector<std::string>{"ck"}) << "old or temporary directories left";
  fs::create_directory(dir_ / "empty");  // an empty directory may be taken over
  write_checkpoint(dir_ / "empty", sample_manifest(1), sample_ranks(1));
  EXPECT_EQ(read_checkpoint(dir_ / "empty").ranks.size(), 1u);
}

TEST_F(CheckpointFormatTest, DiskFullKeepsTheOldCheckpointAndLeavesNoTemporaryDirectory) {
  const fs::path ck = dir_ / "ck";
  write_checkpoint(ck, sample_manifest(2, 1), sample_ranks(2));
  {
    FileSizeLimit full(64 * 1024);  // rank files of 4 MB cannot be written
    expect_write_error(
        [&] { write_checkpoint(ck, sample_manifest(2, 2), sample_ranks(2, 1 << 20)); },
        "rank-00000.bin");
    expect_write_error(
        [&] { write_checkpoint(dir_ / "fresh", sample_manifest(2, 2), sample_ranks(2, 1 << 20)); },
        ".tmp-");
  }
  const LoadedCheckpoint old = read_checkpoint(ck);
  EXPECT_EQ(old.manifest.step, 1);
  expect_same_rank(sample_rank(1), old.ranks[1]);
  EXPECT_EQ(entries(), std::vector<std::string>{"ck"});
}

TEST_F(CheckpointFormatTest, TruncatedRankFileIsAnInputErrorAtEveryCut) {
  write_checkpoint(dir_ / "ck", sample_manifest(2), sample_ranks(2));
  const fs::path f = dir_ / "ck" / "rank-00001.bin";
  const std::vector<char> whole = read_file(f);
  const std::size_t size = whole.size();
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{39},
                          std::size_t{40}, std::size_t{43}, std::size_t{44}, std::size_t{100},
                          size / 2, size - 5, size - 4, size - 1}) {
    write_file(f, std::vector<char>(whole.begin(), whole.begin() + static_cast<long>(cut)));
    const std::string context = "cut at " + std::to_string(cut) + " of " + std::to_string(size);
    expect_input_error([&] { (void)read_checkpoint(dir_ / "ck"); }, {"rank-00001.bin"}, context);
    expect_input_error([&] { (void)read_rank_checkpoint(dir_ / "ck", 1); }, {"truncated"}, context);
  }
  std::vector<char> padded = whole;
  padded.push_back('\0');
  write_file(f, padded);
  expect_input_error([&] { (void)read_checkpoint(dir_ / "ck"); }, {"rank-00001.bin", "padded"});
}

TEST_F(CheckpointFormatTest, EveryFlippedByteIsAnInputError) {
  write_checkpoint(dir_ / "ck", sample_manifest(2), sample_ranks(2));
  const fs::path f = dir_ / "ck" / "rank-00000.bin";
  const std::vector<char> whole = read_file(f);
  for (std::size_t at = 0; at < whole.size(); ++at) {
    for (unsigned char mask : {0x01, 0x80}) {
      std::vector<char> b = whole;
      b[at] = static_cast<char>(b[at] ^ mask);
      write_file(f, b);
      expect_input_error([&] { (void)read_rank_checkpoint(dir_ / "ck", 0); }, {"rank-00000.bin"},
                         "byte " + std::to_string(at));
    }
  }
  std::vector<char> b = whole;
  b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x10);
  write_file(f, b);
  expect_input_error([&] { (void)read_checkpoint(dir_ / "ck"); }, {"rank-00000.bin", "checksum"});
}

TEST_F(CheckpointFormatTest, WrongMagicAndUnsupportedVersion) {
  write_checkpoint(dir_ / "ck", sample_manifest(1), sample_ranks(1));
  const fs::path f = dir_ / "ck" / "rank-00000.bin";
  const std::vector<char> whole = read_file(f);
  std::vector<char> b = whole;
  std::memcpy(b.data(), "XXXX", 4);
  write_file(f, b);
  expect_input_error([&] { (void)read_checkpoint(dir_ / "ck"); }, {"rank-00000.bin", "bad magic"});
  b = whole;
  put_le(b, 8, 7, 4);
  fix_crc(b);
  write_file(f, b);
  expect_input_error([&] { (void)read_checkpoint(dir_ / "ck"); },
                     {"rank-00000.bin", "version 7 is not supported"});
  write_file(f, std::vector<char>(100, 'z'));
  expect_input_error([&] { (void)read_checkpoint(dir_ / "ck"); }, {"bad magic"});
}

TEST_F(CheckpointFormatTest, AbsurdLengthsAreRefusedBeforeAllocating) {
  // Edits behind a valid CRC, so only the bounds checks stand between them and a huge allocation
  // (which AddressSanitizer would report).
  write_checkpoint(dir_ / "ck", sample_manifest(1), sample_ranks(1));
  const fs::path f = dir_ / "ck" / "rank-00000.bin";
  const std::vector<char> whole = read_file(f);
  struct Edit {
    std::size_t at;
    std::uint64_t value;
    const char* expect;
  };
  for (const Edit& e :
       {Edit{40, 1ull << 40, "tensor count"}, Edit{48, ~0ull, "name byte count"},
        Edit{57, 1ull << 61, "dimension count"}, Edit{57, 65, "dimension"},
        Edit{81, 1ull << 61, "value count"}, Edit{81, 5, "shape"}, Edit{65, ~0ull, "shape"}}) {
    std::vector<char> b = whole;
    put_le(b, e.at, e.value, 8);
    fix_crc(b);
    write_file(f, b);
    expect_input_error([&] { (void)read_checkpoint(dir_ / "ck"); }, {"rank-00000.bin", e.expect},
                       "field at " + std::to_string(e.at));
  }
  std::vector<char> b = whole;  // header and file disagree on the payload size
  put_le(b, 32, 1ull << 62, 8);
  write_file(f, b);
  expect_input_error([&] { (void)read_checkpoint(dir_ / "ck"); }, {"truncated or padded"});
}

TEST_F(CheckpointFormatTest, MissingOrMismatchedRankFiles) {
  const fs::path ck = dir_ / "ck";
  write_checkpoint(ck, sample_manifest(2), sample_ranks(2));
  const std::string manifest = read_text(ck / "manifest.txt");
  auto with_world = [&](int world) {
    std::string text = manifest;
    const auto at = text.find("world = 2");
    text.replace(at, 9, "world = " + std::to_string(world));
    write_text(ck / "manifest.txt", text);
  };
  // The manifest names world = 3, the directory holds 2 rank files.
  with_world(3);
  expect_input_error([&] { (void)read_checkpoint(ck); },
                     {"rank-00002.bin", "missing", "world = 3"});
  expect_input_error([&] { (void)read_rank_checkpoint(ck, 0); }, {"rank-00000.bin", "world 2"});
  // The manifest names world = 1: rank-00001.bin does not belong.
  with_world(1);
  expect_input_error([&] { (void)read_checkpoint(ck); }, {"rank-00001.bin", "beyond"});
  expect_input_error([&] { (void)read_rank_checkpoint(ck, 1); }, {"outside"});
  with_world(2);
  (void)read_checkpoint(ck);
  // A rank file under another rank's name.
  fs::copy_file(ck / "rank-00000.bin", ck / "rank-00001.bin", fs::copy_options::overwrite_existing);
  expect_input_error([&] { (void)read_checkpoint(ck); }, {"rank-00001.bin", "holds rank 0"});
  fs::remove(ck / "rank-00001.bin");
  expect_input_error([&] { (void)read_checkpoint(ck); }, {"rank-00001.bin", "missing"});
  expect_input_error([&] { (void)read_rank_checkpoint(ck, 1); }, {"rank-00001.bin", "missing"});
  fs::create_directory(ck / "rank-00001.bin");
  expect_input_error([&] { (void)read_checkpoint(ck); }, {"rank-00001.bin", "not a regular"});
}

TEST_F(CheckpointFormatTest, BadManifestsAreInputErrors) {
  const fs::path ck = dir_ / "ck";
  write_checkpoint(ck, sample_manifest(1), sample_ranks(1));
  const std::string good = read_text(ck / "manifest.txt");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  struct Case {
    std::string text;
    const char* expect;
  };
  for (const Case& c : std::vector<Case>{
           {"", "missing key 'format'"},
           {replace("format = 2", "format = 1"), "format 1 is not supported"},
           {replace("format = 2", "format = 3\nshards = 4"), "format 3 is not supported"},
           {replace("step = 7", "step = seven"), "'step' is not a valid number"},
           {replace("step = 7", "step = -7"), "negative"},
           {replace("step = 7", "step = 7x"), "not a valid number"},
           {replace("world = 1", "world = 0"), "world 0 is outside"},
           {replace("seed = 18446744073709551615", "seed = 18446744073709551616"), "'seed'"},
           {replace("model = tiny gpt\n", ""), "missing key 'model'"},
           {replace("model = tiny gpt", "model = a\nmodel = b"), "'model' is repeated"},
           {replace("model = tiny gpt", "garbage"), "expected 'key = value'"},
           {replace("model = tiny gpt", "model = a\\q"), "bad escape"},
           {replace("model = tiny gpt", "model = a\\x4"), "bad escape"},
           {replace("model = tiny gpt", "model = a\nextra = 1"), "unknown key 'extra'"},
       }) {
    write_text(ck / "manifest.txt", c.text);
    expect_input_error([&] { (void)read_checkpoint_manifest(ck); }, {"manifest.txt", c.expect},
                       c.expect);
  }
  write_text(ck / "manifest.txt", replace("model = tiny gpt\n", "\r\n# note\nmodel =\r\n"));
  EXPECT_EQ(read_checkpoint_manifest(ck).model, "");  // CRLF, comments, an empty value
  fs::remove(ck / "manifest.txt");
  expect_input_error([&] { (void)read_checkpoint(ck); }, {"manifest.txt", "missing"});
  expect_input_error([&] { (void)read_checkpoint(dir_ / "nope"); }, {"nope", "does not exist"});
  write_text(dir_ / "file", "x");
  expect_input_error([&] { (void)read_checkpoint(dir_ / "file"); }, {"file", "not a directory"});
}

TEST_F(CheckpointFormatTest, UnwritableParentIsARuntimeErrorAndLeavesNothing) {
  if (::geteuid() != 0) {  // root writes anywhere chmod allows nothing
    fs::create_directory(dir_ / "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    expect_write_error(
        [&] { write_checkpoint(dir_ / "ro" / "ck", sample_manifest(1), sample_ranks(1)); }, "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_all);
    EXPECT_TRUE(entries(dir_ / "ro").empty());
  }
  // sysfs refuses new directories even to root.
  if (!fs::is_directory("/sys")) GTEST_SKIP() << "no /sys";
  const std::string name = "pipetune_ckpt_" + std::to_string(::getpid());
  expect_write_error(
      [&] { write_checkpoint(fs::path("/sys") / name, sample_manifest(1), sample_ranks(1)); },
      "/sys");
  for (const auto& e : fs::directory_iterator("/sys"))
    EXPECT_EQ(e.path().filename().string().find(name), std::string::npos) << e.path();
}

TEST_F(CheckpointFormatTest, SomethingElseInTheWayIsARuntimeError) {
  // A regular file named like the target.
  write_text(dir_ / "ck", "not a checkpoint");
  expect_write_error([&] { write_checkpoint(dir_ / "ck", sample_manifest(1), sample_ranks(1)); },
                     "is a file, not a directory");
  EXPECT_THROW(check_checkpoint_destination(dir_ / "ck"), std::runtime_error);
  EXPECT_EQ(read_text(dir_ / "ck"), "not a checkpoint");
  // A parent that is a file, or missing.
  expect_write_error(
      [&] { write_checkpoint(dir_ / "ck" / "sub", sample_manifest(1), sample_ranks(1)); },
      "not a directory");
  expect_write_error(
      [&] { write_checkpoint(dir_ / "missing" / "ck", sample_manifest(1), sample_ranks(1)); },
      "missing");
  // A directory that is not a checkpoint is never replaced.
  fs::create_directory(dir_ / "notes");
  write_text(dir_ / "notes" / "todo.txt", "keep me");
  expect_write_error([&] { write_checkpoint(dir_ / "notes", sample_manifest(1), sample_ranks(1)); },
                     "todo.txt");
  EXPECT_EQ(read_text(dir_ / "notes" / "todo.txt"), "keep me");
  expect_write_error([&] { write_checkpoint("/", sample_manifest(1), sample_ranks(1)); }, "/");
  EXPECT_EQ(entries(), (std::vector<std::string>{"ck", "notes"}));
  EXPECT_NO_THROW(check_checkpoint_destination(dir_ / "fresh"));
  EXPECT_EQ(entries(), (std::vector<std::string>{"ck", "notes"}));
}

TEST_F(CheckpointFormatTest, TrailingSlashAndSymbolicLinkNameTheSameCheckpoint) {
  write_checkpoint(dir_ / "real" / "", sample_manifest(1, 1), sample_ranks(1));
  EXPECT_EQ(read_checkpoint_manifest(dir_ / "real").step, 1);
  fs::create_directory_symlink(dir_ / "real", dir_ / "link");
  write_checkpoint(dir_ / "link", sample_manifest(1, 2), sample_ranks(1));
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
  EXPECT_EQ(read_checkpoint_manifest(dir_ / "real").step, 2);
  EXPECT_EQ(entries(), (std::vector<std::string>{"link", "real"}));
}

TEST_F(CheckpointFormatTest, InconsistentArgumentsWriteNothing) {
  const fs::path ck = dir_ / "ck";
  auto expect_invalid = [&](const CheckpointManifest& m, const std::vector<RankCheckpoint>& r,
                            const char* fragment) {
    try {
      write_checkpoint(ck, m, r);
      ADD_FAILURE() << "expected std::invalid_argument: " << fragment;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_invalid(sample_manifest(2), sample_ranks(1), "1 ranks given for world 2");
  std::vector<RankCheckpoint> twice = sample_ranks(2);
  twice[1].rank = 0;
  expect_invalid(sample_manifest(2), twice, "rank 0 is given twice");
  twice[1].rank = 5;
  expect_invalid(sample_manifest(2), twice, "rank 5 is outside");
  std::vector<RankCheckpoint> shape = sample_ranks(1);
  shape[0].buffers[0].shape = {4, 2};
  expect_invalid(sample_manifest(1), shape, "'w' has 6 values");
  shape[0].buffers[0].shape = {-2, -3};
  expect_invalid(sample_manifest(1), shape, "negative");
  std::vector<RankCheckpoint> names = sample_ranks(1);
  names[0].buffers[1].name = "w";
  expect_invalid(sample_manifest(1), names, "'w' is given twice");
  expect_invalid(sample_manifest(1, -1), sample_ranks(1), "negative");
  EXPECT_TRUE(entries().empty());
}

}  // namespace
}  // namespace pipetune::checkpoint
