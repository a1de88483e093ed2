// Shared by the NCCL communicator's GPU tests: the process's communicator (made once in main),
// the skip reason, device buffers, and the reference: the same calls on the thread communicator
// (host buffers, one thread per rank, in this process).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/comm/process_group.hpp"
#include "engine/comm/thread_cluster.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/nccl/nccl_communicator.hpp"

namespace pipetune::nccl::testing {

extern std::string g_skip_reason;  // empty when the tests can run
extern NcclCommunicator* g_comm;   // this process's communicator, or nullptr when skipping

// The world under two names: the same members in another stream of collectives ("tp").
inline std::vector<comm::ProcessGroup> test_groups(int world) {
  comm::ProcessGroup tp = comm::make_world_group(world);
  tp.name = "tp";
  return {tp};
}

#define PIPETUNE_REQUIRE_NCCL()                                 \
  do {                                                          \
    if (!::pipetune::nccl::testing::g_skip_reason.empty())      \
      GTEST_SKIP() << "NCCL communicator not testable here: "   \
                   << ::pipetune::nccl::testing::g_skip_reason; \
  } while (0)

// A device array of floats, filled from and read back into host vectors.
class DeviceFloats {
 public:
  explicit DeviceFloats(std::size_t n) : n_(n) {
    if (n_ > 0) PIPETUNE_CUDA_CHECK(cudaMalloc(&data_, n_ * sizeof(float)));
  }
  explicit DeviceFloats(const std::vector<float>& host) : DeviceFloats(host.size()) {
    if (n_ > 0)
      PIPETUNE_CUDA_CHECK(
          cudaMemcpy(data_, host.data(), n_ * sizeof(float), cudaMemcpyHostToDevice));
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() {
    if (data_ != nullptr) cudaFree(data_);
  }
  std::span<float> span() { return {data_, n_}; }
  std::span<float> span(std::size_t offset, std::size_t n) { return {data_ + offset, n}; }
  std::vector<float> values() const {
    std::vector<float> out(n_);
    PIPETUNE_CUDA_CHECK(cudaDeviceSynchronize());
    if (n_ > 0)
      PIPETUNE_CUDA_CHECK(
          cudaMemcpy(out.data(), data_, n_ * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  float* data_ = nullptr;
  std::size_t n_ = 0;
};

// A rank's test input: distinct per rank and element, not exactly representable sums.
inline std::vector<float> input_of(int rank, std::size_t n, float salt = 0.0f) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(rank) + salt) *
           (1.0f + 0.25f * static_cast<float>(rank));
  return v;
}

// Runs `fn` on every rank of a thread cluster of `world` and returns each rank's result vector.
inline std::vector<std::vector<float>> reference(
    int world, const std::function<std::vector<float>(comm::Communicator&)>& fn) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(world));
  std::mutex m;
  comm::run_threads(world, [&](comm::Communicator& c) {
    std::vector<float> r = fn(c);
    const std::lock_guard<std::mutex> lock(m);
    out[static_cast<std::size_t>(c.rank())] = std::move(r);
  });
  return out;
}

// |nccl - ref| <= tol (|ref| + max|ref|) element by element (NCCL sums in its own order).
inline ::testing::AssertionResult near_reference(const std::string& what,
                                                 const std::vector<float>& got,
                                                 const std::vector<float>& ref, double tol = 1e-5) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " values, reference has " << ref.size();
  double scale = 0.0;
  for (float v : ref) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(d <= tol * (std::fabs(static_cast<double>(ref[i])) + scale)))
      return ::testing::AssertionFailure()
             << what << ": [" << i << "] NCCL " << got[i] << " threads " << ref[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace pipetune::nccl::testing
