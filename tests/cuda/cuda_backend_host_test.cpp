// The CUDA backend's host side without a GPU: the checked-call macros name the call, the
// library's error and the file and line, and constructing the backend on a machine without a
// usable device fails with a CudaError in the runtime's words (never an exit()).
#include <gtest/gtest.h>

#include <string>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_devices.hpp"

namespace pipetune::cuda {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CudaCheck, RuntimeErrorNamesTheCallTheErrorAndTheLine) {
  try {
    PIPETUNE_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "cudaErrorInvalidValue")) << what;
    EXPECT_TRUE(contains(what, "[cuda_backend_host_test.cpp:")) << what;
  }
  EXPECT_NO_THROW(PIPETUNE_CUDA_CHECK(cudaSuccess));
}

TEST(CudaCheck, CublasErrorNamesTheStatus) {
  try {
    PIPETUNE_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
    FAIL() << "no throw";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "CUBLAS_STATUS_NOT_SUPPORTED")) << what;
    EXPECT_TRUE(contains(what, "cuda_backend_host_test.cpp:")) << what;
  }
  EXPECT_NO_THROW(PIPETUNE_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
}

TEST(CudaBackendHost, WithoutADeviceConstructionThrowsCudaErrorInTheRuntimesWords) {
  const DeviceQuery q = query_devices();
  if (!q.devices.empty()) GTEST_SKIP() << "a CUDA device is usable here: tests/gpu covers it";
  try {
    CudaBackend backend;
    FAIL() << "constructed a CUDA backend without a device";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "cudaGetDeviceCount")) << what;
    EXPECT_TRUE(contains(what, "cuda_backend.cpp:")) << what;
  }
}

}  // namespace
}  // namespace pipetune::cuda
