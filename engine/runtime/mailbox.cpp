#include "engine/runtime/mailbox.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

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
    model::Buffer msg;
    model::assign_copy(
        msg, tensor::ConstTensorView{data.data(),
                                     tensor::Shape{static_cast<std::int64_t>(data.size())}});
    local_[tag].push_back(std::move(msg));
    return;
  }
  profiler::ScopedSpan span(recorder_, profiler::SpanKind::Send, profiler::Stream::P2P, microbatch,
                            -1, dst);
  comm_->send(dst, tag, data);
}

namespace {

// Moves the oldest message of a FIFO into `data` (both in the rank's storage); the FIFO's entry
// goes when empty.
template <typename Map, typename Key>
bool pop_into(Map& fifo, const Key& key, std::span<float> data) {
  auto it = fifo.find(key);
  if (it == fifo.end() || it->second.empty()) return false;
  model::Buffer& msg = it->second.front();
  if (msg.size() != data.size())
    throw std::logic_error("runtime: message size " + std::to_string(msg.size()) + " != expected " +
                           std::to_string(data.size()));
  const tensor::Shape shape{static_cast<std::int64_t>(msg.size())};
  model::copy_values(model::view(std::as_const(msg), shape), {data.data(), shape});
  it->second.erase(it->second.begin());
  if (it->second.empty()) fifo.erase(it);
  return true;
}

}  // namespace

void Mailbox::receive_ahead(int src, MessageKind kind, int group, int microbatch,
                            std::size_t count) {
  if (src == comm_->rank()) return;
  const int tag = message_tag(kind, group, microbatch);
  model::Buffer msg;
  model::sized(msg, tensor::Shape{static_cast<std::int64_t>(count)});
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
