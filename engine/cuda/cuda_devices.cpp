#include "engine/cuda/cuda_devices.hpp"

#include <cuda_runtime_api.h>

namespace pipetune::cuda {

namespace {

std::string describe(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
}

}  // namespace

DeviceQuery query_devices() {
  DeviceQuery q;
  cudaRuntimeGetVersion(&q.runtime_version);
  if (cudaDriverGetVersion(&q.driver_version) != cudaSuccess) q.driver_version = 0;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    q.problem = describe("cudaGetDeviceCount", e);
    cudaGetLastError();  // the runtime keeps the error sticky for the next call otherwise
    return q;
  }
  for (int id = 0; id < count; ++id) {
    cudaDeviceProp p{};
    const cudaError_t pe = cudaGetDeviceProperties(&p, id);
    if (pe != cudaSuccess) {
      q.problem = describe("cudaGetDeviceProperties", pe);
      continue;
    }
    q.devices.push_back({id, p.name, p.major, p.minor, p.multiProcessorCount,
                         static_cast<std::int64_t>(p.totalGlobalMem)});
  }
  if (!q.devices.empty())
    q.problem.clear();
  else if (q.problem.empty())
    q.problem = "cudaGetDeviceCount found no device";
  return q;
}

}  // namespace pipetune::cuda
