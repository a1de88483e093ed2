#include "engine/runtime/staging_communicator.hpp"

namespace pipetune::runtime {

StagingCommunicator::~StagingCommunicator() {
  for (Stage* s : {&in_, &out_})
    if (s->data != nullptr) stage_storage().deallocate(s->data, s->count * sizeof(float));
}

tensor::DeviceAllocator& StagingCommunicator::stage_storage() const {
  return side_ == Side::host ? tensor::host_allocator() : *storage_;
}

float* StagingCommunicator::reserve(Stage& stage, std::size_t count) {
  if (count > stage.count) {
    tensor::DeviceAllocator& where = stage_storage();
    if (stage.data != nullptr) where.deallocate(stage.data, stage.count * sizeof(float));
    stage = {};
    stage.data = static_cast<float*>(
        where.allocate(count * sizeof(float), tensor::DeviceAllocator::Category::Temporaries));
    stage.count = count;
  }
  return stage.data;
}

std::span<const float> StagingCommunicator::input(std::span<const float> data, Stage& stage) {
  if (!foreign(data)) return data;
  float* staged = reserve(stage, data.size());
  if (side_ == Side::host) {
    storage_->copy_to_host(staged, data.data(), data.size_bytes());
    to_host_ += data.size_bytes();
  } else {
    storage_->copy_from_host(staged, data.data(), data.size_bytes());
    to_device_ += data.size_bytes();
  }
  return {staged, data.size()};
}

std::span<float> StagingCommunicator::output(std::span<float> data, Stage& stage) {
  if (!foreign(data)) return data;
  return {reserve(stage, data.size()), data.size()};
}

void StagingCommunicator::finish(std::span<float> data, const Stage& stage) {
  if (!foreign(data)) return;
  if (side_ == Side::host) {
    storage_->copy_from_host(data.data(), stage.data, data.size_bytes());
    to_device_ += data.size_bytes();
  } else {
    storage_->copy_to_host(data.data(), stage.data, data.size_bytes());
    to_host_ += data.size_bytes();
  }
}

void StagingCommunicator::send(int dst, int tag, std::span<const float> data) {
  inner().send(dst, tag, input(data, in_));
}

void StagingCommunicator::recv(int src, int tag, std::span<float> data) {
  inner().recv(src, tag, output(data, out_));
  finish(data, out_);
}

void StagingCommunicator::all_reduce(const comm::ProcessGroup& group, std::span<float> data,
                                     comm::ReduceOp op) {
  if (!foreign(data)) return inner().all_reduce(group, data, op);
  input(data, out_);  // in place: into the output stage
  inner().all_reduce(group, {out_.data, data.size()}, op);
  finish(data, out_);
}

void StagingCommunicator::reduce_scatter(const comm::ProcessGroup& group,
                                         std::span<const float> input_data,
                                         std::span<float> output_data, comm::ReduceOp op) {
  const std::span<const float> in = input(input_data, in_);
  inner().reduce_scatter(group, in, output(output_data, out_), op);
  finish(output_data, out_);
}

void StagingCommunicator::reduce_scatter_v(const comm::ProcessGroup& group,
                                           std::span<const float> input_data,
                                           std::span<const std::size_t> counts,
                                           std::span<float> output_data, comm::ReduceOp op) {
  const std::span<const float> in = input(input_data, in_);
  inner().reduce_scatter_v(group, in, counts, output(output_data, out_), op);
  finish(output_data, out_);
}

void StagingCommunicator::all_gather(const comm::ProcessGroup& group,
                                     std::span<const float> input_data,
                                     std::span<float> output_data) {
  const std::span<const float> in = input(input_data, in_);
  inner().all_gather(group, in, output(output_data, out_));
  finish(output_data, out_);
}

void StagingCommunicator::all_to_all(const comm::ProcessGroup& group,
                                     std::span<const float> input_data,
                                     std::span<float> output_data) {
  const std::span<const float> in = input(input_data, in_);
  inner().all_to_all(group, in, output(output_data, out_));
  finish(output_data, out_);
}

void StagingCommunicator::all_to_all_v(const comm::ProcessGroup& group,
                                       std::span<const float> input_data,
                                       std::span<const std::size_t> send_counts,
                                       std::span<float> output_data,
                                       std::span<const std::size_t> recv_counts) {
  const std::span<const float> in = input(input_data, in_);
  inner().all_to_all_v(group, in, send_counts, output(output_data, out_), recv_counts);
  finish(output_data, out_);
}

void StagingCommunicator::broadcast(const comm::ProcessGroup& group, std::span<float> data,
                                    int root) {
  if (!foreign(data)) return inner().broadcast(group, data, root);
  input(data, out_);
  inner().broadcast(group, {out_.data, data.size()}, root);
  finish(data, out_);
}

}  // namespace pipetune::runtime
