// Partial pipelining in the engine (skippipe): the losses are not the full pipeline's, so the
// test is the path each micro-batch took. In the measured trace every rank runs the forward and
// backward of exactly the micro-batches whose path visits its stage (Schedule::visits, dealt as
// skippipe.cpp says), each once per step; the ranks of a stage no micro-batch visits leave their
// layers' gradients at zero; and a ratio of 0 trains exactly as 1f1b.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "engine/runtime/trainer.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/plan_schedule.hpp"

namespace pipetune::runtime {
namespace {

TrainOptions skippipe_run(double ratio, int steps) {
  TrainOptions o;
  o.model = spec::load_model("tiny");  // 8 layers: 2 per stage over 4
  o.plan.pp = 4;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 6;
  o.plan.schedule = "skippipe";
  o.plan.skip_ratio = ratio;
  o.steps = steps;
  o.record_trace = true;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

TEST(SkippipeTraining, EachRankRunsTheMicroBatchesWhosePathVisitsIt) {
  const TrainOptions o = skippipe_run(0.25, 2);  // one middle stage skipped per micro-batch
  const TrainResult r = train(o);
  spec::ParallelPlan plan = o.plan;
  spec::apply_defaults(plan);
  const schedule::Schedule s = spec::plan_schedule(plan);
  ASSERT_FALSE(s.skipped.empty());
  // (rank, kind) -> micro-batches, with how often each ran over the two steps.
  using Key = std::pair<int, profiler::SpanKind>;
  std::map<Key, std::map<int, int>> ran;
  for (const profiler::Span& span : r.trace.spans) {
    const profiler::Lane& lane = r.trace.lanes[static_cast<std::size_t>(span.lane)];
    if (lane.stream != profiler::Stream::Compute) continue;
    if (span.kind != profiler::SpanKind::F && span.kind != profiler::SpanKind::BW) continue;
    ++ran[Key{lane.rank, span.kind}][span.microbatch];
  }
  for (int rank = 0; rank < 4; ++rank)
    for (profiler::SpanKind kind : {profiler::SpanKind::F, profiler::SpanKind::BW}) {
      std::map<int, int> want;
      for (int mb = 0; mb < 6; ++mb)
        if (s.visits(rank, mb)) want[mb] = 2;
      const std::map<int, int>& got = ran[Key{rank, kind}];
      EXPECT_EQ(got, want) << "rank " << rank << " " << profiler::span_kind_name(kind);
    }
  // The middle stages share the skips: 3 of the 6 micro-batches each.
  EXPECT_EQ(ran[Key(1, profiler::SpanKind::F)].size(), 3u);
  EXPECT_EQ(ran[Key(2, profiler::SpanKind::F)].size(), 3u);
  for (const StepResult& step : r.steps) EXPECT_TRUE(std::isfinite(step.loss));
}

TEST(SkippipeTraining, AStageNoMicroBatchVisitsHasNoGradient) {
  const TrainResult r = train(skippipe_run(0.5, 1));  // every path 0-3: stages 1, 2 skipped
  int checked = 0;
  for (const auto& [name, g] : r.first_step_gradients) {
    // Layers 2..5 sit on stages 1 and 2.
    const bool middle = name.rfind("h.2.", 0) == 0 || name.rfind("h.3.", 0) == 0 ||
                        name.rfind("h.4.", 0) == 0 || name.rfind("h.5.", 0) == 0;
    double most = 0.0;
    for (std::int64_t i = 0; i < g.numel(); ++i) most = std::max(most, std::fabs(double{g[i]}));
    if (middle) {
      EXPECT_EQ(most, 0.0) << name;
      ++checked;
    } else if (name.rfind("h.0.", 0) == 0) {
      EXPECT_GT(most, 0.0) << name;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(SkippipeTraining, RatioZeroTrainsAs1f1b) {
  TrainOptions skip = skippipe_run(0.0, 3);
  skip.record_trace = false;
  TrainOptions full = skip;
  full.plan.schedule = "1f1b";
  full.plan.skip_ratio.reset();
  const TrainResult a = train(skip), b = train(full);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i].loss, b.steps[i].loss);
}

}  // namespace
}  // namespace pipetune::runtime
