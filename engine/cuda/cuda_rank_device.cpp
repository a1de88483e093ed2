#include "engine/cuda/cuda_rank_device.hpp"

#include <utility>

namespace pipetune::cuda {

CudaRankDevice::CudaRankDevice(comm::Communicator& comm, const SingleGpuOptions& options,
                               std::shared_ptr<GpuActivityHub> activity,
                               runtime::PeerExchange* peers)
    : backend_(CudaBackend::Options{options.precision, options.device, options.flash,
                                    options.bf16_operands, options.gelu_epilogues}),
      storage_(options.device, backend_.stream()),
      comm_(comm, storage_),
      activity_(std::move(activity)) {
  if (peers != nullptr) peers_.emplace(comm, comm_, storage_, *peers);
}

CudaRankDevice::~CudaRankDevice() {
  try {
    backend_.synchronize();  // nothing of this rank still runs when its storage goes
  } catch (...) {            // a failed device: the run already reports its error
  }
  if (joined_) activity_->leave(comm_.rank());
}

bool CudaRankDevice::start_gpu_capture(std::chrono::steady_clock::time_point epoch) {
  joined_ = activity_ && activity_->join(comm_.rank(), backend_.stream(), epoch);
  return joined_;
}

runtime::RankDevice::GpuActivity CudaRankDevice::take_gpu_activity() {
  if (!joined_) return {};
  backend_.synchronize();  // the rank's records of the step are complete
  return activity_->take(comm_.rank());
}

runtime::RankDeviceFactory single_gpu_rank_devices(SingleGpuOptions options) {
  auto activity = std::make_shared<GpuActivityHub>();
  auto peers = std::make_shared<runtime::PeerExchange>();
  return
      [options, activity, peers](comm::Communicator& comm,
                                 int /*threads_per_rank*/) -> std::unique_ptr<runtime::RankDevice> {
        return std::make_unique<CudaRankDevice>(comm, options, activity, peers.get());
      };
}

}  // namespace pipetune::cuda
