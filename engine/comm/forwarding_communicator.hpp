// A communicator that wraps another and forwards every call to it: the base of the communicators
// that change some calls and keep the others (staging_communicator.hpp stages spans between host
// and device, peer_copy_communicator.hpp copies device to device on one GPU, tests wrap one to
// check what reaches it). A derived class overrides only what it changes and reaches the wrapped
// communicator through inner(); what it does not override keeps every promise of
// communicator.hpp because the wrapped communicator does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "engine/comm/communicator.hpp"

namespace pipetune::comm {

class ForwardingCommunicator : public Communicator {
 public:
  // `inner` must outlive this communicator.
  explicit ForwardingCommunicator(Communicator& inner) : inner_(&inner) {}

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  void send(int dst, int tag, std::span<const float> data) override {
    inner_->send(dst, tag, data);
  }
  void recv(int src, int tag, std::span<float> data) override { inner_->recv(src, tag, data); }
  void all_reduce(const ProcessGroup& group, std::span<float> data,
                  ReduceOp op = ReduceOp::sum) override {
    inner_->all_reduce(group, data, op);
  }
  void reduce_scatter(const ProcessGroup& group, std::span<const float> input,
                      std::span<float> output, ReduceOp op = ReduceOp::sum) override {
    inner_->reduce_scatter(group, input, output, op);
  }
  void reduce_scatter_v(const ProcessGroup& group, std::span<const float> input,
                        std::span<const std::size_t> counts, std::span<float> output,
                        ReduceOp op = ReduceOp::sum) override {
    inner_->reduce_scatter_v(group, input, counts, output, op);
  }
  void all_gather(const ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override {
    inner_->all_gather(group, input, output);
  }
  void all_to_all(const ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override {
    inner_->all_to_all(group, input, output);
  }
  void all_to_all_v(const ProcessGroup& group, std::span<const float> input,
                    std::span<const std::size_t> send_counts, std::span<float> output,
                    std::span<const std::size_t> recv_counts) override {
    inner_->all_to_all_v(group, input, send_counts, output, recv_counts);
  }
  void broadcast(const ProcessGroup& group, std::span<float> data, int root) override {
    inner_->broadcast(group, data, root);
  }
  void barrier(const ProcessGroup& group) override { inner_->barrier(group); }
  void throw_if_aborted() const override { inner_->throw_if_aborted(); }
  void note_progress(std::int64_t step, std::string_view op, int microbatch) override {
    inner_->note_progress(step, op, microbatch);
  }

 protected:
  Communicator& inner() const { return *inner_; }

 private:
  Communicator* inner_;
};

}  // namespace pipetune::comm
