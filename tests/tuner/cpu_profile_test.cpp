// The CPU hardware profile: closed-form recovery of the GEMM curve and attention rate from
// synthetic timings, input checks, and what a Cpu device changes in the cost and memory models.
#include "tuner/calibration/cpu_profile.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/errors.hpp"
#include "engine/spec/spec.hpp"
#include "tuner/cost/analytic_costs.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/memory/memory_model.hpp"

namespace pipetune::tuner {
namespace {

using profiler::GemmSample;
using profiler::MachineMeasurements;

double flops_of(const GemmSample& g) {
  return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.k) * static_cast<double>(g.n);
}

// Timings that follow the cost model's GEMM curve exactly: t = (F + half) / rate, for products
// of 1e6, 1e7, 1e8, 1e9 and 4e9 FLOPs.
MachineMeasurements synthetic(double rate, double half, double attention_rate) {
  MachineMeasurements m;
  m.devices = 2;
  for (GemmSample g :
       {GemmSample{50, 100, 100}, GemmSample{100, 100, 500}, GemmSample{500, 100, 1000},
        GemmSample{1000, 500, 1000}, GemmSample{1000, 1000, 2000}}) {
    g.seconds = (flops_of(g) + half) / rate;
    m.gemm.push_back(g);
  }
  for (std::int64_t seq : {64, 128, 256}) {
    const double flops = attention_forward_flops(2, 4, seq, 64);
    // The engine's backward: 2 forward FLOPs (dV, dP, dQ, dK against QK^T, AV), at the same rate.
    m.attention.push_back({2, 4, seq, 64, flops / attention_rate, 2.0 * flops / attention_rate});
  }
  m.memory_bandwidth = 20e9;
  m.special_function_rate = 3e8;
  m.transfer_bandwidth = 8e9;
  m.transfer_latency = 2e-6;
  m.memory_bytes = 8LL << 30;
  return m;
}

TEST(CpuProfile, RecoversTheCurvesItWasTimedWith) {
  const spec::HardwareSpec hw = cpu_hardware_profile(synthetic(50e9, 2e6, 20e9), "cpu", "d");
  EXPECT_EQ(hw.device, spec::DeviceKind::Cpu);
  EXPECT_NEAR(hw.peak_flops * hw.efficiency.gemm, 50e9, 50e9 * 1e-9);
  EXPECT_NEAR(hw.efficiency.gemm_half_flops, 2e6, 2e6 * 1e-6);
  EXPECT_NEAR(hw.peak_flops * hw.efficiency.attention, 20e9, 20e9 * 1e-9);
  EXPECT_NEAR(hw.hbm_bandwidth * hw.efficiency.memory, 20e9, 1.0);
  EXPECT_NEAR(hw.intra_node_bandwidth * hw.efficiency.intra_node_bus, 8e9, 1.0);
  EXPECT_DOUBLE_EQ(hw.intra_node_latency, 2e-6);
  EXPECT_DOUBLE_EQ(hw.special_function_rate, 3e8);
  EXPECT_EQ(hw.hbm_bytes, 8LL << 30);
  EXPECT_EQ(hw.devices_per_node, 2);
  // Fractions stay inside (0, 1) so a later calibrate can move them both ways.
  EXPECT_DOUBLE_EQ(hw.efficiency.gemm, kCpuProfileFraction);
  EXPECT_LT(hw.efficiency.attention, hw.efficiency.gemm);
  // Attention faster than GEMMs: it takes the fraction, GEMMs less.
  const spec::HardwareSpec fast = cpu_hardware_profile(synthetic(20e9, 2e6, 50e9), "cpu", "d");
  EXPECT_DOUBLE_EQ(fast.efficiency.attention, kCpuProfileFraction);
  EXPECT_NEAR(fast.peak_flops * fast.efficiency.gemm, 20e9, 20e9 * 1e-9);
}

// Collectives timed as the cost model's ring formula would time them at these bus bandwidths:
// all-gather faster than a send, reduce-scatter slower, as the thread communicator runs them.
MachineMeasurements with_collectives(MachineMeasurements m, double all_reduce_bus,
                                     double all_gather_bus, double reduce_scatter_bus) {
  m.collective_bytes = 16'000'000;
  const double n = m.devices, share = (n - 1) / n, latency = m.transfer_latency;
  const double bytes = static_cast<double>(m.collective_bytes);
  m.all_reduce_seconds = 2 * (n - 1) * latency + 2 * share * bytes / all_reduce_bus;
  m.all_gather_seconds = (n - 1) * latency + share * bytes / all_gather_bus;
  m.reduce_scatter_seconds = (n - 1) * latency + share * bytes / reduce_scatter_bus;
  return m;
}

TEST(CpuProfile, EachCollectiveCostsWhatItWasTimedAt) {
  for (int devices : {2, 4}) {
    MachineMeasurements base = synthetic(50e9, 2e6, 20e9);
    base.devices = devices;
    const MachineMeasurements m = with_collectives(base, 3e9, 12e9, 2.5e9);
    const spec::ClusterSpec cluster =
        spec::make_cluster(cpu_hardware_profile(m, "cpu", "d"), devices);
    const GroupLink all = group_link(cluster, 0, 1, devices);
    ASSERT_FALSE(all.inter_node);
    const double bytes = static_cast<double>(m.collective_bytes);
    EXPECT_NEAR(collective_time(Collective::AllReduce, bytes, all), m.all_reduce_seconds,
                1e-9 * m.all_reduce_seconds);
    EXPECT_NEAR(collective_time(Collective::AllGather, bytes, all), m.all_gather_seconds,
                1e-9 * m.all_gather_seconds);
    EXPECT_NEAR(collective_time(Collective::ReduceScatter, bytes, all), m.reduce_scatter_seconds,
                1e-9 * m.reduce_scatter_seconds);
    // The fastest (the all-gather) sets intra_node_bandwidth at the profile's fraction; a send
    // keeps the measured transfer rate, at home and across the (absent) second tier.
    const spec::HardwareEfficiency& e = cluster.hardware.efficiency;
    EXPECT_DOUBLE_EQ(e.all_gather_bus, kCpuProfileFraction);
    EXPECT_NEAR(cluster.hardware.intra_node_bandwidth * e.intra_node_bus, 8e9, 1.0);
    EXPECT_NEAR(cluster.hardware.inter_node_bandwidth * e.inter_node_bus, 8e9, 1.0);
    const GroupLink pair = pair_link(cluster, 0, 1);
    EXPECT_NEAR(collective_time(Collective::SendRecv, 8e6, pair), 2e-6 + 1e-3, 1e-12);
    for (double f : {e.all_reduce_bus, e.all_gather_bus, e.reduce_scatter_bus, e.intra_node_bus}) {
      EXPECT_GT(f, 0.0);
      EXPECT_LE(f, kCpuProfileFraction * (1.0 + 1e-12));
    }
  }
}

TEST(CpuProfile, OneDeviceLeavesTheCollectivesToTheTransfer) {
  MachineMeasurements m = synthetic(50e9, 2e6, 20e9);
  m.devices = 1;
  const spec::HardwareSpec hw = cpu_hardware_profile(m, "cpu", "d");
  EXPECT_EQ(hw.efficiency.all_reduce_bus, 0.0);
  EXPECT_EQ(hw.efficiency.all_gather_bus, 0.0);
  EXPECT_EQ(hw.efficiency.reduce_scatter_bus, 0.0);
  EXPECT_DOUBLE_EQ(hw.efficiency.intra_node_bus, kCpuProfileFraction);
  EXPECT_NEAR(hw.intra_node_bandwidth * hw.efficiency.intra_node_bus, 8e9, 1.0);
}

TEST(CpuProfile, PerCallTimeOfAGemmMatchesTheCostModel) {
  // The profile's curve predicts the timed samples: (F + half) / (gemm * peak).
  const MachineMeasurements m = synthetic(30e9, 5e6, 10e9);
  const spec::HardwareSpec hw = cpu_hardware_profile(m, "cpu", "d");
  for (const GemmSample& g : m.gemm) {
    const double t =
        (flops_of(g) + hw.efficiency.gemm_half_flops) / (hw.efficiency.gemm * hw.peak_flops);
    EXPECT_NEAR(t, g.seconds, 1e-9 * g.seconds) << flops_of(g);
  }
}

TEST(CpuProfile, NoVisibleOverheadGivesAPureRate) {
  MachineMeasurements m = synthetic(40e9, 0.0, 10e9);
  m.gemm[0].seconds *= 0.5;  // a sample faster than the rate: the intercept would be negative
  const spec::HardwareSpec hw = cpu_hardware_profile(m, "cpu", "d");
  EXPECT_EQ(hw.efficiency.gemm_half_flops, 0.0);
  EXPECT_GT(hw.peak_flops, 0.0);
}

TEST(CpuProfile, BadSamplesAreNamed) {
  auto error = [](MachineMeasurements m) {
    try {
      cpu_hardware_profile(m, "cpu", "d");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  MachineMeasurements m = synthetic(1e9, 0, 1e9);
  m.gemm.resize(1);
  EXPECT_NE(error(m).find("two sizes"), std::string::npos);
  m = synthetic(1e9, 0, 1e9);
  m.gemm[1].seconds = std::nan("");
  EXPECT_NE(error(m).find("GEMM time"), std::string::npos);
  m = synthetic(1e9, 0, 1e9);
  m.memory_bandwidth = 0;
  EXPECT_NE(error(m).find("memory bandwidth"), std::string::npos);
  m = synthetic(1e9, 0, 1e9);
  m.special_function_rate = -1;
  EXPECT_NE(error(m).find("exp rate"), std::string::npos);
  m = synthetic(1e9, 0, 1e9);
  m.attention.clear();
  EXPECT_NE(error(m).find("attention"), std::string::npos);
  m = with_collectives(synthetic(1e9, 0, 1e9), 1e9, 1e9, 1e9);
  m.reduce_scatter_seconds = 0.0;
  EXPECT_NE(error(m).find("collective time"), std::string::npos);
}

TEST(CpuEngineExecution, ACpuDeviceRunsTheEngineAndAGpuMegatron) {
  spec::HardwareSpec hw = spec::load_hardware("a100-80gb");
  EXPECT_EQ(default_execution(hw).activation_bytes, ExecutionOptions{}.activation_bytes);
  EXPECT_EQ(default_memory_options(hw).weight_bytes, MemoryModelOptions{}.weight_bytes);
  hw.device = spec::DeviceKind::Cpu;
  const ExecutionOptions x = default_execution(hw);
  EXPECT_EQ(x.activation_bytes, 4);
  EXPECT_TRUE(x.stores_attention_probabilities);
  EXPECT_FALSE(x.overlap_grad_reduce);
  const MemoryModelOptions mem = default_memory_options(hw);
  EXPECT_EQ(mem.weight_bytes, 4.0);
  EXPECT_EQ(mem.optimizer_bytes, 8.0);  // Adam m and v, no master copy
  EXPECT_EQ(mem.framework_overhead_bytes, 0.0);
}

TEST(CpuEngineExecution, StoredProbabilitiesAreBatchHeadsSeqSquaredPerLayer) {
  spec::ModelSpec model = spec::load_model("tiny");
  spec::ParallelPlan plan;
  plan.micro_batch_size = 3;
  spec::apply_defaults(model);
  spec::apply_defaults(plan);
  AnalyticAssumptions fused;
  fused.bytes_per_value = 4;
  AnalyticAssumptions stored = fused;
  stored.stores_attention_probabilities = true;
  const double extra =
      layer_activation_bytes(model, plan, stored) - layer_activation_bytes(model, plan, fused);
  const double want = 3.0 * static_cast<double>(model.heads) * static_cast<double>(model.seq_len) *
                      static_cast<double>(model.seq_len) * 4.0;
  EXPECT_NEAR(extra, want, 1e-9 * want);
}

}  // namespace
}  // namespace pipetune::tuner
