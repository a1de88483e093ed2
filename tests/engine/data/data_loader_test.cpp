// The DataLoader: batch contents against the stream, the dp split (ranks' micro-batches in rank
// order equal the single-rank global batch), exact resume from state(), and llm.c shard handling
// (several files, sample boundaries, epochs, bad files).
#include "engine/data/data_loader.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <limits>
#include <numeric>

#include "engine/errors.hpp"
#include "tests/engine/data/data_test_helpers.hpp"

namespace pipetune::data {
namespace {

using testing::ScratchDir;

std::shared_ptr<const SyntheticCorpus> small_corpus() {
  SyntheticCorpusConfig c;
  c.document_length = 1000;  // samples cross document boundaries
  return std::make_shared<const SyntheticCorpus>(c);
}

LoaderConfig config(int64_t B, int64_t T, int rank = 0, int dp = 1) {
  return {B, T, rank, dp};
}

// Concatenates the rows of several (B_i, T) batches.
Batch concat(const std::vector<Batch>& parts) {
  Batch out{0, parts.at(0).seq_len, {}, {}};
  for (const auto& p : parts) {
    out.batch_size += p.batch_size;
    out.inputs.insert(out.inputs.end(), p.inputs.begin(), p.inputs.end());
    out.targets.insert(out.targets.end(), p.targets.begin(), p.targets.end());
  }
  return out;
}

void expect_same(const Batch& a, const Batch& b, const std::string& where) {
  EXPECT_EQ(a.batch_size, b.batch_size) << where;
  EXPECT_EQ(a.seq_len, b.seq_len) << where;
  EXPECT_EQ(a.inputs, b.inputs) << where;
  EXPECT_EQ(a.targets, b.targets) << where;
}

TEST(DataLoaderTest, BatchesFollowTheStreamWithShiftedTargets) {
  const auto corpus = small_corpus();
  const int64_t B = 3, T = 16;
  auto loader = make_synthetic_loader(corpus, config(B, T, 1, 2));
  for (int64_t step = 0; step < 4; ++step) {
    const Batch b = loader.next();
    ASSERT_EQ(b.inputs.size(), static_cast<size_t>(B * T));
    // llm.c layout: micro-step `step` of rank 1 of 2 starts at (step * 2 + 1) * B * T.
    const auto expected = corpus->tokens((step * 2 + 1) * B * T, B * T + 1);
    EXPECT_TRUE(std::equal(b.inputs.begin(), b.inputs.end(), expected.begin()));
    EXPECT_TRUE(std::equal(b.targets.begin(), b.targets.end(), expected.begin() + 1));
  }
}

TEST(DataLoaderTest, RanksInOrderEqualTheSingleRankGlobalBatch) {
  const auto corpus = small_corpus();
  const int64_t B = 2, T = 8;
  for (int dp : {2, 3, 4}) {
    std::vector<DataLoader> ranks;
    for (int r = 0; r < dp; ++r)
      ranks.push_back(make_synthetic_loader(corpus, config(B, T, r, dp)));
    auto wide = make_synthetic_loader(corpus, config(B * dp, T));  // dp=1, micro-batch B*dp
    auto narrow = make_synthetic_loader(corpus, config(B, T));     // dp=1, dp micro-steps each
    for (int step = 0; step < 5; ++step) {
      std::vector<Batch> parts;
      for (auto& r : ranks) parts.push_back(r.next());
      const std::string where = "dp=" + std::to_string(dp) + " step " + std::to_string(step);
      expect_same(concat(parts), wide.next(), where);
      for (int r = 0; r < dp; ++r)
        expect_same(parts[r], narrow.next(), where + " rank " + std::to_string(r));
    }
  }
}

TEST(DataLoaderTest, RestoreMidStreamRepeatsTheNextBatchesBitForBit) {
  const auto corpus = small_corpus();
  auto a = make_synthetic_loader(corpus, config(4, 32, 1, 2));
  for (int i = 0; i < 7; ++i) a.next();
  const LoaderState saved = a.state();
  std::vector<Batch> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(a.next());

  auto b = make_synthetic_loader(corpus, config(4, 32, 1, 2));
  b.restore(saved);
  EXPECT_EQ(b.state(), saved);
  for (int i = 0; i < 6; ++i) expect_same(b.next(), expected[i], "batch " + std::to_string(i));
  EXPECT_EQ(b.state(), a.state());

  // Every rank is at the same position, so a checkpoint can store any rank's.
  auto rank0 = make_synthetic_loader(corpus, config(4, 32, 0, 2));
  for (int i = 0; i < 7; ++i) rank0.next();
  EXPECT_EQ(rank0.state(), saved);
}

TEST(DataLoaderTest, RestoreRefusesAForeignState) {
  const auto corpus = small_corpus();
  auto loader = make_synthetic_loader(corpus, config(4, 32));
  LoaderState s = loader.state();
  s.sample_tokens = 4 * 32 * 2;  // saved with dp=2
  EXPECT_THROW(loader.restore(s), InputError);
  s = loader.state();
  s.part = 1;  // the synthetic source has one part
  EXPECT_THROW(loader.restore(s), InputError);
}

// A checkpoint's position on the synthetic stream is refused when its sample's tokens would run
// past the last int64 position: sample * B*T*dp used to overflow (a sample of 2^62 at B*T*dp =
// 128 trained from a wrapped position). The last sample that fits is read and wraps the epoch.
TEST(DataLoaderTest, RestoreRefusesASampleWhoseTokensOverflowTheStream) {
  const auto corpus = small_corpus();
  const int64_t B = 4, T = 32, st = B * T;  // dp = 1
  auto loader = make_synthetic_loader(corpus, config(B, T));
  // Closed form: the last sample s has s*st + st + 1 <= INT64_MAX < (s+1)*st + st + 1.
  const int64_t last = loader.samples_in_part(0) - 1;
  const __int128 max = std::numeric_limits<int64_t>::max();
  EXPECT_LE(static_cast<__int128>(last) * st + st + 1, max);
  EXPECT_GT(static_cast<__int128>(last + 1) * st + st + 1, max);

  loader.restore({3, 0, last, st});
  const Batch b = loader.next();
  const auto expected = corpus->tokens(last * st, B * T + 1);
  EXPECT_TRUE(std::equal(b.inputs.begin(), b.inputs.end(), expected.begin()));
  EXPECT_TRUE(std::equal(b.targets.begin(), b.targets.end(), expected.begin() + 1));
  EXPECT_EQ(loader.state(), (LoaderState{4, 0, 0, st}));  // the next pass begins

  EXPECT_THROW(loader.restore({0, 0, last + 1, st}), InputError);
  EXPECT_THROW(loader.restore({0, 0, int64_t{1} << 62, st}), InputError);
  EXPECT_THROW(loader.restore({0, 0, std::numeric_limits<int64_t>::max(), st}), InputError);
  // An epoch count no run reaches is refused too, so counting on from it cannot overflow.
  loader.restore({DataLoader::kMaxEpoch, 0, 5, st});
  EXPECT_THROW(loader.restore({DataLoader::kMaxEpoch + 1, 0, 5, st}), InputError);
  EXPECT_THROW(loader.restore({-1, 0, 5, st}), InputError);
}

TEST(DataLoaderTest, BadConfigIsAnInputError) {
  const auto corpus = small_corpus();
  EXPECT_THROW(make_synthetic_loader(corpus, config(0, 8)), InputError);
  EXPECT_THROW(make_synthetic_loader(corpus, config(2, 8, 2, 2)), InputError);
  EXPECT_THROW(make_synthetic_loader(nullptr, config(2, 8)), InputError);
}

// Shards whose tokens are their global position, so every batch says where it came from.
std::vector<std::string> counting_shards(const ScratchDir& dir, const std::vector<int>& sizes) {
  std::vector<std::string> paths;
  int32_t next = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<int32_t> tokens(static_cast<size_t>(sizes[i]));
    std::iota(tokens.begin(), tokens.end(), next);
    next += sizes[i];
    paths.push_back(dir.file("train_" + std::to_string(i) + ".bin"));
    write_llmc_shard(paths.back(), tokens);
  }
  return paths;
}

TEST(DataLoaderTest, ShardsAreReadInOrderAndWrapIntoTheNextEpoch) {
  ScratchDir dir;
  // B*T*dp = 2*4*2 = 16 tokens a sample: shard 0 holds 2 samples (40-1 = 39 tokens usable),
  // shard 1 is too small and skipped, shard 2 holds 1 (the 17th token is needed as a target).
  counting_shards(dir, {40, 10, 17});
  const std::string pattern = (dir.path() / "train_*.bin").string();
  auto r0 = make_shard_loader(pattern, 1000, config(2, 4, 0, 2));
  auto r1 = make_shard_loader(pattern, 1000, config(2, 4, 1, 2));
  EXPECT_EQ(r0.samples_in_part(0), 2);
  EXPECT_EQ(r0.samples_in_part(1), 0);
  EXPECT_EQ(r0.samples_in_part(2), 1);
  // First input token of each micro-step: sample starts 0, 16 in shard 0, then 50 in shard 2, then
  // shard 0 again; rank 1 is 8 tokens further.
  const std::vector<int32_t> starts = {0, 16, 50, 0, 16};
  for (size_t k = 0; k < starts.size(); ++k) {
    const Batch b0 = r0.next(), b1 = r1.next();
    EXPECT_EQ(b0.inputs.front(), starts[k]) << "micro-step " << k;
    EXPECT_EQ(b1.inputs.front(), starts[k] + 8) << "micro-step " << k;
    EXPECT_EQ(b1.targets.back(), starts[k] + 16) << "micro-step " << k;
  }
  // Past shard 0's last sample and the empty shard 1: the position already sits on shard 2.
  EXPECT_EQ(r0.state(), (LoaderState{1, 2, 0, 16}));

  // Resume mid-epoch in the last shard.
  auto again = make_shard_loader(pattern, 1000, config(2, 4, 1, 2));
  again.restore({0, 2, 0, 16});
  EXPECT_EQ(again.next().inputs.front(), 58);
  EXPECT_EQ(again.state(), (LoaderState{1, 0, 0, 16}));
}

TEST(DataLoaderTest, ExportedSyntheticShardReadsLikeTheCorpus) {
  ScratchDir dir;
  const auto corpus = small_corpus();
  write_llmc_shard(dir.file("syn.bin"), corpus->tokens(0, 4097));
  auto from_shard =
      make_shard_loader(dir.file("syn.bin"), corpus->vocab_size(), config(4, 64, 1, 2));
  auto from_corpus = make_synthetic_loader(corpus, config(4, 64, 1, 2));
  for (int i = 0; i < 8; ++i) expect_same(from_shard.next(), from_corpus.next(), std::to_string(i));
}

TEST(DataLoaderTest, ShardListsGlobsAndTheirErrors) {
  ScratchDir dir;
  const auto paths = counting_shards(dir, {40, 40, 40});
  EXPECT_EQ(find_shards((dir.path() / "train_*.bin").string()), paths);
  EXPECT_EQ(find_shards(paths[2] + "," + paths[0]), (std::vector<std::string>{paths[2], paths[0]}));
  EXPECT_THROW(find_shards((dir.path() / "val_*.bin").string()), InputError);
  EXPECT_THROW(find_shards(""), InputError);
  // A FIFO would block the open until a writer comes; a directory is no shard either.
  const std::string fifo = dir.file("train_fifo.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(find_shards(fifo), InputError);
  EXPECT_THROW(find_shards((dir.path() / "train_*.bin").string()), InputError);
  EXPECT_THROW(find_shards(dir.path().string()), InputError);
  // Every shard has fewer tokens than one global sample.
  EXPECT_THROW(make_shard_loader(paths[0], 1000, config(8, 8)), InputError);
}

TEST(DataLoaderTest, CorruptShardFailsAtStartAndBadTokenAtRead) {
  ScratchDir dir;
  const auto paths = counting_shards(dir, {40, 40});
  auto bytes = testing::read_bytes(paths[1]);
  bytes.resize(bytes.size() - 3);
  testing::write_bytes(paths[1], bytes);
  try {
    make_shard_loader(paths[0] + "," + paths[1], 1000, config(2, 4));
    FAIL() << "truncated shard accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(paths[1]), std::string::npos) << e.what();
  }
  // A shard of tokens 0..99 read with a vocabulary of 50: micro-step k reads tokens
  // [8k, 8k + 9), so steps 0..5 pass and step 6 meets token 50.
  std::vector<int32_t> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 0);
  write_llmc_shard(dir.file("big.bin"), tokens);
  auto loader = make_shard_loader(dir.file("big.bin"), 50, config(1, 8));
  for (int k = 0; k < 6; ++k) EXPECT_NO_THROW(loader.next()) << k;
  try {
    loader.next();
    FAIL() << "token outside the vocabulary accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token 50 at index 50 is outside vocabulary 50"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::data
