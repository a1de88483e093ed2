#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cublaslt_library.hpp"

#include <string_view>

namespace pipetune::cuda::detail {

namespace {

std::string where(const char* file, int line) {
  std::string_view f(file);
  const auto slash = f.rfind('/');
  if (slash != std::string_view::npos) f.remove_prefix(slash + 1);
  return " [" + std::string(f) + ":" + std::to_string(line) + "]";
}

}  // namespace

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  cudaGetLastError();  // a non-sticky error is cleared so the next call does not report it again
  throw CudaError(std::string(call) + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) +
                  ")" + where(file, line));
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + ": " + cublaslt().GetStatusString(s) + " (" +
                  cublaslt().GetStatusName(s) + ")" + where(file, line));
}

}  // namespace pipetune::cuda::detail
