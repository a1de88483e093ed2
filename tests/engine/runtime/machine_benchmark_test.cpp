// The machine benchmark returns one finite positive sample per point of its sweep, bandwidths and
// latency in plausible ranges, and restores OpenBLAS's thread count. Only loose bounds on the
// timings: the test must pass on a loaded machine.
#include "engine/runtime/machine_benchmark.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/errors.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::runtime {
namespace {

bool positive_finite(double x) {
  return std::isfinite(x) && x > 0.0;
}

MachineBenchmarkOptions quick_options() {
  MachineBenchmarkOptions o;
  o.devices = 2;
  o.quick = true;
  o.seconds_per_sample = 0.005;
  return o;
}

TEST(MachineBenchmark, QuickRunGivesEverySample) {
  tensor::set_blas_threads(1);
  const MachineMeasurements m = measure_machine(quick_options());
  EXPECT_EQ(tensor::blas_threads(), 1);  // restored after running with threads_per_device
  EXPECT_EQ(m.devices, 2);
  EXPECT_EQ(m.threads_per_device, 1);

  ASSERT_EQ(m.gemm.size(), 2u);
  for (const GemmSample& s : m.gemm) {
    EXPECT_GT(s.m * s.k * s.n, 0);
    EXPECT_TRUE(positive_finite(s.seconds)) << s.m << "x" << s.k << "x" << s.n << ": " << s.seconds;
  }
  // The sweep goes from small to large products, and 64x the FLOPs cannot take less time.
  const GemmSample& small = m.gemm.front();
  const GemmSample& large = m.gemm.back();
  EXPECT_LT(small.m * small.k * small.n, large.m * large.k * large.n);
  EXPECT_LT(small.seconds, large.seconds)
      << "seconds per call: " << small.m << "x" << small.k << "x" << small.n << " " << small.seconds
      << ", " << large.m << "x" << large.k << "x" << large.n << " " << large.seconds;

  ASSERT_EQ(m.attention.size(), 2u);
  for (const AttentionSample& s : m.attention) {
    EXPECT_GT(s.batch, 0);
    EXPECT_GT(s.heads, 0);
    EXPECT_GT(s.seq, 0);
    EXPECT_GT(s.head_dim, 0);
    EXPECT_TRUE(positive_finite(s.forward_seconds)) << "seq " << s.seq;
    EXPECT_TRUE(positive_finite(s.backward_seconds)) << "seq " << s.seq;
  }
  EXPECT_LT(m.attention.front().seq, m.attention.back().seq);

  constexpr double kTenTerabytesPerSecond = 1e13;
  EXPECT_TRUE(positive_finite(m.memory_bandwidth));
  EXPECT_LT(m.memory_bandwidth, kTenTerabytesPerSecond);
  EXPECT_TRUE(positive_finite(m.special_function_rate));
  EXPECT_TRUE(positive_finite(m.transfer_bandwidth));
  EXPECT_LT(m.transfer_bandwidth, kTenTerabytesPerSecond);
  EXPECT_TRUE(positive_finite(m.transfer_latency));
  EXPECT_LT(m.transfer_latency, 0.1);
  EXPECT_GT(m.memory_bytes, 0);

  // Two devices: the collectives over both, on a whole number of floats per device.
  EXPECT_GT(m.collective_bytes, 0);
  EXPECT_EQ(m.collective_bytes % (2 * sizeof(float)), 0u);
  EXPECT_TRUE(positive_finite(m.all_reduce_seconds));
  EXPECT_TRUE(positive_finite(m.all_gather_seconds));
  EXPECT_TRUE(positive_finite(m.reduce_scatter_seconds));
}

TEST(MachineBenchmark, RestoresBlasThreadsAfterMoreThreadsPerDevice) {
  tensor::set_blas_threads(1);
  MachineBenchmarkOptions o = quick_options();
  o.devices = 1;
  o.threads_per_device = 2;
  const MachineMeasurements m = measure_machine(o);
  EXPECT_EQ(m.devices, 1);
  EXPECT_EQ(m.threads_per_device, 2);
  EXPECT_EQ(tensor::blas_threads(), 1);
  // One device: no collective to time.
  EXPECT_EQ(m.collective_bytes, 0);
  EXPECT_EQ(m.all_reduce_seconds, 0.0);
  EXPECT_EQ(m.all_gather_seconds, 0.0);
  EXPECT_EQ(m.reduce_scatter_seconds, 0.0);
}

// A sample is the median of its calls' times, so a call preempted for longer than the whole window
// (as under a parallel ctest) does not become the figure; the mean would have made it 400x.
TEST(MachineBenchmark, MedianIgnoresAPreemptedCall) {
  std::vector<double> calls(9, 1e-5);
  calls.push_back(4e-3);  // one call preempted
  EXPECT_DOUBLE_EQ(median_seconds(calls), 1e-5);
  EXPECT_DOUBLE_EQ(median_seconds({3.0, 1.0, 4.0, 2.0}),
                   2.5);  // even count: mean of the middle two
  EXPECT_DOUBLE_EQ(median_seconds({7.0}), 7.0);
  EXPECT_THROW(median_seconds({}), InputError);
}

TEST(MachineBenchmark, InvalidOptionsThrowInputError) {
  const auto with = [](auto change) {
    MachineBenchmarkOptions o = quick_options();
    change(o);
    return o;
  };
  EXPECT_THROW(measure_machine(with([](auto& o) { o.devices = -1; })), InputError);
  EXPECT_THROW(measure_machine(with([](auto& o) { o.threads_per_device = 0; })), InputError);
  EXPECT_THROW(measure_machine(with([](auto& o) { o.seconds_per_sample = 0.0; })), InputError);
  EXPECT_THROW(measure_machine(with([](auto& o) { o.seconds_per_sample = -1.0; })), InputError);
  EXPECT_THROW(measure_machine(with([](auto& o) {
                 o.seconds_per_sample = std::numeric_limits<double>::quiet_NaN();
               })),
               InputError);
  EXPECT_THROW(measure_machine(with([](auto& o) {
                 o.seconds_per_sample = std::numeric_limits<double>::infinity();
               })),
               InputError);
}

}  // namespace
}  // namespace pipetune::runtime
