// Layered gradient reduction in the engine's trace: on a threads run the R ops run on each rank's
// reduction thread (reduction_worker.hpp), so each is a span of its own on the rank's comm lane,
// one per local layer group, timed where it ran and nested in no op; a run with nothing to
// reduce over keeps them on the rank's thread. (That the gradients equal the single-rank run's
// is parallel_equivalence_test's `*_layered*` cases; that a job runs while the rank's thread goes
// on is reduction_worker_test's.)
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "profiler/trace.hpp"

namespace pipetune::runtime {
namespace {

TrainResult layered_run(int dp) {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.pp = 2;
  o.plan.dp = dp;
  o.plan.schedule = "layered";
  o.plan.chunks = 4;  // two layer groups a rank
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 4;
  o.steps = 2;
  o.record_trace = true;
  o.threads_per_rank = 1;
  return train(o);
}

TEST(LayeredOverlap, EachReductionIsASpanOfItsOwnOnTheCommLane) {
  const TrainResult r = layered_run(2);
  ASSERT_EQ(r.ranks.size(), 4u);
  for (const RankSummary& rank : r.ranks)
    EXPECT_TRUE(rank.reductions_overlapped) << "rank " << rank.rank;
  // Per (rank, chunk): the R spans of the two steps. The step-end reduction of the tables has no
  // chunk.
  std::map<std::pair<int, int>, int> reductions;
  for (const profiler::Span& s : r.trace.spans) {
    const profiler::Lane& lane = r.trace.lanes.at(static_cast<std::size_t>(s.lane));
    if (s.kind != profiler::SpanKind::AllReduce || s.chunk < 0) continue;
    EXPECT_EQ(lane.stream, profiler::Stream::Comm) << "rank " << lane.rank;
    EXPECT_LE(s.start_ns, s.end_ns);
    ++reductions[{lane.rank, s.chunk}];
  }
  // pp 2 with 4 chunks: rank p holds chunks p and p + 2 (modular placement), each reduced once a
  // step.
  for (int rank = 0; rank < 4; ++rank) {
    const int pp_rank = r.ranks[static_cast<std::size_t>(rank)].pp_rank;
    for (int local = 0; local < 2; ++local) {
      const auto it = reductions.find({rank, local});
      const int got = it == reductions.end() ? 0 : it->second;
      EXPECT_EQ(got, 2) << "rank " << rank << " (stage " << pp_rank << ") local chunk " << local;
    }
  }
}

TEST(LayeredOverlap, WithNothingToReduceOverTheRanksKeepTheirOneThread) {
  const TrainResult r = layered_run(1);
  for (const RankSummary& rank : r.ranks)
    EXPECT_FALSE(rank.reductions_overlapped) << "rank " << rank.rank;
}

}  // namespace
}  // namespace pipetune::runtime
