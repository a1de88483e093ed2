// A communicator for ranks whose tensors live in device storage: spans that point into the
// rank's device allocator (DeviceAllocator::owns) are copied to the host, exchanged through the
// wrapped communicator (threads, MPI) and copied back; host spans (the step's loss totals, the
// mailbox's messages received ahead) pass straight through. Correct first: every device transfer
// costs a device-to-host and a host-to-device copy. A direct device-to-device path (copies on the
// sender's stream and an event the receiver waits on, or NCCL) can replace it behind the same
// interface.
#pragma once

#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/tensor/device_allocator.hpp"

namespace pipetune::runtime {

class StagingCommunicator final : public comm::Communicator {
 public:
  // Both must outlive this communicator.
  StagingCommunicator(comm::Communicator& inner, tensor::DeviceAllocator& storage)
      : inner_(&inner), storage_(&storage) {}

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  void send(int dst, int tag, std::span<const float> data) override;
  void recv(int src, int tag, std::span<float> data) override;
  void all_reduce(const comm::ProcessGroup& group, std::span<float> data,
                  comm::ReduceOp op) override;
  void reduce_scatter(const comm::ProcessGroup& group, std::span<const float> input,
                      std::span<float> output, comm::ReduceOp op) override;
  void all_gather(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all_v(const comm::ProcessGroup& group, std::span<const float> input,
                    std::span<const std::size_t> send_counts, std::span<float> output,
                    std::span<const std::size_t> recv_counts) override;
  void broadcast(const comm::ProcessGroup& group, std::span<float> data, int root) override;
  void barrier(const comm::ProcessGroup& group) override { inner_->barrier(group); }
  void throw_if_aborted() const override { inner_->throw_if_aborted(); }
  void note_progress(std::int64_t step, std::string_view op, int microbatch) override {
    inner_->note_progress(step, op, microbatch);
  }

  // Bytes copied each way so far (tests, and the cost of staging).
  std::size_t bytes_to_host() const { return to_host_; }
  std::size_t bytes_to_device() const { return to_device_; }

 private:
  bool on_device(std::span<const float> s) const { return !s.empty() && storage_->owns(s.data()); }
  // The host side of `data`: itself when it is host memory, else a copy in `stage`.
  std::span<const float> input(std::span<const float> data, std::vector<float>& stage);
  // Where the wrapped communicator writes `data`: itself, or `stage` (sized, not filled).
  std::span<float> output(std::span<float> data, std::vector<float>& stage);
  // Copies `stage` back to `data` when `data` is device memory.
  void finish(std::span<float> data, const std::vector<float>& stage);

  comm::Communicator* inner_;
  tensor::DeviceAllocator* storage_;
  std::vector<float> in_, out_;  // host staging, reused
  std::size_t to_host_ = 0, to_device_ = 0;
};

}  // namespace pipetune::runtime
