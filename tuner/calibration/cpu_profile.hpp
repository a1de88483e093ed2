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
#include "profiler/machine_measurements.hpp"

namespace pipetune::tuner {

inline constexpr double kCpuProfileFraction = 0.9;

// FLOPs of the causal half of QK^T and attention-over-V for one call: 2 * batch * seq^2 *
// heads * head_dim (half of the full square's 4).
double attention_forward_flops(std::int64_t batch, std::int64_t heads, std::int64_t seq,
                               std::int64_t head_dim);

// Throws InputError when a sample is missing, non-positive or not finite, or the GEMM sweep
// has fewer than two sizes. `m` as engine/runtime/machine_benchmark measures it.
spec::HardwareSpec cpu_hardware_profile(const profiler::MachineMeasurements& m,
                                        const std::string& name, const std::string& description);

}  // namespace pipetune::tuner
