#include "engine/runtime/device_span_communicator.hpp"

namespace pipetune::runtime {

DeviceSpanCommunicator::~DeviceSpanCommunicator() {
  for (Block* b : {&in_, &out_})
    if (b->data != nullptr) storage_->deallocate(b->data, b->count * sizeof(float));
}

float* DeviceSpanCommunicator::reserve(Block& block, std::size_t count) {
  if (count > block.count) {
    if (block.data != nullptr) storage_->deallocate(block.data, block.count * sizeof(float));
    block.data = nullptr;
    block.data = static_cast<float*>(
        storage_->allocate(count * sizeof(float), tensor::DeviceAllocator::Category::Temporaries));
    block.count = count;
  }
  return block.data;
}

std::span<const float> DeviceSpanCommunicator::input(std::span<const float> data, Block& block) {
  if (on_device(data)) return data;
  float* d = reserve(block, data.size());
  storage_->copy_from_host(d, data.data(), data.size_bytes());
  to_device_ += data.size_bytes();
  return {d, data.size()};
}

std::span<float> DeviceSpanCommunicator::output(std::span<float> data, Block& block) {
  if (on_device(data)) return data;
  return {reserve(block, data.size()), data.size()};
}

void DeviceSpanCommunicator::finish(std::span<float> data, const Block& block) {
  if (on_device(data)) return;
  storage_->copy_to_host(data.data(), block.data, data.size_bytes());
  to_host_ += data.size_bytes();
}

void DeviceSpanCommunicator::send(int dst, int tag, std::span<const float> data) {
  inner_->send(dst, tag, input(data, in_));
}

void DeviceSpanCommunicator::recv(int src, int tag, std::span<float> data) {
  inner_->recv(src, tag, output(data, out_));
  finish(data, out_);
}

void DeviceSpanCommunicator::all_reduce(const comm::ProcessGroup& group, std::span<float> data,
                                        comm::ReduceOp op) {
  if (on_device(data)) return inner_->all_reduce(group, data, op);
  const std::span<const float> staged = input(data, out_);  // in place: up into the output block
  inner_->all_reduce(group, {out_.data, staged.size()}, op);
  finish(data, out_);
}

void DeviceSpanCommunicator::reduce_scatter(const comm::ProcessGroup& group,
                                            std::span<const float> input_data,
                                            std::span<float> output_data, comm::ReduceOp op) {
  const std::span<const float> in = input(input_data, in_);
  inner_->reduce_scatter(group, in, output(output_data, out_), op);
  finish(output_data, out_);
}

void DeviceSpanCommunicator::all_gather(const comm::ProcessGroup& group,
                                        std::span<const float> input_data,
                                        std::span<float> output_data) {
  const std::span<const float> in = input(input_data, in_);
  inner_->all_gather(group, in, output(output_data, out_));
  finish(output_data, out_);
}

void DeviceSpanCommunicator::all_to_all(const comm::ProcessGroup& group,
                                        std::span<const float> input_data,
                                        std::span<float> output_data) {
  const std::span<const float> in = input(input_data, in_);
  inner_->all_to_all(group, in, output(output_data, out_));
  finish(output_data, out_);
}

void DeviceSpanCommunicator::all_to_all_v(const comm::ProcessGroup& group,
                                          std::span<const float> input_data,
                                          std::span<const std::size_t> send_counts,
                                          std::span<float> output_data,
                                          std::span<const std::size_t> recv_counts) {
  const std::span<const float> in = input(input_data, in_);
  inner_->all_to_all_v(group, in, send_counts, output(output_data, out_), recv_counts);
  finish(output_data, out_);
}

void DeviceSpanCommunicator::broadcast(const comm::ProcessGroup& group, std::span<float> data,
                                       int root) {
  if (on_device(data)) return inner_->broadcast(group, data, root);
  input(data, out_);
  inner_->broadcast(group, {out_.data, data.size()}, root);
  finish(data, out_);
}

}  // namespace pipetune::runtime
