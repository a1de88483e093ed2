// Shared helpers for the GPU tests of the CudaBackend: skip without a usable device, device
// copies of host tensors, the comparison against CpuBackend with a readable diff (first
// mismatching index with both values, the count, and the worst element), and the tolerances the
// op tests' CUDA case floors theirs with (tests/engine/tensor/backend_test_support.hpp).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_devices.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::cuda::testing {

// Tolerances per dtype, relative to each element plus a floor relative to the tensor's largest
// value (elements that cancel to near zero):
//  - fp32 elementwise ops (same formula per element, expf for the CPU's exp_approx): 1e-5
//  - fp32 ops with reductions of different order (GEMMs, LayerNorm weights, attention): 1e-4
//  - bf16 GEMM inputs (8 mantissa bits, fp32 accumulation) against the fp32 CPU: 2e-2
inline constexpr double kFp32ElementwiseTol = 1e-5;
inline constexpr double kFp32ReductionTol = 1e-4;
inline constexpr double kBf16Tol = 2e-2;

// Why no CUDA device is usable, or empty when one is.
inline std::string gpu_unavailable_reason() {
  const DeviceQuery q = query_devices();
  return q.devices.empty() ? q.problem : std::string();
}

#define PIPETUNE_REQUIRE_GPU()                                                    \
  do {                                                                            \
    const std::string why_ = ::pipetune::cuda::testing::gpu_unavailable_reason(); \
    if (!why_.empty()) GTEST_SKIP() << "no CUDA device usable (" << why_ << ")";  \
  } while (0)

// A device copy of a host tensor (cudaMalloc'd, freed on destruction).
class DeviceTensor {
 public:
  explicit DeviceTensor(const tensor::Tensor& host) : shape_(host.shape()) {
    bytes_ = static_cast<std::size_t>(host.numel()) * sizeof(float);
    if (bytes_ > 0) {
      check(cudaMalloc(&data_, bytes_), "cudaMalloc");
      check(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    }
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() {
    if (data_ != nullptr) cudaFree(data_);
  }
  tensor::TensorView view() { return {static_cast<float*>(data_), shape_}; }
  operator tensor::TensorView() { return view(); }       // NOLINT: implicit on purpose
  operator tensor::ConstTensorView() { return view(); }  // NOLINT: implicit on purpose
  // Waits for the device and copies the values back.
  std::vector<float> values() const {
    std::vector<float> out(bytes_ / sizeof(float));
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (bytes_ > 0) check(cudaMemcpy(out.data(), data_, bytes_, cudaMemcpyDeviceToHost), "D2H");
    return out;
  }

 private:
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
  }
  tensor::Shape shape_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// |gpu - cpu| <= tol |cpu| + tol max|cpu| element by element. On failure: the first mismatching
// index with both values, how many differ, and the worst element.
inline ::testing::AssertionResult matches_cpu(const std::string& name,
                                              const std::vector<float>& gpu,
                                              const std::vector<float>& cpu, double tol) {
  if (gpu.size() != cpu.size()) {
    return ::testing::AssertionFailure()
           << name << ": " << gpu.size() << " GPU values, " << cpu.size() << " CPU values";
  }
  double scale = 0.0;
  for (float v : cpu) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  std::size_t bad = 0, first = 0, worst = 0;
  double worst_diff = -1.0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double d = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    const bool ok = d <= tol * std::fabs(static_cast<double>(cpu[i])) + tol * scale;
    if (!ok) {
      if (bad == 0) first = i;
      ++bad;
    }
    if (d > worst_diff || std::isnan(d)) {
      worst_diff = d;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  char line[256];
  std::snprintf(line, sizeof line,
                "%s: %zu of %zu values differ (tol %g): first at [%zu] gpu %.9g cpu %.9g; worst at "
                "[%zu] gpu %.9g cpu %.9g (diff %.3g)",
                name.c_str(), bad, gpu.size(), tol, first, gpu[first], cpu[first], worst,
                gpu[worst], cpu[worst], worst_diff);
  return ::testing::AssertionFailure() << line;
}

inline ::testing::AssertionResult matches_cpu(const std::string& name, const DeviceTensor& gpu,
                                              const tensor::Tensor& cpu, double tol) {
  return matches_cpu(name, gpu.values(), cpu.values(), tol);
}

// A CudaBackend and a CpuBackend side by side, and a random generator seeded by the suite: the
// fixture of the op-by-op comparisons. Skips without a usable device.
template <unsigned Seed>
class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PIPETUNE_REQUIRE_GPU();
    tensor::set_blas_threads(1);
    gpu_ = std::make_unique<CudaBackend>();
  }
  CudaBackend& gpu() { return *gpu_; }
  tensor::CpuBackend cpu_;
  std::mt19937 rng_{Seed};

 private:
  std::unique_ptr<CudaBackend> gpu_;
};

}  // namespace pipetune::cuda::testing
