// Raw measurements of one machine's compute, memory and communication, as the engine's machine
// benchmark takes them (engine/runtime/machine_benchmark.hpp: seconds per call, bytes per
// second) and the tuner turns them into a hardware description (tuner/calibration/cpu_profile).
#pragma once

#include <cstdint>
#include <vector>

namespace pipetune::profiler {

// linear_forward of x (m, k) by w (n, k): 2*m*k*n FLOPs.
struct GemmSample {
  std::int64_t m = 0, k = 0, n = 0;
  double seconds = 0.0;  // per call, mean over devices (all devices running concurrently)
};

// attention_forward + attention_backward_input of (batch, heads, seq, head_dim).
struct AttentionSample {
  std::int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  double forward_seconds = 0.0, backward_seconds = 0.0;  // per call, mean over devices
};

struct MachineMeasurements {
  int devices = 0;               // ranks measured at once (one per node: a single machine)
  int threads_per_device = 0;    // compute threads per rank
  std::vector<GemmSample> gemm;  // a sweep from small to large products
  std::vector<AttentionSample> attention;  // a sweep over seq (e.g. 64, 128, 256, 512)
  // bytes/s per device: Backend::add over arrays well beyond cache (12 bytes per element: read 2,
  // write 1), all devices at once
  double memory_bandwidth = 0.0;
  // exp evaluations/s as the engine's cross-entropy kernels make them: vocab_ce_local_stats +
  // vocab_ce_backward over (rows, vocab) logits, one exp per logit each, all devices at once
  double special_function_rate = 0.0;
  // bytes/s: one point-to-point send/recv of a large message between two ranks over the thread
  // communicator
  double transfer_bandwidth = 0.0;
  // seconds: one small (1 float) point-to-point message between two ranks (half a ping-pong
  // round trip)
  double transfer_latency = 0.0;
  // seconds per call of each collective over all devices at once (the thread communicator, the
  // world group) on a full buffer of collective_bytes (all-reduce's data, all-gather's output,
  // reduce-scatter's input); all 0 with one device or when not measured
  std::int64_t collective_bytes = 0;
  double all_reduce_seconds = 0.0, all_gather_seconds = 0.0, reduce_scatter_seconds = 0.0;
  // physical memory (sysconf _SC_PHYS_PAGES * _SC_PAGE_SIZE) / devices; 0 when unknown
  std::int64_t memory_bytes = 0;
};

}  // namespace pipetune::profiler
