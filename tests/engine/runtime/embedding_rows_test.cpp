// The input embedding's touched rows in the measured trace (profiler/analysis/embedding_rows.hpp)
// against a closed form: the data cycles through a fixed set of tokens shorter than a sequence,
// so every replica's step touches exactly that set, on each tensor-parallel rank the part of it in
// its vocabulary shard, whatever the split and with or without the sparse gradient (which takes
// the rows per op under ZeRO-2).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "engine/data/llmc_shard.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "profiler/analysis/embedding_rows.hpp"
#include "tests/engine/data/data_test_helpers.hpp"

namespace pipetune::runtime {
namespace {

namespace an = profiler::analysis;

// Five tokens of the lower half of tiny's 512-token vocabulary and three of the upper half:
// every 32-token sequence holds all eight.
const std::vector<std::int32_t> kCycle = {3, 4, 300, 5, 6, 301, 7, 302};

TrainOptions run(int tp, int pp, int dp, int zero, bool sparse, const std::string& shards) {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.tp = tp;
  o.plan.pp = pp;
  o.plan.dp = dp;
  o.plan.zero_stage = zero;
  o.plan.sparse_embedding_gradient = sparse;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 2;
  o.steps = 2;
  o.record_trace = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  o.data_shards = shards;
  return o;
}

TEST(EmbeddingRows, EachReplicasStepTouchesTheDataSetInItsShards) {
  data::testing::ScratchDir dir;
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < 512; ++i)
    tokens.push_back(kCycle[static_cast<std::size_t>(i) % kCycle.size()]);
  const std::string shard = dir.file("cycle.bin");
  data::write_llmc_shard(shard, tokens);
  struct Case {
    int tp, pp, dp, zero;
    bool sparse;
  };
  for (const Case c : {Case{1, 1, 1, 0, false}, Case{2, 2, 2, 0, false}, Case{1, 1, 2, 2, true},
                       Case{2, 1, 2, 1, true}}) {
    SCOPED_TRACE("tp " + std::to_string(c.tp) + " pp " + std::to_string(c.pp) + " dp " +
                 std::to_string(c.dp) + " zero " + std::to_string(c.zero) +
                 (c.sparse ? " sparse" : ""));
    const TrainOptions o = run(c.tp, c.pp, c.dp, c.zero, c.sparse, shard);
    const an::EmbeddingRows rows = an::embedding_rows(train(o).trace);
    // One sample a step on each rank holding the input table: tp x dp ranks of the first stage.
    ASSERT_EQ(rows.samples.size(), static_cast<std::size_t>(c.tp * c.dp * o.steps));
    std::map<std::int32_t, int> per_rank;
    for (const an::EmbeddingRowsSample& s : rows.samples) {
      ++per_rank[s.rank];
      const double shard_rows = 512.0 / c.tp;
      EXPECT_EQ(s.shard_rows, shard_rows);
      EXPECT_EQ(s.vocab, 512.0);
      // All of a replica's tokens: micro-batch x sequence x micro-batches.
      EXPECT_EQ(s.tokens, 2.0 * 32.0 * 2.0);
      // The cycle's tokens in the rank's shard: 5 below 256, 3 above.
      const bool upper = c.tp == 2 && s.rank % 2 == 1;  // TP ranks are neighbours (tp-dp-pp)
      EXPECT_EQ(s.touched, c.tp == 1 ? 8.0 : upper ? 3.0 : 5.0) << "rank " << s.rank;
    }
    for (const auto& [rank, n] : per_rank) EXPECT_EQ(n, o.steps) << "rank " << rank;
  }
}

}  // namespace
}  // namespace pipetune::runtime
