#include "engine/runtime/mailbox.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/model/buffers.hpp"

namespace pipetune::runtime {

Mailbox::Mailbox(comm::Communicator& comm, profiler::RankRecorder* recorder)
    : comm_(&comm), recorder_(recorder) {
  if (recorder_ != nullptr && recorder_->enabled()) recv_name_ = recorder_->intern("recv");
}

int message_tag(MessageKind kind, int group, int microbatch) {
  // kind: 4 bits, group: 11 bits, micro-batch: 16 bits (checked by the trainer's limits).
  return (static_cast<int>(kind) << 27) | (group << 16) | microbatch;
}

void Mailbox::post(int dst, MessageKind kind, int group, int microbatch,
                   std::span<const float> data) {
  const int tag = message_tag(kind, group, microbatch);
  if (dst == comm_->rank()) {
    // Kept on the host; `data` is in the rank's storage (device memory on a GPU rank).
    if (tensor::DeviceAllocator* device = model::device_storage()) {
      std::vector<float> msg(data.size());
      device->copy_to_host(msg.data(), data.data(), data.size() * sizeof(float));
      local_[tag].push_back(std::move(msg));
    } else {
      local_[tag].emplace_back(data.begin(), data.end());
    }
    return;
  }
  profiler::ScopedSpan span(recorder_, profiler::SpanKind::Send, profiler::Stream::P2P, microbatch,
                            -1, dst);
  comm_->send(dst, tag, data);
}

namespace {

// Moves the oldest message of a FIFO (host vectors) into `data` (in the rank's storage); the
// FIFO's entry goes when empty.
template <typename Map, typename Key>
bool pop_into(Map& fifo, const Key& key, std::span<float> data) {
  auto it = fifo.find(key);
  if (it == fifo.end() || it->second.empty()) return false;
  std::vector<float>& msg = it->second.front();
  if (msg.size() != data.size())
    throw std::logic_error("runtime: message size " + std::to_string(msg.size()) + " != expected " +
                           std::to_string(data.size()));
  model::rank_storage().copy_from_host(data.data(), msg.data(), msg.size() * sizeof(float));
  it->second.erase(it->second.begin());
  if (it->second.empty()) fifo.erase(it);
  return true;
}

}  // namespace

void Mailbox::receive_ahead(int src, MessageKind kind, int group, int microbatch,
                            std::size_t count) {
  if (src == comm_->rank()) return;
  const int tag = message_tag(kind, group, microbatch);
  std::vector<float> msg(count);
  {
    profiler::ScopedSpan span(recorder_, profiler::SpanKind::Recv, profiler::Stream::P2P,
                              microbatch, -1, src, recv_name_);
    comm_->recv(src, tag, msg);
  }
  arrived_[{src, tag}].push_back(std::move(msg));
}

void Mailbox::take(int src, MessageKind kind, int group, int microbatch, std::span<float> data) {
  const int tag = message_tag(kind, group, microbatch);
  if (src != comm_->rank()) {
    if (pop_into(arrived_, std::pair{src, tag}, data)) return;
    profiler::ScopedSpan span(recorder_, profiler::SpanKind::Recv, profiler::Stream::P2P,
                              microbatch, -1, src, recv_name_);
    comm_->recv(src, tag, data);
    return;
  }
  if (!pop_into(local_, tag, data))
    throw std::logic_error("runtime: no local message of kind " +
                           std::to_string(static_cast<int>(kind)) + " for group " +
                           std::to_string(group) + " micro-batch " + std::to_string(microbatch));
}

}  // namespace pipetune::runtime
