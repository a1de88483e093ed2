#include "engine/cuda/cuda_rank_device.hpp"

#include <utility>

#include "engine/cuda/cuda_check.hpp"

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
  PIPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&pair_fork_, cudaEventDisableTiming));
  try {
    PIPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&pair_join_, cudaEventDisableTiming));
  } catch (...) {
    cudaEventDestroy(pair_fork_);
    throw;
  }
}

CudaRankDevice::~CudaRankDevice() {
  try {
    // Nothing of this rank still runs when its storage goes (a pair left open by a failure too).
    if (backend_.on_second_stream()) end_pair();
    backend_.synchronize();
  } catch (...) {  // a failed device: the run already reports its error
  }
  cudaEventDestroy(pair_fork_);
  cudaEventDestroy(pair_join_);
  if (joined_) activity_->leave(comm_.rank());
}

void CudaRankDevice::begin_pair() {
  PIPETUNE_CUDA_CHECK(cudaEventRecord(pair_fork_, backend_.first_stream()));
}

void CudaRankDevice::second_of_pair() {
  backend_.use_second_stream(true);
  storage_.set_stream(backend_.stream());
  PIPETUNE_CUDA_CHECK(cudaStreamWaitEvent(backend_.stream(), pair_fork_, 0));
}

void CudaRankDevice::end_pair() {
  if (!backend_.on_second_stream()) return;  // the pair ran on one stream
  PIPETUNE_CUDA_CHECK(cudaEventRecord(pair_join_, backend_.stream()));
  backend_.use_second_stream(false);
  storage_.set_stream(backend_.stream());
  PIPETUNE_CUDA_CHECK(cudaStreamWaitEvent(backend_.stream(), pair_join_, 0));
}

bool CudaRankDevice::start_gpu_capture(std::chrono::steady_clock::time_point epoch) {
  if (activity_) backend_.synchronize();  // the set-up done: the hub leaves it out (see join)
  joined_ = activity_ &&
            activity_->join(comm_.rank(), backend_.stream(), epoch, backend_.second_stream());
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
