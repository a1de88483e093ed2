// A device array owned by a CUDA benchmark, filled with seeded uniform values in [-1, 1) (never
// zeros: they hide wrong indexing and can run faster than real data).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/cuda/cuda_check.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::bench {

struct DeviceArray {
  explicit DeviceArray(tensor::Shape s, std::uint32_t seed = 1) : shape(s) {
    const auto n = static_cast<std::size_t>(s.numel());
    PIPETUNE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data), n * sizeof(float)));
    std::vector<float> host(n);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : host) v = u(rng);
    PIPETUNE_CUDA_CHECK(cudaMemcpy(data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  tensor::TensorView view() { return {data, shape}; }
  float* data = nullptr;
  tensor::Shape shape;
};

}  // namespace pipetune::bench
