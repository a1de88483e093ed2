#include "engine/cuda/cuda_rank_device.hpp"

namespace pipetune::cuda {

CudaRankDevice::CudaRankDevice(comm::Communicator& comm, const SingleGpuOptions& options)
    : backend_(CudaBackend::Options{options.precision, options.device}),
      storage_(options.device, backend_.stream()),
      comm_(comm, storage_) {}

CudaRankDevice::~CudaRankDevice() {
  try {
    backend_.synchronize();  // nothing of this rank still runs when its storage goes
  } catch (...) {            // a failed device: the run already reports its error
  }
}

runtime::RankDeviceFactory single_gpu_rank_devices(SingleGpuOptions options) {
  return [options](comm::Communicator& comm,
                   int /*threads_per_rank*/) -> std::unique_ptr<runtime::RankDevice> {
    return std::make_unique<CudaRankDevice>(comm, options);
  };
}

}  // namespace pipetune::cuda
