// A hardware description of this machine for the embedded engine's CPU backend, from
// micro-benchmarks of the engine's own kernels (`pipetune calibrate --local`,
// engine/runtime/machine_benchmark). One device is one rank with its threads; the cost model's
// curves are fitted to what was timed:
//
//   GEMMs      t = (F + gemm_half_flops) / (gemm * peak_flops): least squares of t on F over the
//              sweep, each sample weighted by 1/t (relative error), so gemm * peak_flops is the
//              asymptotic rate and gemm_half_flops the per-call overhead in FLOPs
//   attention  forward + backward = (1 + attention_backward_factor) * causal forward FLOPs /
//              (attention * peak_flops), the cost model's accounting for the engine's kernel
//              (probabilities stored: 2): the geometric mean over the sweep
//   memory     Backend::add bandwidth; exps: the cross-entropy kernels' rate; transfers: one
//              point-to-point message between two ranks
//   collectives  all-reduce, all-gather and reduce-scatter over all devices: each its own bus
//              bandwidth, the inverse of the cost model's ring formula at the transfer latency
//              (collectives.hpp), as HardwareEfficiency::all_reduce_bus... of intra_node_bandwidth
//
// The bandwidth fractions are set to kCpuProfileFraction and the peaks scaled to match; the
// faster of GEMM and attention gets that fraction of peak_flops, the other its share, and
// likewise the fastest of the transfer and the collectives sets intra_node_bandwidth. So a
// later `pipetune calibrate --hardware FILE` from training runs can move them either way (its
// fit works on the logit of each fraction).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/spec/hardware_spec.hpp"

namespace pipetune::tuner {

inline constexpr double kCpuProfileFraction = 0.9;

struct TimedGemm {
  double flops = 0.0;    // 2 * m * k * n
  double seconds = 0.0;  // per call
};
struct TimedAttention {
  double causal_forward_flops = 0.0;  // attention_forward_flops()
  double forward_seconds = 0.0, backward_seconds = 0.0;
};

struct CpuMeasurements {
  int devices = 1;             // ranks measured at once (one per node: a single machine)
  int threads_per_device = 1;  // compute threads per rank
  std::vector<TimedGemm> gemm;
  std::vector<TimedAttention> attention;
  double memory_bandwidth = 0.0;       // bytes/s per device, all devices busy
  double special_function_rate = 0.0;  // exp evaluations/s of the cross-entropy kernels
  double transfer_bandwidth = 0.0;     // bytes/s between two ranks
  double transfer_latency = 0.0;       // seconds
  // Seconds per call of each collective over all devices at once (the thread communicator) on a
  // full buffer of collective_bytes; 0: not measured (one device), the transfer figures price them.
  double collective_bytes = 0.0;
  double all_reduce_seconds = 0.0, all_gather_seconds = 0.0, reduce_scatter_seconds = 0.0;
  std::int64_t memory_bytes = 0;  // RAM per device
};

// FLOPs of the causal half of QK^T and attention-over-V for one call: 2 * batch * seq^2 *
// heads * head_dim (half of the full square's 4).
double attention_forward_flops(std::int64_t batch, std::int64_t heads, std::int64_t seq,
                               std::int64_t head_dim);

// Throws InputError when a sample is missing, non-positive or not finite, or the GEMM sweep
// has fewer than two sizes.
spec::HardwareSpec cpu_hardware_profile(const CpuMeasurements& m, const std::string& name,
                                        const std::string& description);

}  // namespace pipetune::tuner
