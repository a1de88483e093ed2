// Micro-benchmarks of this machine through the engine's own CPU kernels (CpuBackend, the
// thread communicator), run on every "device" at once as ranks run in training: each device is a
// rank thread with its own CpuBackend and buffers, and all of them run each sample together, so
// the numbers include the sharing of cores, caches and memory bandwidth that training sees.
//
// Only raw measurements come out (profiler/machine_measurements.hpp); the tuner turns them into
// a hardware description for its cost model (tuner/calibration/cpu_profile.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "profiler/machine_measurements.hpp"

namespace pipetune::runtime {

struct MachineBenchmarkOptions {
  int devices = 0;  // ranks measured at once; 0 = hardware cores / threads_per_device (at least 1)
  int threads_per_device = 1;  // compute threads per rank (OpenBLAS threads and CpuBackend pool)
  // Repeat each measured call until at least this long (and at least 5 times); report the median
  // of the calls' times.
  double seconds_per_sample = 0.05;
  bool quick = false;  // tests: smaller sizes and 2 sizes per sweep
};

using profiler::AttentionSample;
using profiler::GemmSample;
using profiler::MachineMeasurements;

// Throws InputError (engine/errors.hpp) for devices < 0 or threads_per_device < 1 or
// seconds_per_sample <= 0 or not finite. Sets OpenBLAS's process-wide thread count to
// threads_per_device while it runs and restores the previous count before returning, so no rank
// threads of a training run may be running at the same time.
MachineMeasurements measure_machine(const MachineBenchmarkOptions& options = {});

// The median of per-call times: what a call typically takes, whatever a few preempted calls took.
// Throws InputError for no samples.
double median_seconds(std::vector<double> samples);

}  // namespace pipetune::runtime
