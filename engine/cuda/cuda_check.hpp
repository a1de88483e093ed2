// Checked calls for the CUDA runtime and cuBLASLt (llm.c's cudaCheck / cublasCheck): a failing
// call throws CudaError naming the call, the library's error name and text, and the file and
// line of the call. Libraries never exit(); the front ends map CudaError to exit code 1 (a
// runtime failure, not an input error).
//
// Included by .cu files too, so this header stays C++17 and host-only.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace pipetune::cuda {

// A CUDA runtime or cuBLASLt call failed (device lost, out of memory, bad launch, ...).
class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file,
                                     int line);

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda_error(e, call, file, line);
}

inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_cublas_error(s, call, file, line);
}

}  // namespace detail

}  // namespace pipetune::cuda

// PIPETUNE_CUDA_CHECK(cudaMalloc(&p, bytes));
#define PIPETUNE_CUDA_CHECK(call) \
  ::pipetune::cuda::detail::check_cuda((call), #call, __FILE__, __LINE__)
// PIPETUNE_CUBLAS_CHECK(cublaslt().Matmul(...));
#define PIPETUNE_CUBLAS_CHECK(call) \
  ::pipetune::cuda::detail::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad configuration (too much shared memory, a zero grid) is reported
// by the launch, named here; errors inside the kernel surface at the next synchronising call.
#define PIPETUNE_CUDA_LAUNCH_CHECK(kernel) \
  ::pipetune::cuda::detail::check_cuda(cudaGetLastError(), "launch " kernel, __FILE__, __LINE__)
