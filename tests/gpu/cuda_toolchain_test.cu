// GPU smoke test of the CUDA build plumbing: a kernel built by this project's toolchain settings
// runs on the device and matches the CPU. Label "gpu"; skips with a message without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#define CUDA_CHECK(call)                                                                \
  do {                                                                                  \
    const cudaError_t err_ = (call);                                                    \
    ASSERT_EQ(err_, cudaSuccess) << __FILE__ << ":" << __LINE__ << " " << #call << ": " \
                                 << cudaGetErrorString(err_);                           \
  } while (0)

namespace {

__global__ void axpy(int n, float a, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

TEST(CudaToolchain, AxpyKernelMatchesCpu) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0)
    GTEST_SKIP() << "no CUDA device available (" << cudaGetErrorString(e) << ")";
  const int n = 1 << 20;
  std::vector<float> x(n), y(n), expected(n);
  for (int i = 0; i < n; ++i) {
    x[i] = 0.5f * static_cast<float>(i % 97);
    y[i] = static_cast<float>(i % 13);
    expected[i] = 3.0f * x[i] + y[i];
  }
  float *dx = nullptr, *dy = nullptr;
  CUDA_CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  axpy<<<(n + 255) / 256, 256>>>(n, 3.0f, dx, dy);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(dx));
  CUDA_CHECK(cudaFree(dy));
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], expected[i]) << "element " << i;
}

}  // namespace
