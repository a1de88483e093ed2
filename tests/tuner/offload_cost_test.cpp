// The cost model's offload tier (tuner/cost/op_costs.hpp): the copy time of offloaded activations
// and the optimizer step offloaded to the host (ZeRO-Offload), against hand formulas.
// GPT-3 1.7B (h = 2304, s = 2048, 24 layers, GeLU MLP of 4h) on A100 80GB (PCIe Gen4:
// host_bandwidth 32e9 B/s, efficiency.host_link 0.8), tp = 1, two pipeline stages of 12 layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {
namespace {

using spec::Recompute;

constexpr double kHostLink = 32e9 * 0.8;  // a100-80gb: host_bandwidth * efficiency.host_link
constexpr double kS = 2048, kH = 2304;    // gpt3-1.7b
constexpr double kLayersPerStage = 12;    // 24 layers over pp = 2

spec::ModelSpec gpt() {
  spec::ModelSpec m = spec::load_model("gpt3-1.7b");
  spec::apply_defaults(m);
  return m;
}

spec::ClusterSpec a100(int gpus) {
  return spec::make_cluster(spec::load_hardware("a100-80gb"), gpus);
}

spec::ParallelPlan plan(const std::string& schedule, int chunks, Recompute recompute, int dp = 1,
                        int zero = 0) {
  spec::ParallelPlan p;
  p.pp = 2;
  p.dp = dp;
  p.zero_stage = zero;
  p.micro_batch_size = 2;
  p.microbatches = 4;
  p.schedule = schedule;
  p.chunks = chunks;
  p.recompute = recompute;
  spec::apply_defaults(p);
  return p;
}

OpCosts costs_of(const spec::ParallelPlan& p, const spec::ClusterSpec& c) {
  return op_costs(gpt(), c, p, schedule::schedule_placement(p.schedule),
                  default_execution(c.hardware));
}

TEST(OffloadCosts, CopyTimeIsTheKeptActivationsOfOneChunkOverTheHostLink) {
  // Korthikanti et al. in bf16 per layer and micro-batch (b = 2): full recomputation keeps the
  // layer's input, 2sbh bytes; none keeps sbh(10 + 24) = 34sbh (flash attention, f = 4h,
  // tp = 1). One copy moves one chunk's share of the stage's 12 layers.
  const double sbh = kS * 2 * kH;
  struct Case {
    const char* schedule;
    int chunks;
    Recompute recompute;
    double bytes_per_layer;
  } cases[] = {{"1f1b", 1, Recompute::Full, 2 * sbh},
               {"1f1b", 1, Recompute::None, 34 * sbh},
               {"interleaved-1f1b", 2, Recompute::Full, 2 * sbh}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.schedule) + " recompute " +
                 std::string(spec::recompute_name(c.recompute)));
    spec::ParallelPlan p = plan(c.schedule, c.chunks, c.recompute);
    EXPECT_EQ(costs_of(p, a100(2)).table.stages[0].offload, 0.0) << "offload is off";
    p.offload_activations = true;
    const OpCosts got = costs_of(p, a100(2));
    const double want = kLayersPerStage * c.bytes_per_layer / c.chunks / kHostLink;
    for (int r = 0; r < 2; ++r)
      EXPECT_NEAR(got.table.stages[static_cast<std::size_t>(r)].offload, want, want * 1e-12)
          << "stage " << r << ": want " << want << " s";
    EXPECT_FALSE(got.table.copies_block_compute) << "a GPU copies on copy streams";
  }
}

TEST(OffloadCosts, CopiesBlockComputeOnTheCpuEngineOnly) {
  EXPECT_TRUE(default_execution(spec::load_hardware("cpu-dev-2core")).copies_block_compute);
  EXPECT_FALSE(default_execution(spec::load_hardware("a100-80gb")).copies_block_compute);
  EXPECT_FALSE(cuda_engine_execution(false).copies_block_compute);
}

TEST(OffloadCosts, OffloadedOptimizerStepIsTheCopiesPlusTheHostUpdate) {
  // Per parameter of the device's shard: an fp32 gradient (4 bytes) down and a bf16 weight (2)
  // up over the host link, then the update's 38 bytes of traffic at the assumed 25 GB/s of host
  // memory per device. The shard: all the stage's parameters (ZeRO 0), or half of them (ZeRO-1
  // over dp = 2; no experts).
  for (int dp : {1, 2}) {
    const int zero = dp > 1 ? 1 : 0;
    SCOPED_TRACE("dp=" + std::to_string(dp) + " zero=" + std::to_string(zero));
    spec::ParallelPlan p = plan("1f1b", 1, Recompute::Full, dp, zero);
    const OpCosts on_device = costs_of(p, a100(2 * dp));
    p.offload_optimizer = true;
    const OpCosts offloaded = costs_of(p, a100(2 * dp));
    double slowest = 0.0;
    for (int r = 0; r < 2; ++r) {
      const auto i = static_cast<std::size_t>(r);
      const double shard = offloaded.stages[i].parameters / dp;
      const double want = shard * (4.0 + 2.0) / kHostLink + shard * 38.0 / 25e9;
      EXPECT_NEAR(offloaded.stages[i].optimizer, want, want * 1e-12) << "stage " << r;
      EXPECT_NE(on_device.stages[i].optimizer, offloaded.stages[i].optimizer) << "stage " << r;
      slowest = std::max(slowest, want);
    }
    // The evaluator charges the slowest stage's step after the pipeline, as before.
    const PlanEvaluation e = evaluate_plan(gpt(), a100(2 * dp), p);
    EXPECT_NEAR(e.optimizer_time, slowest, slowest * 1e-12);
  }
}

TEST(OffloadCosts, CpuHostUpdateRunsAtTheDevicesOwnMemoryRate) {
  // On a CPU device the host is the device: the update streams at efficiency.memory *
  // hbm_bandwidth, the copies at host_bandwidth * host_link; fp32 gradients and weights (4 + 4).
  const spec::HardwareSpec hw = spec::load_hardware("cpu-dev-2core");
  spec::ModelSpec tiny = spec::load_model("tiny");
  spec::apply_defaults(tiny);
  spec::ParallelPlan p = plan("1f1b", 1, Recompute::None);
  p.micro_batch_size = 1;
  p.offload_optimizer = true;
  p.offload_activations = true;
  const spec::ClusterSpec c = spec::make_cluster(hw, 2);
  const OpCosts got = op_costs(tiny, c, p, schedule::Placement::Linear, default_execution(hw));
  EXPECT_TRUE(got.table.copies_block_compute);
  for (const StageCost& st : got.stages) {
    const double want = st.parameters * 8.0 / (hw.host_bandwidth * hw.efficiency.host_link) +
                        st.parameters * 38.0 / (hw.efficiency.memory * hw.hbm_bandwidth);
    EXPECT_NEAR(st.optimizer, want, want * 1e-12);
  }
}

TEST(OffloadCosts, HardwareWithoutHostBandwidthNamesBothKeys) {
  spec::ClusterSpec c = a100(2);
  c.hardware.host_bandwidth = 0.0;  // not known
  for (const char* key : {"plan.offload_activations", "plan.offload_optimizer"}) {
    spec::ParallelPlan p = plan("1f1b", 1, Recompute::Full);
    (std::string(key) == "plan.offload_activations" ? p.offload_activations : p.offload_optimizer) =
        true;
    try {
      costs_of(p, c);
      ADD_FAILURE() << key << " with host_bandwidth 0 was priced";
    } catch (const SpecError& e) {
      const std::vector<std::string> want = {key, "hardware.host_bandwidth"};
      EXPECT_EQ(e.fields(), want) << e.what();
      EXPECT_NE(std::string(e.what()).find("host_bandwidth (bytes/s over PCIe)"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(evaluate_plan(gpt(), c, p), SpecError) << key;
  }
  // Nothing offloaded: the missing figure does not matter.
  EXPECT_NO_THROW(costs_of(plan("1f1b", 1, Recompute::Full), c));
}

}  // namespace
}  // namespace pipetune::tuner
