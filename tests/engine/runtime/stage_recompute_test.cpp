// Per-stage recomputation (ParallelPlan::stage_recompute, Merak's stage-aware recomputation) in
// whole training runs on the CPU. References: the same run without recomputation (losses and
// every first-step gradient equal bit for bit, as activation_recompute_test.cpp holds for one
// mode everywhere), the single-rank run of the same global batch (within the parallel-
// equivalence tolerances), and, per pipeline rank, the run where every stage uses that rank's
// mode (the rank's peak activation memory and its "recompute" ranges are those of that run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/small_gelu_model.hpp"

namespace pipetune::runtime {
namespace {

using spec::Recompute;

TrainOptions options(int pp, const std::string& schedule, int chunks, int microbatches) {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.pp = pp;
  o.plan.schedule = schedule;
  o.plan.chunks = chunks;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = microbatches;
  o.steps = 3;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

bool same_bits(const tensor::Tensor& a, const tensor::Tensor& b) {
  if (a.numel() != b.numel()) return false;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    const float x = a[i], y = b[i];
    if (std::memcmp(&x, &y, sizeof(float)) != 0) return false;
  }
  return true;
}

// max |a - b| / max |b|, floored as parallel_equivalence_test.cpp does.
double relative_error(const tensor::Tensor& a, const tensor::Tensor& b) {
  double diff = 0.0, scale = 1e-6;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

// `exact`: bit for bit; else within the single-rank tolerances (1e-4 relative).
void expect_same_training(const TrainResult& got, const TrainResult& want, bool exact) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s) {
    if (exact)
      EXPECT_EQ(got.steps[s].loss, want.steps[s].loss) << "step " << s + 1;
    else
      EXPECT_NEAR(got.steps[s].loss, want.steps[s].loss, 1e-4 * std::fabs(want.steps[s].loss))
          << "step " << s + 1;
  }
  ASSERT_EQ(got.first_step_gradients.size(), want.first_step_gradients.size());
  int differing = 0;
  for (const auto& [name, w] : want.first_step_gradients) {
    const auto it = got.first_step_gradients.find(name);
    ASSERT_NE(it, got.first_step_gradients.end()) << name;
    const bool same = exact ? same_bits(it->second, w) : relative_error(it->second, w) <= 1e-4;
    if (!same && ++differing <= 5) ADD_FAILURE() << "gradient of " << name << " differs";
  }
  EXPECT_EQ(differing, 0);
}

struct StageCase {
  std::string name;
  int pp;
  std::string schedule;
  int chunks;
  int microbatches;
  std::vector<Recompute> stages;
};

std::vector<StageCase> stage_cases() {
  return {
      {"pp4_1f1b",
       4,
       "1f1b",
       1,
       8,
       {Recompute::Full, Recompute::Selective, Recompute::None, Recompute::Full}},
      // B and W apart: W of a recomputing stage after its B recomputed, beside stages without.
      {"pp2_zbh1", 2, "zb-h1", 1, 4, {Recompute::Selective, Recompute::Full}},
      // Both layer groups of a rank recompute as the rank's entry says.
      {"pp2_interleaved", 2, "interleaved-1f1b", 2, 4, {Recompute::Full, Recompute::None}},
  };
}

TEST(StageRecompute, TrainsExactlyAsWithoutAndAsTheSingleRankRun) {
  for (const StageCase& c : stage_cases()) {
    SCOPED_TRACE(c.name);
    TrainOptions with = options(c.pp, c.schedule, c.chunks, c.microbatches);
    with.plan.stage_recompute = c.stages;
    const TrainResult got = train(with);
    expect_same_training(got, train(options(c.pp, c.schedule, c.chunks, c.microbatches)), true);
    expect_same_training(got, train(options(1, "1f1b", 1, c.microbatches)), false);
  }
}

// Per rank: the number of "recompute" ranges and the peak activation bytes.
struct RankRecompute {
  int ranges = 0;
  std::int64_t peak_activation_bytes = 0;
};

std::vector<RankRecompute> per_rank(int pp, const std::vector<Recompute>& stages,
                                    Recompute uniform) {
  TrainOptions o;
  o.model = testing::small_gelu_model("stage-recompute", 8);
  o.plan.pp = pp;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 2 * pp;
  o.plan.recompute = uniform;
  o.plan.stage_recompute = stages;
  o.steps = 1;
  o.threads_per_rank = 1;
  o.record_trace = true;
  const TrainResult result = train(o);
  std::vector<RankRecompute> v(static_cast<std::size_t>(pp));
  const profiler::Trace& t = result.trace;
  for (const profiler::Span& s : t.spans) {
    if (s.kind != profiler::SpanKind::Range || t.names.at(s.name) != "recompute") continue;
    ++v.at(static_cast<std::size_t>(t.lanes.at(static_cast<std::size_t>(s.lane)).rank)).ranges;
  }
  for (const RankSummary& r : result.ranks)
    v.at(static_cast<std::size_t>(r.pp_rank)).peak_activation_bytes = r.peak_activation_bytes;
  return v;
}

TEST(StageRecompute, EachStageRecomputesAndKeepsAsTheUniformRunOfItsMode) {
  const int pp = 4;
  const std::vector<Recompute> stages = {Recompute::Full, Recompute::Full, Recompute::Selective,
                                         Recompute::None};
  // The plan-wide mode is overridden: Full here must not leak into the last stage.
  const std::vector<RankRecompute> mixed = per_rank(pp, stages, Recompute::Full);
  std::map<Recompute, std::vector<RankRecompute>> uniform;
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    uniform[r] = per_rank(pp, {}, r);
  const int layers_per_rank = 8 / pp, microbatches = 2 * pp;
  for (int rank = 0; rank < pp; ++rank) {
    SCOPED_TRACE("pipeline rank " + std::to_string(rank));
    const Recompute mode = stages[static_cast<std::size_t>(rank)];
    const RankRecompute& got = mixed[static_cast<std::size_t>(rank)];
    const RankRecompute& want = uniform[mode][static_cast<std::size_t>(rank)];
    EXPECT_EQ(got.ranges, mode == Recompute::None ? 0 : layers_per_rank * microbatches);
    EXPECT_EQ(got.ranges, want.ranges);
    EXPECT_EQ(got.peak_activation_bytes, want.peak_activation_bytes);
  }
  // The modes really differ in what a stage keeps (the comparison above is not vacuous).
  EXPECT_LT(uniform[Recompute::Full][0].peak_activation_bytes,
            uniform[Recompute::Selective][0].peak_activation_bytes);
  EXPECT_LT(uniform[Recompute::Selective][0].peak_activation_bytes,
            uniform[Recompute::None][0].peak_activation_bytes);
}

}  // namespace
}  // namespace pipetune::runtime
