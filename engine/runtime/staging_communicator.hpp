// A communicator that hands the wrapped communicator spans of one kind of memory only, staging
// the others through copies of the rank's device storage:
//  - Side::host (threads, MPI: they read spans with the CPU): spans in the rank's device
//    storage (DeviceAllocator::owns) are copied to the host, exchanged, and copied back; host
//    spans (the step's loss totals) pass straight through. Every device transfer then costs a
//    device-to-host and a host-to-device copy; single-GPU mode's pipeline transfers avoid it
//    (peer_copy_communicator.hpp).
//  - Side::device (NCCL: it reads device memory only): host spans are copied into a block of
//    the rank's device storage and back; device spans pass straight through.
// Staging buffers grow to the largest span seen and are reused.
#pragma once

#include <cstddef>

#include "engine/comm/forwarding_communicator.hpp"
#include "engine/tensor/device_allocator.hpp"

namespace pipetune::runtime {

class StagingCommunicator final : public comm::ForwardingCommunicator {
 public:
  enum class Side { host, device };  // the memory the wrapped communicator takes

  // Both must outlive this communicator.
  StagingCommunicator(comm::Communicator& inner, tensor::DeviceAllocator& storage,
                      Side inner_side = Side::host)
      : ForwardingCommunicator(inner), storage_(&storage), side_(inner_side) {}
  ~StagingCommunicator() override;
  StagingCommunicator(const StagingCommunicator&) = delete;
  StagingCommunicator& operator=(const StagingCommunicator&) = delete;

  // Every call that carries spans; the rest is forwarded as it is.
  void send(int dst, int tag, std::span<const float> data) override;
  void recv(int src, int tag, std::span<float> data) override;
  void all_reduce(const comm::ProcessGroup& group, std::span<float> data,
                  comm::ReduceOp op) override;
  void reduce_scatter(const comm::ProcessGroup& group, std::span<const float> input,
                      std::span<float> output, comm::ReduceOp op) override;
  void reduce_scatter_v(const comm::ProcessGroup& group, std::span<const float> input,
                        std::span<const std::size_t> counts, std::span<float> output,
                        comm::ReduceOp op) override;
  void all_gather(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all_v(const comm::ProcessGroup& group, std::span<const float> input,
                    std::span<const std::size_t> send_counts, std::span<float> output,
                    std::span<const std::size_t> recv_counts) override;
  void broadcast(const comm::ProcessGroup& group, std::span<float> data, int root) override;

  // Bytes copied each way so far (tests, and the cost of staging).
  std::size_t bytes_to_host() const { return to_host_; }
  std::size_t bytes_to_device() const { return to_device_; }

 private:
  struct Stage {  // a grow-only block on the wrapped communicator's side
    float* data = nullptr;
    std::size_t count = 0;
  };
  // Whether `s` is memory the wrapped communicator cannot take.
  bool foreign(std::span<const float> s) const {
    return !s.empty() && storage_->owns(s.data()) == (side_ == Side::host);
  }
  tensor::DeviceAllocator& stage_storage() const;
  float* reserve(Stage& stage, std::size_t count);
  // The wrapped communicator's side of `data`: itself, or a copy in `stage`.
  std::span<const float> input(std::span<const float> data, Stage& stage);
  // Where the wrapped communicator writes `data`: itself, or `stage` (sized, not filled).
  std::span<float> output(std::span<float> data, Stage& stage);
  // Copies `stage` back into `data` when `data` was staged.
  void finish(std::span<float> data, const Stage& stage);

  tensor::DeviceAllocator* storage_;
  Side side_;
  Stage in_, out_;
  std::size_t to_host_ = 0, to_device_ = 0;
};

}  // namespace pipetune::runtime
