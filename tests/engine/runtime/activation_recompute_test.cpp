// Activation recomputation (the plan's recompute, ModelConfig::recompute) in whole training runs
// on the CPU. The reference is the same run without it: B recomputes with the same ops on the
// same inputs, so the losses and every first-step gradient must be equal bit for bit, through TP
// (with and without sequence parallelism), pipelines (split B and W included), vocabulary
// parallelism and experts. What is kept per layer in flight is checked against its closed form:
// full keeps the block input, (B*T, C) floats; selective keeps all but the stored attention
// probabilities, B * NH/tp * T * T floats less.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/plan_matrix.hpp"
#include "tests/engine/runtime/small_gelu_model.hpp"

namespace pipetune::runtime {
namespace {

using testing::PlanCase;

TrainOptions options_for(const PlanCase& c, spec::Recompute recompute) {
  TrainOptions o;
  o.model = spec::load_model(c.model);
  o.plan.micro_batch_size = 2;
  o.steps = 3;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  testing::apply_plan(c, o);
  o.plan.recompute = recompute;
  return o;
}

// "" when equal bit for bit, else where they first differ.
std::string first_difference(const tensor::Tensor& got, const tensor::Tensor& want) {
  if (got.numel() != want.numel())
    return std::to_string(got.numel()) + " elements, want " + std::to_string(want.numel());
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const float g = got[i], w = want[i];
    if (std::memcmp(&g, &w, sizeof(float)) != 0) {
      std::ostringstream s;
      s.precision(9);
      s << "element " << i << ": got " << g << ", want " << w;
      return s.str();
    }
  }
  return "";
}

void expect_identical_training(const TrainResult& got, const TrainResult& want) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s)
    EXPECT_EQ(got.steps[s].loss, want.steps[s].loss) << "step " << want.steps[s].step;
  ASSERT_EQ(got.first_step_gradients.size(), want.first_step_gradients.size());
  int differing = 0;
  for (const auto& [name, w] : want.first_step_gradients) {
    const auto it = got.first_step_gradients.find(name);
    ASSERT_NE(it, got.first_step_gradients.end()) << name;
    const std::string diff = first_difference(it->second, w);
    if (!diff.empty() && ++differing <= 5) ADD_FAILURE() << "gradient of " << name << ": " << diff;
  }
  EXPECT_EQ(differing, 0) << "gradients differ from the run without recomputation";
}

struct RecomputeCase {
  PlanCase plan;
  spec::Recompute recompute;
};

std::ostream& operator<<(std::ostream& os, const RecomputeCase& c) {
  return os << c.plan.name << "_" << spec::recompute_name(c.recompute);
}

class ActivationRecompute : public ::testing::TestWithParam<RecomputeCase> {};

TEST_P(ActivationRecompute, TrainsExactlyAsWithout) {
  const RecomputeCase& c = GetParam();
  const TrainResult want = train(options_for(c.plan, spec::Recompute::None));
  const TrainResult got = train(options_for(c.plan, c.recompute));
  expect_identical_training(got, want);
}

std::vector<RecomputeCase> recompute_cases() {
  const std::vector<PlanCase> plans = {
      {.name = "single"},
      {.name = "tp2_pp2", .tp = 2, .pp = 2},
      {.name = "pp2_zbh1", .pp = 2, .schedule = "zb-h1"},  // B and W apart: W after B recomputed
      {.name = "pp2_interleaved", .pp = 2, .schedule = "interleaved-1f1b", .chunks = 2},
      {.name = "pp4_vhalf_vocab2",
       .pp = 4,
       .schedule = "v-half",
       .vocab = "vocab-2",
       .microbatches = 8},
      {.name = "tp2_pp2_dp2_zbh1", .tp = 2, .pp = 2, .dp = 2, .schedule = "zb-h1"},
      // Sequence parallelism: the recomputed forward gathers and reduce-scatters again.
      {.name = "tp2_pp2_sp_zbh1", .tp = 2, .pp = 2, .schedule = "zb-h1", .sequence_parallel = true},
      {.name = "moe_tp2_ep2_dp2_sp",
       .model = "tiny-moe",
       .tp = 2,
       .dp = 2,
       .ep = 2,
       .sequence_parallel = true},
      // Experts: the recomputed forward routes again and repeats the EP all-to-alls.
      {.name = "moe_tp2_ep2_dp2", .model = "tiny-moe", .tp = 2, .dp = 2, .ep = 2},
      {.name = "moe_pp2_ep2_dp2_zbh1",
       .model = "tiny-moe",
       .pp = 2,
       .dp = 2,
       .ep = 2,
       .schedule = "zb-h1"},
  };
  std::vector<RecomputeCase> v;
  for (const PlanCase& p : plans)
    for (spec::Recompute r : {spec::Recompute::Full, spec::Recompute::Selective})
      v.push_back({p, r});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Plans, ActivationRecompute, ::testing::ValuesIn(recompute_cases()),
                         [](const auto& info) {
                           std::ostringstream s;
                           s << info.param;
                           std::string name = s.str();
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(ActivationRecomputeFlash, FullRecomputationWithTheFlashKernelTrainsExactlyAsWithout) {
  // The flash kernel keeps the row statistics (lse) instead of the probabilities: a full
  // recomputation rebuilds them, a selective one has nothing to drop.
  const PlanCase plan{.name = "tp2_pp2", .tp = 2, .pp = 2};
  for (spec::Recompute r : {spec::Recompute::Full, spec::Recompute::Selective}) {
    SCOPED_TRACE(std::string(spec::recompute_name(r)));
    TrainOptions without = options_for(plan, spec::Recompute::None);
    TrainOptions with = options_for(plan, r);
    without.attention = with.attention = tensor::AttentionKernel::flash;
    expect_identical_training(train(with), train(without));
  }
}

// ---- the trace: recomputation is a range inside the backward ---------------------------------

// Per layer, micro-batch and step, one "recompute" range on the rank's compute lane, inside the
// B (or BW) span of that micro-batch; none without recomputation.
TEST(ActivationRecomputeTrace, EachRecomputedLayerIsARangeInsideItsBackward) {
  const int layers = 4, pp = 2, microbatches = 3;
  for (spec::Recompute r :
       {spec::Recompute::None, spec::Recompute::Full, spec::Recompute::Selective}) {
    SCOPED_TRACE(std::string(spec::recompute_name(r)));
    TrainOptions o;
    o.model = testing::small_gelu_model("recompute-trace", layers);
    o.plan.pp = pp;
    o.plan.micro_batch_size = 2;
    o.plan.microbatches = microbatches;
    o.plan.recompute = r;
    o.steps = 1;
    o.threads_per_rank = 1;
    o.record_trace = true;
    const TrainResult result = train(o);
    const profiler::Trace& t = result.trace;
    std::map<std::int32_t, int> ranges;  // by rank
    for (const profiler::Span& s : t.spans) {
      if (s.kind != profiler::SpanKind::Range || t.names.at(s.name) != "recompute") continue;
      const std::int32_t rank = t.lanes.at(static_cast<std::size_t>(s.lane)).rank;
      ++ranges[rank];
      const bool inside = std::any_of(t.spans.begin(), t.spans.end(), [&](const profiler::Span& b) {
        return b.lane == s.lane &&
               (b.kind == profiler::SpanKind::B || b.kind == profiler::SpanKind::BW) &&
               b.start_ns <= s.start_ns && s.end_ns <= b.end_ns;
      });
      EXPECT_TRUE(inside) << "a recompute range outside every backward of rank " << rank;
    }
    const int want = r == spec::Recompute::None ? 0 : layers / pp * microbatches;
    for (std::int32_t rank = 0; rank < pp; ++rank) EXPECT_EQ(ranges[rank], want) << rank;
  }
}

// ---- memory: what a layer in flight keeps
// --------------------------------------------------------

constexpr std::int64_t kBatch = 2, kHeads = 4, kSeq = 16, kHidden = 32;

// One rank, one micro-batch, one step: the peak is the end of the forward, where the micro-batch
// holds every layer's activations. The peaks at two depths differ by what two layers keep.
std::int64_t peak_activation_bytes(int layers, spec::Recompute recompute) {
  TrainOptions o;
  o.model = testing::small_gelu_model("recompute-memory", layers);
  o.plan.micro_batch_size = kBatch;
  o.plan.microbatches = 1;
  o.plan.recompute = recompute;
  o.steps = 1;
  o.threads_per_rank = 1;
  const TrainResult r = train(o);
  EXPECT_EQ(r.ranks.size(), 1u);
  return r.ranks.empty() ? 0 : r.ranks[0].peak_activation_bytes;
}

std::int64_t bytes_per_layer(spec::Recompute recompute) {
  return (peak_activation_bytes(4, recompute) - peak_activation_bytes(2, recompute)) / 2;
}

TEST(ActivationRecomputeMemory, FullKeepsEachLayersInputAlone) {
  const std::int64_t input = kBatch * kSeq * kHidden * static_cast<std::int64_t>(sizeof(float));
  EXPECT_EQ(bytes_per_layer(spec::Recompute::Full), input);
  EXPECT_GT(bytes_per_layer(spec::Recompute::None), 10 * input) << "the run without keeps more";
}

TEST(ActivationRecomputeMemory, SelectiveDropsExactlyTheAttentionProbabilities) {
  const std::int64_t probabilities =
      kBatch * kHeads * kSeq * kSeq * static_cast<std::int64_t>(sizeof(float));
  EXPECT_EQ(bytes_per_layer(spec::Recompute::None) - bytes_per_layer(spec::Recompute::Selective),
            probabilities);
}

}  // namespace
}  // namespace pipetune::runtime
