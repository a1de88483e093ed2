// Layered gradient reduction paired with ZeRO-2 and 3 (schedule/group_holds.hpp) on the CPU
// engine, beyond the parallel-equivalence matrix's training against the single-rank run
// (plan_matrix.hpp: pp2_dp2_layered_modular_zero3, moe_pp2_dp2_layered_zero2,
// pp2_dp2_interleaved_layered_reduction_zero3). On one stage of the layered schedule with one
// layer per group (v groups, m micro-batches), in closed form:
//  - a layer's values are gathered once per run of its group's ops: F(c, 0..m-1) is one run per
//    group, BW(c, 0..m-1) another, and the last group's forward and backward runs are one, so
//    2v - 1 gathers an iteration against 2 m v with a gather per layer per op (the paper's
//    n_layers against m n_layers);
//  - a layer's gradient is reduce-scattered once an iteration, by its R op, not once per
//    micro-batch: the per-op reduce-scatters are the tables' alone;
//  - the held gradients are the ones ZeRO-0's layered all-reduce gives, bit for bit (the same
//    local sum over the micro-batches, then the same sum over the ranks), and ZeRO-3 trains as
//    ZeRO-2 does, bit for bit;
//  - what the rank holds whole at its peak: one layer's values and, with the R ops on the
//    reduction thread, two layers' gradients (one accumulating, one being reduced).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/schedule/span_kinds.hpp"
#include "tests/engine/runtime/small_gelu_model.hpp"

namespace pipetune::runtime {
namespace {

// The small GELU model: hidden 32, FFN 64, vocabulary 61, sequence 16.
constexpr std::int64_t C = 32, F = 64;
constexpr std::int64_t kLayer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (F * C + F) +
                                (C * F + C);  // ln1, qkv, proj, ln2, fc, mlp proj
constexpr std::int64_t kFloat = sizeof(float);
constexpr int kLayers = 4, kDp = 2, kMicrobatches = 4, kSteps = 2;

TrainOptions options(int zero, bool overlap_reductions = true) {
  TrainOptions o;
  o.model = testing::small_gelu_model("layered-zero", kLayers);
  o.plan.dp = kDp;
  o.plan.zero_stage = zero;
  o.plan.schedule = "layered";
  o.plan.chunks = kLayers;  // one layer per group
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = kMicrobatches;
  o.steps = kSteps;
  o.threads_per_rank = 1;
  o.record_trace = true;
  o.overlap_reductions = overlap_reductions;
  return o;
}

std::int64_t shard(std::int64_t numel, int dp) {
  return (numel + dp - 1) / dp;
}

// The spans of `kind` named `name` on rank 0.
int count_spans(const TrainResult& r, profiler::SpanKind kind, const std::string& name) {
  int n = 0;
  for (const profiler::Span& s : r.trace.spans)
    if (s.kind == kind && r.trace.names.at(s.name) == name &&
        r.trace.lanes.at(static_cast<std::size_t>(s.lane)).rank == 0)
      ++n;
  return n;
}

std::int64_t peak(const TrainResult& r, profiler::MemoryCategory category) {
  std::int64_t p = 0;
  for (const profiler::MemorySample& s : r.trace.memory)
    if (s.rank == 0 && s.category == category) p = std::max(p, s.bytes);
  return p;
}

TEST(LayeredZero3, GathersEachLayerOncePerRunOfItsGroup) {
  const TrainResult r = train(options(3));
  const int v = kLayers, m = kMicrobatches;
  // The tables still go per op: the embeddings for each F of the first group, the final
  // LayerNorm with the head for each F and each BW of the last.
  const int tables = 3 * m;
  EXPECT_EQ(count_spans(r, profiler::SpanKind::AllGather, "parameter all-gather"),
            kSteps * ((2 * v - 1) + tables));
}

TEST(LayeredZero2, ReduceScattersEachLayerOnceAnIteration) {
  const TrainResult r = train(options(2));
  const int m = kMicrobatches;
  // Per op, the tables' alone: the head, the final LayerNorm and the embeddings, once per BW of
  // their group (m each); the layers go by their R ops (one span each on the comm lane).
  EXPECT_EQ(count_spans(r, profiler::SpanKind::ReduceScatter, "gradient reduce-scatter"),
            kSteps * 3 * m);
  int reductions = 0;
  for (const profiler::Span& s : r.trace.spans)
    if (s.kind == schedule::span_kind_of(schedule::OpKind::R) && s.chunk >= 0 &&
        r.trace.lanes.at(static_cast<std::size_t>(s.lane)).rank == 0)
      ++reductions;
  EXPECT_EQ(reductions, kSteps * kLayers);
}

// The layers' reduced gradients of the first step, by name.
std::map<std::string, tensor::Tensor> layer_gradients(TrainOptions o) {
  o.capture_gradients = true;
  o.record_trace = false;
  std::map<std::string, tensor::Tensor> layers;
  for (auto& [name, g] : train(o).first_step_gradients)
    if (name.rfind("h.", 0) == 0) layers.emplace(name, std::move(g));
  return layers;
}

TEST(LayeredZero2, HeldGradientsAreTheAllReducedOnesBitForBit) {
  const std::map<std::string, tensor::Tensor> want = layer_gradients(options(0));
  ASSERT_EQ(want.size(), static_cast<std::size_t>(kLayers) * 12);
  for (int zero : {2, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    const std::map<std::string, tensor::Tensor> got = layer_gradients(options(zero));
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, w] : want) {
      const tensor::Tensor& g = got.at(name);
      ASSERT_EQ(g.numel(), w.numel()) << name;
      for (std::int64_t i = 0; i < w.numel(); ++i)
        ASSERT_EQ(g[i], w[i]) << name << " element " << i;
    }
  }
}

TEST(LayeredZero3, TrainsAsZero2BitForBit) {
  const TrainResult two = train(options(2)), three = train(options(3));
  ASSERT_EQ(three.steps.size(), two.steps.size());
  for (std::size_t s = 0; s < two.steps.size(); ++s)
    EXPECT_EQ(three.steps[s].loss, two.steps[s].loss) << "step " << s + 1;
}

TEST(LayeredZero3, HoldsOneLayerOfValuesAndTwoOfGradientsAtMost) {
  const std::int64_t kept = kLayers * shard(kLayer, kDp) + shard(2 * C, kDp);
  const std::int64_t layer = kDp * shard(kLayer, kDp), lnf = kDp * shard(2 * C, kDp);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "R on the reduction thread" : "R in place");
    const TrainResult r = train(options(3, overlap));
    // Values: a run's layer, and the final LayerNorm with the last group's ops.
    EXPECT_EQ(peak(r, profiler::MemoryCategory::Parameters), (kept + layer + lnf) * kFloat);
    // Gradients: the group accumulating and, while its R runs on the other thread, the group
    // before it (freed at the next R); in place, the reduced group's buffer is the next one's.
    EXPECT_EQ(peak(r, profiler::MemoryCategory::Gradients),
              (kept + (overlap ? 2 * layer : layer + lnf)) * kFloat);
  }
}

}  // namespace
}  // namespace pipetune::runtime
