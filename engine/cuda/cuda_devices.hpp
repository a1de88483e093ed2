// The CUDA devices this process can use, asked of the CUDA runtime. A machine without a GPU or
// without a driver (CI, a laptop) is an answer, not an error: `problem` then says why no device
// is usable, in the runtime's words, so `--backend cuda` can refuse with one line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipetune::cuda {

struct DeviceInfo {
  int id = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  std::int64_t total_bytes = 0;  // device memory
};

struct DeviceQuery {
  std::vector<DeviceInfo> devices;  // usable devices, by id
  // Empty when at least one device is usable; else why not, e.g. "cudaGetDeviceCount: no
  // CUDA-capable device is detected (cudaErrorNoDevice)".
  std::string problem;
  int runtime_version = 0;  // CUDA runtime, 13000 = 13.0
  int driver_version = 0;   // what the driver supports; 0 without a driver
};

DeviceQuery query_devices();

}  // namespace pipetune::cuda
