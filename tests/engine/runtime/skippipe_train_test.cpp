// Partial pipelining in the engine (skippipe): the losses are not the full pipeline's, so the
// test is the path each micro-batch took. In the measured trace every rank runs the forward and
// backward of exactly the micro-batches whose path visits its stage (Schedule::visits, dealt as
// skippipe.cpp says), each once per step; the ranks of a stage no micro-batch visits leave their
// layers' gradients at zero; and a ratio of 0 trains exactly as 1f1b. A reordered path
// (skippipe-ca) trains the function of the layers in its order: as 1f1b does on a model whose
// stages' weights are swapped the same way.
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
  ASSERT_TRUE(s.partial());
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

// Every micro-batch takes the path 0-2-1-3: stage 2's layers (4, 5) before stage 1's (2, 3). Each
// rank runs its forwards, then its backwards, both in micro-batch order (1f1b's order of
// accumulation).
schedule::Schedule reordered_paths(int m) {
  schedule::Schedule s;
  s.name = "skippipe-ca";
  s.stages = 4;
  s.microbatches = m;
  s.ranks.resize(4);
  s.paths.assign(static_cast<std::size_t>(m), {0, 2, 1, 3});
  for (auto& ops : s.ranks) {
    for (int mb = 0; mb < m; ++mb) ops.push_back({schedule::OpKind::F, 0, mb});
    for (int mb = 0; mb < m; ++mb) ops.push_back({schedule::OpKind::BW, 0, mb});
  }
  return s;
}

// Layers 2, 3 <-> 4, 5 in a parameter's name ("h.2.attn.w" <-> "h.4.attn.w").
std::string swapped(const std::string& name) {
  static const std::map<std::string, std::string> swap = {
      {"h.2.", "h.4."}, {"h.3.", "h.5."}, {"h.4.", "h.2."}, {"h.5.", "h.3."}};
  for (const auto& [from, to] : swap)
    if (name.rfind(from, 0) == 0) return to + name.substr(from.size());
  return name;
}

TEST(SkippipeTraining, AReorderedPathTrainsAsTheFullPipelineWithThoseStagesSwapped) {
  // Weights to start from: one step of a single-rank run moves them off the seeded ones.
  TrainOptions seed = skippipe_run(0.0, 1);
  seed.plan.pp = 1;
  seed.plan.schedule = "1f1b";
  seed.plan.skip_ratio.reset();
  seed.record_trace = false;
  seed.capture_gradients = false;
  seed.capture_parameters = true;
  const TrainResult start = train(seed);
  std::map<std::string, tensor::Tensor> swapped_start;
  for (const auto& [name, t] : start.final_parameters) swapped_start.emplace(swapped(name), t);

  TrainOptions reordered = skippipe_run(0.0, 3);
  reordered.plan.schedule = "skippipe-ca";
  reordered.schedule = reordered_paths(6);
  reordered.initial_parameters = &start.final_parameters;
  TrainOptions full = skippipe_run(0.0, 3);
  full.plan.schedule = "1f1b";
  full.plan.skip_ratio.reset();
  full.initial_parameters = &swapped_start;
  const TrainResult a = train(reordered), b = train(full);

  ASSERT_EQ(a.steps.size(), 3u);
  ASSERT_EQ(b.steps.size(), 3u);
  for (std::size_t i = 0; i < a.steps.size(); ++i)
    EXPECT_NEAR(a.steps[i].loss, b.steps[i].loss, 1e-6 * std::fabs(b.steps[i].loss))
        << "step " << i;
  std::size_t compared = 0;
  for (const auto& [name, g] : a.first_step_gradients) {
    const tensor::Tensor& want = b.first_step_gradients.at(swapped(name));
    ASSERT_EQ(g.numel(), want.numel()) << name;
    double worst = 0.0, scale = 0.0;
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      worst = std::max(worst, std::fabs(double{g[i]} - double{want[i]}));
      scale = std::max(scale, std::fabs(double{want[i]}));
    }
    EXPECT_LE(worst, 1e-5 * scale + 1e-9) << name;
    ++compared;
  }
  EXPECT_GT(compared, 10u);
  // The measured trace's sends follow the path: activations 0 -> 2 -> 1 -> 3, gradients back.
  std::map<int, std::set<std::pair<int, int>>> sends;  // micro-batch -> (rank, destination)
  for (const profiler::Span& span : a.trace.spans) {
    const profiler::Lane& lane = a.trace.lanes[static_cast<std::size_t>(span.lane)];
    if (span.kind == profiler::SpanKind::Send)
      sends[span.microbatch].insert({lane.rank, span.peer});
  }
  const std::set<std::pair<int, int>> path{{0, 2}, {2, 1}, {1, 3}, {3, 1}, {1, 2}, {2, 0}};
  for (int mb = 0; mb < 6; ++mb) EXPECT_EQ(sends[mb], path) << "micro-batch " << mb;
}

}  // namespace
}  // namespace pipetune::runtime
