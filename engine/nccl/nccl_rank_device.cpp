#include "engine/nccl/nccl_rank_device.hpp"

#include <stdexcept>
#include <string>

namespace pipetune::nccl {

NcclRankDevice::NcclRankDevice(const NcclRankOptions& options)
    : device_(process_device()),
      backend_(cuda::CudaBackend::Options{options.precision, device_, options.flash,
                                          options.bf16_operands, options.gelu_epilogues}),
      storage_(device_, backend_.stream()) {
  NcclOptions o;
  o.device = device_;
  o.compute_stream = backend_.stream();  // each NCCL call waits for the rank's kernels first
  o.timeout_seconds = options.watchdog_seconds;
  o.failure_notice = options.failure_notice;
  nccl_.emplace(options.groups, o);
  spans_.emplace(*nccl_, storage_, runtime::StagingCommunicator::Side::device);
}

NcclRankDevice::~NcclRankDevice() {
  try {
    backend_.synchronize();  // nothing of this rank still runs when its storage goes
  } catch (...) {            // a failed device: the run already reports its error
  }
  if (joined_) activity_.leave(nccl_->rank());
  spans_.reset();  // its blocks go back to storage_ before it does
}

bool NcclRankDevice::start_gpu_capture(std::chrono::steady_clock::time_point epoch) {
  joined_ = activity_.join(nccl_->rank(), backend_.stream(), epoch);
  return joined_;
}

runtime::RankDevice::GpuActivity NcclRankDevice::take_gpu_activity() {
  if (!joined_) return {};
  backend_.synchronize();  // the rank's records of the step are complete (NCCL's calls block)
  return activity_.take(nccl_->rank());
}

runtime::RankDeviceFactory nccl_rank_devices(NcclRankOptions options) {
  return [options = std::move(options)](
             comm::Communicator& comm,
             int /*threads_per_rank*/) -> std::unique_ptr<runtime::RankDevice> {
    auto device = std::make_unique<NcclRankDevice>(options);
    if (device->communicator().rank() != comm.rank())
      throw std::logic_error("NCCL rank " + std::to_string(device->communicator().rank()) +
                             " made for the trainer's rank " + std::to_string(comm.rank()) +
                             ": ranks as processes on GPUs run one rank per process");
    return device;
  };
}

}  // namespace pipetune::nccl
