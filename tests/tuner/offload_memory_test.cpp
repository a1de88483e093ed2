// The memory model's offload tier (tuner/memory/memory_model.hpp, tuner/predict/evaluate.hpp):
// what offloaded activations leave on the device and put on the host, optimizer state moved to
// the host, and host memory as a limit. References: the simulator's units worked out by hand
// (tests/tuner/offload_sim_test.cpp's GPipe case) times Korthikanti's bytes, and the optimizer
// bytes per parameter of mixed-precision Adam.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "tuner/memory/memory_model.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {
namespace {

using spec::Recompute;

spec::ModelSpec gpt() {
  spec::ModelSpec m = spec::load_model("gpt3-1.7b");  // h = 2304, s = 2048, 24 layers
  spec::apply_defaults(m);
  return m;
}

spec::ClusterSpec a100(int gpus) {
  return spec::make_cluster(spec::load_hardware("a100-80gb"), gpus);
}

// GPipe over two stages of 12 layers, 4 micro-batches of one sequence, full recomputation.
spec::ParallelPlan gpipe(int dp = 1, int zero = 0) {
  spec::ParallelPlan p;
  p.pp = 2;
  p.dp = dp;
  p.zero_stage = zero;
  p.micro_batch_size = 1;
  p.microbatches = 4;
  p.schedule = "gpipe";
  p.recompute = Recompute::Full;
  spec::apply_defaults(p);
  return p;
}

TEST(OffloadMemory, OffloadedActivationsLeaveThreeOfFourMicroBatchesOnTheDevice) {
  // Full recomputation keeps each layer's bf16 input, 2sbh bytes: 12 layers per stage.
  const double per_microbatch = 12 * 2.0 * 2048 * 1 * 2304;
  spec::ParallelPlan p = gpipe();
  const PlanEvaluation without = evaluate_plan(gpt(), a100(2), p);
  p.offload_activations = true;
  const PlanEvaluation with = evaluate_plan(gpt(), a100(2), p);
  // The hand timeline holds while two copies take less than the stage's forward: each
  // forward's copy ends before the next forward does, F0's before F3 starts, and each reload
  // (at most c after the start of the op before its backward) ends before that op does.
  for (int r = 0; r < 2; ++r)
    ASSERT_LT(2 * with.costs.table.stages[static_cast<std::size_t>(r)].offload,
              with.costs.table.cost(r, schedule::OpKind::F))
        << "stage " << r << ": two copies are not shorter than the forward, the hand timeline "
        << "below does not apply";
  // GPipe, m = 4: without offload a stage holds all 4 micro-batches. With it, at F3's start the
  // device holds F3, F2 (its copy still running) and F0 (reloaded one op ahead of BW0): 3. The
  // host peaks at F1, F2, F3 on stage 0 (BW1's reload waits for BW0, which waits for stage 1)
  // and at F2, F3 on stage 1 (BW1's reload starts as F3 ends, before F3's copy does).
  const double device_units = 3.0, host_units[] = {3.0, 2.0};
  for (int r = 0; r < 2; ++r) {
    const auto i = static_cast<std::size_t>(r);
    SCOPED_TRACE("stage " + std::to_string(r));
    const double logits = with.costs.transient_activation_bytes[i];  // not offloaded
    const double tolerance = per_microbatch * 1e-12;
    EXPECT_NEAR(without.memory.stages[i].activations, 4 * per_microbatch + logits, tolerance);
    EXPECT_NEAR(with.memory.stages[i].activations, device_units * per_microbatch + logits,
                tolerance);
    EXPECT_NEAR(with.memory.stages[i].host_activations, host_units[i] * per_microbatch, tolerance);
    EXPECT_NEAR(with.memory.stages[i].host(), host_units[i] * per_microbatch, tolerance);
    EXPECT_DOUBLE_EQ(without.memory.stages[i].host(), 0.0);
    EXPECT_DOUBLE_EQ(with.memory.stages[i].parameters, without.memory.stages[i].parameters);
    EXPECT_DOUBLE_EQ(with.memory.stages[i].optimizer, without.memory.stages[i].optimizer);
  }
  EXPECT_NEAR(with.memory.peak_host_bytes, 3 * per_microbatch, per_microbatch * 1e-12);
  EXPECT_EQ(with.memory.peak_host_stage, 0);
  // So nothing waits for a copy.
  EXPECT_NEAR(with.pipeline_time, without.pipeline_time, without.pipeline_time * 1e-12);
  EXPECT_TRUE(with.feasible) << with.infeasible_reason;
}

TEST(OffloadMemory, OffloadedOptimizerMovesExactlyTheOptimizerState) {
  // fp32 master weights, m and v: 12 bytes per parameter of the device's shard (all of the
  // stage's parameters under ZeRO 0, half of them under ZeRO-1 over dp = 2), now in host memory.
  for (int dp : {1, 2}) {
    SCOPED_TRACE("dp=" + std::to_string(dp));
    spec::ParallelPlan p = gpipe(dp, dp > 1 ? 1 : 0);
    const std::vector<StageParameters> params =
        stage_parameters(gpt(), p, schedule::Placement::Linear);
    const std::vector<double> activations = {1e9, 2e9};
    const MemoryEstimate on_device =
        estimate_memory(gpt(), a100(2 * dp), p, schedule::Placement::Linear, activations);
    p.offload_optimizer = true;
    const MemoryEstimate offloaded =
        estimate_memory(gpt(), a100(2 * dp), p, schedule::Placement::Linear, activations);
    for (int r = 0; r < 2; ++r) {
      const auto i = static_cast<std::size_t>(r);
      const double state = 12.0 * params[i].total() / dp;
      EXPECT_NEAR(on_device.stages[i].optimizer, state, state * 1e-12) << "stage " << r;
      EXPECT_EQ(offloaded.stages[i].optimizer, 0.0) << "stage " << r;
      EXPECT_EQ(offloaded.stages[i].host_optimizer, on_device.stages[i].optimizer)
          << "stage " << r << ": exactly the optimizer bytes move";
      EXPECT_NEAR(offloaded.stages[i].host(), state, state * 1e-12) << "stage " << r;
      EXPECT_NEAR(offloaded.stages[i].total(), on_device.stages[i].total() - state, state * 1e-12)
          << "stage " << r;
    }
  }
}

TEST(OffloadMemory, HostMemoryLimitsAPlanWhereTheHardwareGivesIt) {
  // About 0.85e9 parameters per stage: some 10 GB of optimizer state per device on the host.
  spec::ParallelPlan p = gpipe();
  p.offload_optimizer = true;
  spec::ClusterSpec small_host = a100(2);
  small_host.hardware.host_memory_bytes = std::int64_t{1} << 30;  // 1 GiB per device
  const PlanEvaluation e = evaluate_plan(gpt(), small_host, p);
  EXPECT_FALSE(e.feasible);
  EXPECT_FALSE(e.memory.fits());
  for (const char* words :
       {"of host memory", "1.0 GiB per device", "host_memory_bytes", "offloaded optimizer state"})
    EXPECT_NE(e.infeasible_reason.find(words), std::string::npos)
        << "'" << words << "' missing from: " << e.infeasible_reason;

  spec::ClusterSpec unknown_host = small_host;
  unknown_host.hardware.host_memory_bytes = 0;  // not known: never binding
  const PlanEvaluation u = evaluate_plan(gpt(), unknown_host, p);
  EXPECT_TRUE(u.feasible) << u.infeasible_reason;
  EXPECT_GT(u.memory.peak_host_bytes, double{std::int64_t{1} << 30});
}

}  // namespace
}  // namespace pipetune::tuner
