#include "engine/runtime/mailbox.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

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
    local_[tag].emplace_back(data.begin(), data.end());
    return;
  }
  profiler::ScopedSpan span(recorder_, profiler::SpanKind::Send, profiler::Stream::P2P, microbatch,
                            -1, dst);
  comm_->send(dst, tag, data);
}

void Mailbox::take(int src, MessageKind kind, int group, int microbatch, std::span<float> data) {
  const int tag = message_tag(kind, group, microbatch);
  if (src != comm_->rank()) {
    profiler::ScopedSpan span(recorder_, profiler::SpanKind::Recv, profiler::Stream::P2P,
                              microbatch, -1, src, recv_name_);
    comm_->recv(src, tag, data);
    return;
  }
  auto it = local_.find(tag);
  if (it == local_.end() || it->second.empty())
    throw std::logic_error("runtime: no local message of kind " +
                           std::to_string(static_cast<int>(kind)) + " for group " +
                           std::to_string(group) + " micro-batch " + std::to_string(microbatch));
  std::vector<float>& msg = it->second.front();
  if (msg.size() != data.size())
    throw std::logic_error("runtime: local message size " + std::to_string(msg.size()) +
                           " != expected " + std::to_string(data.size()));
  std::copy(msg.begin(), msg.end(), data.begin());
  it->second.erase(it->second.begin());
  if (it->second.empty()) local_.erase(it);
}

}  // namespace pipetune::runtime
