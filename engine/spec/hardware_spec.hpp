// HardwareSpec: one accelerator kind and the node it usually sits in. All figures are in base
// units (FLOP/s, bytes, bytes/s, seconds) so that cost formulas need no unit conversions.
#pragma once

#include <cstdint>
#include <string>

namespace pipetune::spec {

// How close real kernels and collectives come to the datasheet figures: the tuner's efficiency
// curves (tuner/cost). The defaults are Calculon's generic GPU tables (calculon-ai/calculon
// systems/a100_80g.json and h100_80g_nvl8.json, reference/tuners.md section 2); hardware presets
// replace them with calibrated values and say where each came from. A hardware file gives them
// as an [efficiency] table with these key names (engine/spec/load.cpp).
struct HardwareEfficiency {
  // GEMMs follow gemm * F / (F + gemm_half_flops) of peak_flops for a product of F FLOPs, i.e.
  // each GEMM costs (F + gemm_half_flops) / (gemm * peak_flops) seconds. Calculon's table
  // (0.95 at >= 128 GFLOP, 0.9 at 16, 0.6 at 1) is this curve with 0.95 and 0.6e9.
  double gemm = 0.95;
  double gemm_half_flops = 0.6e9;  // FLOPs
  // Fused (flash) attention kernels: fraction of peak_flops over the causal FLOPs they execute.
  // FlashAttention-2 (Dao 2023) reports 50-73% of A100 peak forward; 0.6 is the middle.
  double attention = 0.6;
  double memory = 0.9;          // element-wise kernels: fraction of hbm_bandwidth
  double intra_node_bus = 0.6;  // collective bus bandwidth / intra_node_bandwidth (Calculon)
  double inter_node_bus = 0.9;  // collective bus bandwidth / NIC bandwidth (Calculon)
  // Host copies (pinned memory over PCIe) / host_bandwidth: nvbandwidth and bandwidthTest reach
  // about 80% of a PCIe link's datasheet rate per direction.
  double host_link = 0.8;
  // One collective's own bus bandwidth inside a node / intra_node_bandwidth, where it differs from
  // intra_node_bus (which then prices point-to-point and the other collectives): the embedded
  // engine's thread communicator gathers with plain copies but reduces with extra reads and a
  // staging copy, so its all-gather runs several times faster than its reduce-scatter, and both
  // faster than a send (nccl-tests likewise reports a bus bandwidth per collective). 0: not
  // given, intra_node_bus. `calibrate --local` measures them.
  double all_reduce_bus = 0.0;
  double all_gather_bus = 0.0;
  double reduce_scatter_bus = 0.0;

  bool operator==(const HardwareEfficiency&) const = default;
};

// What a device is. Gpu: an accelerator running a training framework (Megatron-Core and its
// kin). Cpu: a share of this machine's cores running the embedded engine's CPU backend, one
// rank per device (presets written by `pipetune calibrate --local`). The cost model takes the
// framework's execution facts from it (tuner::default_execution).
enum class DeviceKind { Gpu, Cpu };

struct HardwareSpec {
  std::string name;
  std::string description;
  DeviceKind device = DeviceKind::Gpu;  // TOML `device = "gpu" | "cpu"`
  double peak_flops = 0.0;              // dense BF16 FLOP/s (no sparsity); fp32 for a CPU
  // A GPU's dense FP32 FLOP/s without tensor cores (the CUDA engine's fp32 GEMMs and attention
  // run there); 0: not known (the CPU's peak_flops is already fp32).
  double fp32_peak_flops = 0.0;
  std::int64_t hbm_bytes = 0;         // device memory (a CPU device: its share of RAM)
  double hbm_bandwidth = 0.0;         // bytes/s
  double intra_node_bandwidth = 0.0;  // scale-up link (NVLink...), bytes/s per GPU per direction
  double inter_node_bandwidth = 0.0;  // scale-out NIC, bytes/s per GPU per direction
  // Offload tier (KARMA): the link between a device and host memory (PCIe), bytes/s per device
  // per direction, and the host memory one device may use (its node's RAM / devices_per_node).
  // 0: not known; a plan that offloads then cannot be priced (the cost model says which key).
  double host_bandwidth = 0.0;
  std::int64_t host_memory_bytes = 0;
  int devices_per_node = 8;
  // Start-up latency of one transfer. Order-of-magnitude defaults (NCCL small-message latency
  // is a few microseconds over NVLink and around ten across a network); calibrate by measurement.
  double intra_node_latency = 3e-6;   // seconds
  double inter_node_latency = 10e-6;  // seconds
  // exp evaluations per second of the element-wise kernels that compute them (cross-entropy):
  // where they, not the bytes, bound the kernel (a CPU). 0: bandwidth-bound, the exps free (a
  // GPU's fused cross-entropy). `calibrate --local` measures it with the engine's kernels.
  double special_function_rate = 0.0;
  HardwareEfficiency efficiency;

  bool operator==(const HardwareSpec&) const = default;
};

}  // namespace pipetune::spec
