// Micro-benchmarks of this machine through the engine's own CPU kernels (CpuBackend, the
// thread communicator), run on every "device" at once as ranks run in training: each device is a
// rank thread with its own CpuBackend and buffers, and all of them run each sample together, so
// the numbers include the sharing of cores, caches and memory bandwidth that training sees.
//
// Only raw measurements come out (seconds per call, bytes per second); turning them into a
// hardware description for the tuner's cost model is the caller's job (pipetune calibrate).
#pragma once

#include <cstdint>
#include <vector>

namespace pipetune::runtime {

struct MachineBenchmarkOptions {
  int devices = 0;  // ranks measured at once; 0 = hardware cores / threads_per_device (at least 1)
  int threads_per_device = 1;  // compute threads per rank (OpenBLAS threads and CpuBackend pool)
  // Repeat each measured call until at least this long (and at least 5 times); report the median
  // of the calls' times.
  double seconds_per_sample = 0.05;
  bool quick = false;  // tests: smaller sizes and 2 sizes per sweep
};

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
  int devices = 0, threads_per_device = 0;
  std::vector<GemmSample> gemm;            // a sweep from small to large products
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
  // reduce-scatter's input); all 0 with one device
  std::int64_t collective_bytes = 0;
  double all_reduce_seconds = 0.0, all_gather_seconds = 0.0, reduce_scatter_seconds = 0.0;
  // physical memory (sysconf _SC_PHYS_PAGES * _SC_PAGE_SIZE) / devices; 0 when unknown
  std::int64_t memory_bytes = 0;
};

// Throws InputError (engine/errors.hpp) for devices < 0 or threads_per_device < 1 or
// seconds_per_sample <= 0 or not finite. Sets OpenBLAS's process-wide thread count to
// threads_per_device while it runs and restores the previous count before returning, so no rank
// threads of a training run may be running at the same time.
MachineMeasurements measure_machine(const MachineBenchmarkOptions& options = {});

// The median of per-call times: what a call typically takes, whatever a few preempted calls took.
// Throws InputError for no samples.
double median_seconds(std::vector<double> samples);

}  // namespace pipetune::runtime
