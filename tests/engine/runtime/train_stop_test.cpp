// TrainOptions::stop ends a run cleanly: every rank stops after the same step, the steps done
// equal the uninterrupted run's first steps bit for bit, and what was streamed covers exactly
// those steps.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::runtime {
namespace {

TrainOptions options() {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.pp = 2;
  o.plan.dp = 2;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 4;
  o.steps = 8;
  o.threads_per_rank = 1;
  return o;
}

TEST(TrainStop, EndsEveryRankAfterTheSameStep) {
  const TrainResult full = train(options());
  ASSERT_FALSE(full.stopped);

  TrainOptions o = options();
  std::atomic<bool> stop{false};
  o.stop = &stop;
  // Requested after step 3 is reported: rank 0 reads it in step 4, so 4 steps run.
  o.on_step = [&](const StepResult& r) {
    if (r.step == 3) stop = true;
  };
  std::mutex mutex;
  std::map<int, int> parts_per_rank;
  o.trace_sink = [&](profiler::Trace part) {
    std::lock_guard lock(mutex);
    ++parts_per_rank[part.lanes.empty() ? -1 : part.lanes[0].rank];
  };
  const TrainResult r = train(o);
  EXPECT_TRUE(r.stopped);
  ASSERT_EQ(r.steps.size(), 4u);
  for (std::size_t i = 0; i < r.steps.size(); ++i)
    EXPECT_EQ(r.steps[i].loss, full.steps[i].loss) << "step " << i + 1;
  ASSERT_EQ(parts_per_rank.size(), 4u);
  for (const auto& [rank, n] : parts_per_rank) EXPECT_EQ(n, 4) << "rank " << rank;
}

TEST(TrainStop, AStopAfterTheLastStepChangesNothing) {
  TrainOptions o = options();
  o.steps = 2;
  std::atomic<bool> stop{false};
  o.stop = &stop;
  o.on_step = [&](const StepResult& r) {
    if (r.step == 1) stop = true;
  };
  const TrainResult r = train(o);
  EXPECT_FALSE(r.stopped) << "the run ended on its own at its last step";
  EXPECT_EQ(r.steps.size(), 2u);
}

}  // namespace
}  // namespace pipetune::runtime
