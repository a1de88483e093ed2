// EmbRace's sparse embedding gradient in the cost model. The rows n uniform tokens touch, against
// the exact expectation over every token sequence of a small vocabulary; the reduction's time as
// the two all-gathers the engine runs; and a plan's DP reduction: the input table leaves the
// all-reduce and its touched rows' exchange joins, cheaper than the table when a replica's tokens
// touch few rows of a large vocabulary and dearer when they touch most, as
// sparse_embedding_may_pay says from the bytes. Under ZeRO the rows go to their owners: two
// all-to-alls in place of the table's reduce-scatter, per iteration (ZeRO-1) or per micro-batch
// with a micro-batch's rows (ZeRO-2 and 3).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "engine/spec/load.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/sparse_embedding_cost.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/search_request.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {
namespace {

// The mean count of distinct tokens over all vocab^n sequences.
double brute_force_distinct(int vocab, int n) {
  long long total = 0, sequences = 0;
  std::vector<int> seq(static_cast<std::size_t>(n), 0);
  while (true) {
    total += static_cast<long long>(std::set<int>(seq.begin(), seq.end()).size());
    ++sequences;
    int i = 0;
    while (i < n && ++seq[static_cast<std::size_t>(i)] == vocab)
      seq[static_cast<std::size_t>(i++)] = 0;
    if (i == n) break;
  }
  return static_cast<double>(total) / static_cast<double>(sequences);
}

TEST(SparseEmbeddingCost, TouchedRowsAreTheExpectedDistinctTokens) {
  for (int v : {1, 2, 3, 5})
    for (int n : {1, 2, 4, 6}) {
      SCOPED_TRACE("vocab " + std::to_string(v) + ", tokens " + std::to_string(n));
      EXPECT_NEAR(expected_touched_rows(v, v, n), brute_force_distinct(v, n), 1e-12);
      // A shard of half the rows gets half of them.
      EXPECT_NEAR(expected_touched_rows(0.5 * v, v, n), 0.5 * brute_force_distinct(v, n), 1e-12);
    }
  EXPECT_DOUBLE_EQ(expected_touched_rows(1000, 1000, 0), 0.0);
  EXPECT_NEAR(expected_touched_rows(256000, 256000, 1e8), 256000.0, 1e-6);
}

TEST(SparseEmbeddingCost, TheReductionIsTwoAllGathers) {
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  const GroupLink link = group_link(c, 0, 1, 8);
  EXPECT_DOUBLE_EQ(sparse_rows_reduce_time(100, 4096, 4, 1, link), 0.0);
  EXPECT_DOUBLE_EQ(sparse_rows_reduce_time(100, 4096, 4, 8, link),
                   collective_time(Collective::AllGather, 8 * 4.0, link) +
                       collective_time(Collective::AllGather, 8 * 100 * (4.0 + 4096 * 4.0), link));
}

TEST(SparseEmbeddingCost, UnderZeroTheRowsGoToTheirOwnersInTwoAllToAlls) {
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  const GroupLink link = group_link(c, 0, 1, 8);
  EXPECT_DOUBLE_EQ(sparse_rows_scatter_time(100, 4096, 4, 1, link), 0.0);
  EXPECT_DOUBLE_EQ(sparse_rows_scatter_time(100, 4096, 4, 8, link),
                   collective_time(Collective::AllToAll, 8 * 4.0, link) +
                       collective_time(Collective::AllToAll, 100 * (4.0 + 4096 * 4.0), link));
}

spec::ParallelPlan plan(std::int64_t global_batch, bool sparse) {
  spec::ParallelPlan p;
  p.tp = 1;
  p.pp = 1;
  p.dp = 8;
  p.micro_batch_size = 1;
  p.global_batch = global_batch;
  p.schedule = "1f1b";
  p.sparse_embedding_gradient = sparse;
  spec::apply_defaults(p);
  return p;
}

// The 256k-vocabulary model on 8 H100s (dp 8), as both reductions' tests price it.
struct VocabModelOn8 {
  spec::ModelSpec m = [] {
    spec::ModelSpec model = spec::load_model("vp-4b-256k");
    spec::apply_defaults(model);
    return model;
  }();
  spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  ExecutionOptions exec = default_execution(c.hardware);
  GroupLink dp = group_link(c, 0, 1, 8);
  double h = static_cast<double>(m.hidden), V = static_cast<double>(m.vocab),
         gb = exec.gradient_reduce_bytes;
  double rows = static_cast<double>(spec::padded_vocab(m, 1)), table_bytes = rows * h * gb;
  schedule::Placement placement = schedule::schedule_placement("1f1b");
};

TEST(SparseEmbeddingCost, ThePlansReductionSwapsTheTableForItsTouchedRows) {
  const VocabModelOn8 s;
  const auto& [m, c, exec, dp, h, V, gb, rows, table_bytes, placement] = s;
  for (std::int64_t batch : {8, 64, 512}) {
    SCOPED_TRACE("global batch " + std::to_string(batch));
    const OpCosts dense = op_costs(m, c, plan(batch, false), placement, exec);
    const OpCosts sparse = op_costs(m, c, plan(batch, true), placement, exec);
    const double touched = expected_touched_rows(
        rows, V, static_cast<double>(batch) / 8 * static_cast<double>(m.seq_len));
    // The whole buffer's all-reduce less the table's bytes, plus the rows' exchange.
    const double all = dense.stages[0].grad_reduce;
    const double others =
        collective_time(Collective::AllReduce, dense.stages[0].parameters * gb - table_bytes, dp);
    EXPECT_NEAR(sparse.stages[0].grad_reduce,
                others + sparse_rows_reduce_time(touched, h, gb, 8, dp), 1e-9 * all);
    const bool pays = sparse_embedding_may_pay(m, plan(batch, false), gb);
    EXPECT_EQ(pays, sparse.stages[0].grad_reduce < all)
        << "touched " << touched << " of " << rows << " rows";
  }
  // A few sequences a replica touch few rows of 256k: the exchange pays; many touch most.
  EXPECT_TRUE(sparse_embedding_may_pay(m, plan(8, false), gb));
  EXPECT_FALSE(sparse_embedding_may_pay(m, plan(512, false), gb));
}

TEST(SparseEmbeddingCost, UnderZeroTheTablesReduceScatterMakesWayForItsRows) {
  const VocabModelOn8 setup;
  const auto& [m, c, exec, dp, h, V, gb, rows, table_bytes, placement] = setup;
  for (int zero : {1, 2, 3})
    for (std::int64_t batch : {8, 64, 512}) {
      SCOPED_TRACE("zero " + std::to_string(zero) + ", global batch " + std::to_string(batch));
      spec::ParallelPlan d = plan(batch, false), s = plan(batch, true);
      d.zero_stage = s.zero_stage = zero;
      const OpCosts dense = op_costs(m, c, d, placement, exec);
      const OpCosts sparse = op_costs(m, c, s, placement, exec);
      // ZeRO-1 exchanges the iteration's rows once; ZeRO-2 and 3 a micro-batch's in each backward.
      const double tokens = zero == 1
                                ? static_cast<double>(batch) / 8 * static_cast<double>(m.seq_len)
                                : static_cast<double>(m.seq_len);  // micro-batch size 1
      EXPECT_DOUBLE_EQ(tokens_per_exchange(m, s), tokens);
      const double touched = expected_touched_rows(rows, V, tokens);
      const double scatter = collective_time(Collective::ReduceScatter,
                                             dense.stages[0].parameters * gb - table_bytes, dp) +
                             sparse_rows_scatter_time(touched, h, gb, 8, dp);
      const StageCost& st = sparse.stages[0];
      const StageCost& dt = dense.stages[0];
      const double got = zero == 1   ? st.grad_reduce
                         : zero == 2 ? st.sharded_backward_comm
                                     : st.sharded_backward_comm - st.sharded_forward_comm;
      const double was = zero == 1   ? dt.grad_reduce
                         : zero == 2 ? dt.sharded_backward_comm
                                     : dt.sharded_backward_comm - dt.sharded_forward_comm;
      EXPECT_NEAR(got, scatter, 1e-9 * was);
      EXPECT_EQ(st.param_gather, dt.param_gather);  // the parameters are gathered as before
      EXPECT_EQ(sparse_embedding_may_pay(m, d, gb), got < was)
          << "touched " << touched << " of " << rows << " rows";
    }
  // At 512 sequences a replica's 64 touch 40% of the 256k rows: the all-gather (each member
  // receives every member's rows) stops paying, but the all-to-all (each row sent once, to its
  // owner) still does. ZeRO-2's micro-batch of one sequence touches under 1%.
  spec::ParallelPlan p = plan(512, false);
  EXPECT_FALSE(sparse_embedding_may_pay(m, p, gb));
  for (int zero : {1, 2}) {
    p.zero_stage = zero;
    EXPECT_TRUE(sparse_embedding_may_pay(m, p, gb)) << "zero " << zero;
  }
}

// The tuner tries the sparse gradient where it may pay, and a sparse plan never ranks below its
// dense twin (the same plan otherwise); across two nodes, where the DP reduction is not hidden
// behind the last backward, it ranks above.
TEST(SparseEmbeddingSearch, TheTunerPicksTheSparseGradientWhereItIsCheaper) {
  SearchRequest r;
  r.target.model = "vp-4b-256k";
  r.target.hardware = "h100-sxm";
  r.target.gpus = 16;
  r.target.global_batch = 16;
  r.schedules = {"1f1b"};
  r.keep = 0;  // every plan scored
  const SearchSpace space = search_space(r);
  const SearchResult result = search_plans(space, evaluator_scorers(space.model, space.cluster));
  int pairs = 0, faster = 0;
  for (const ScoredPlan& s : result.ranked) {
    if (!s.plan.sparse_embedding_gradient) continue;
    spec::ParallelPlan dense = s.plan;
    dense.sparse_embedding_gradient = false;
    for (const ScoredPlan& d : result.ranked)
      if (d.plan == dense) {
        ++pairs;
        EXPECT_LE(s.score.iteration_time, d.score.iteration_time)
            << plan_summary(s.plan, s.vocab_label);
        if (s.score.iteration_time < d.score.iteration_time) ++faster;
      }
  }
  EXPECT_GT(pairs, 0);
  EXPECT_GT(faster, 0);
}

}  // namespace
}  // namespace pipetune::tuner
