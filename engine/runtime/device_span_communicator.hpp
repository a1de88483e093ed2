// The mirror of StagingCommunicator, for communicators that take device spans only (NCCL: every
// span must be memory of the process's device): spans already in the rank's device storage
// pass straight through; a host span (the step's loss totals, a host-side message) is copied
// into a device block of the storage, handed on, and copied back. Few and small in a training
// step, so two grow-only blocks serve every call.
#pragma once

#include <cstddef>

#include "engine/comm/communicator.hpp"
#include "engine/tensor/device_allocator.hpp"

namespace pipetune::runtime {

class DeviceSpanCommunicator final : public comm::Communicator {
 public:
  // Both must outlive this communicator; `storage` is a device storage.
  DeviceSpanCommunicator(comm::Communicator& inner, tensor::DeviceAllocator& storage)
      : inner_(&inner), storage_(&storage) {}
  ~DeviceSpanCommunicator() override;
  DeviceSpanCommunicator(const DeviceSpanCommunicator&) = delete;
  DeviceSpanCommunicator& operator=(const DeviceSpanCommunicator&) = delete;

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

  // Bytes staged each way so far (tests).
  std::size_t bytes_to_device() const { return to_device_; }
  std::size_t bytes_to_host() const { return to_host_; }

 private:
  struct Block {
    float* data = nullptr;
    std::size_t count = 0;
  };
  bool on_device(std::span<const float> s) const { return s.empty() || storage_->owns(s.data()); }
  float* reserve(Block& block, std::size_t count);
  // The device side of `data`: itself, or a copy in `block`.
  std::span<const float> input(std::span<const float> data, Block& block);
  // Where the wrapped communicator writes `data`: itself, or `block` (sized, not filled).
  std::span<float> output(std::span<float> data, Block& block);
  // Copies `block` back into `data` when `data` is host memory.
  void finish(std::span<float> data, const Block& block);

  comm::Communicator* inner_;
  tensor::DeviceAllocator* storage_;
  Block in_, out_;
  std::size_t to_device_ = 0, to_host_ = 0;
};

}  // namespace pipetune::runtime
