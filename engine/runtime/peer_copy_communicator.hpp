// Point-to-point transfers between ranks whose storages share one device (single-GPU mode: the
// ranks of a run are streams of one GPU) as device-to-device copies, never through the host.
//
// A send copies the span into a staging block of the sender's storage (on the sender's stream,
// so the sender may reuse its span at once, as every send of the engine allows), records a
// fence, and posts the block to the run's PeerExchange; then a one-float token goes through the
// wrapped communicator, so the receive keeps its order, its watchdog and its abort. The receive
// takes the token, makes its own stream wait for the fence, copies the block into its span and
// hands the block back with a fence of its own; the sender reuses returned blocks (waiting for
// that fence on its stream) rather than freeing them, since freeing device memory synchronises
// the device. Collectives go to the wrapped staging communicator. Every rank of the run takes
// part (all are on the one device), so both ends of a transfer always agree on the path.
//
// Host spans are handled too (copied into and out of the staging block), so both ends of a
// transfer need not agree on where their spans live.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/tensor/device_allocator.hpp"

namespace pipetune::runtime {

// What the ranks of one run on one device share (every rank of the run: single-GPU mode): blocks
// in flight from sender to receiver, and blocks on their way back. Thread-safe.
class PeerExchange {
 public:
  struct Parcel {
    const void* block = nullptr;
    std::size_t bytes = 0;
    tensor::DeviceAllocator::Fence ready;  // the sender's copy into the block
    tensor::DeviceAllocator* owner = nullptr;
  };
  struct Returned {
    void* block = nullptr;
    std::size_t bytes = 0;
    tensor::DeviceAllocator::Fence done;  // the receiver's copy out of the block
  };

  void post(int src, int dst, int tag, Parcel parcel);
  // The oldest parcel from src to dst under tag: std::logic_error when there is none (a token
  // arrived without its parcel: never, unless the ranks disagree on the protocol).
  Parcel take(int src, int dst, int tag);
  void give_back(int src, Returned returned);
  std::vector<Returned> reclaim(int src);
  // A rank leaving (its storage is about to go): waits until no receiver is still copying out of
  // its blocks, then returns every block of its still in the exchange (posted and never taken,
  // or given back) for it to free.
  std::vector<Returned> leave(int src);

  // Transfers posted so far, and their bytes (tests, and what the host no longer carries).
  std::size_t parcels_posted() const;
  std::size_t bytes_posted() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::map<std::tuple<int, int, int>, std::deque<Parcel>> in_flight_;  // (src, dst, tag)
  std::unordered_map<int, std::vector<Returned>> returns_;             // by sender
  std::unordered_map<int, int> being_copied_;                          // taken, not given back
  std::size_t parcels_ = 0, bytes_ = 0;
};

class PeerCopyCommunicator final : public comm::Communicator {
 public:
  // `inner` carries the tokens (the rank's own thread communicator); `staged` everything else
  // (the rank's StagingCommunicator over `inner`). All must outlive this communicator.
  PeerCopyCommunicator(comm::Communicator& inner, comm::Communicator& staged,
                       tensor::DeviceAllocator& storage, PeerExchange& exchange);
  ~PeerCopyCommunicator() override;
  PeerCopyCommunicator(const PeerCopyCommunicator&) = delete;
  PeerCopyCommunicator& operator=(const PeerCopyCommunicator&) = delete;

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  void send(int dst, int tag, std::span<const float> data) override;
  void recv(int src, int tag, std::span<float> data) override;
  void all_reduce(const comm::ProcessGroup& group, std::span<float> data,
                  comm::ReduceOp op) override {
    staged_->all_reduce(group, data, op);
  }
  void reduce_scatter(const comm::ProcessGroup& group, std::span<const float> input,
                      std::span<float> output, comm::ReduceOp op) override {
    staged_->reduce_scatter(group, input, output, op);
  }
  void all_gather(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override {
    staged_->all_gather(group, input, output);
  }
  void all_to_all(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override {
    staged_->all_to_all(group, input, output);
  }
  void all_to_all_v(const comm::ProcessGroup& group, std::span<const float> input,
                    std::span<const std::size_t> send_counts, std::span<float> output,
                    std::span<const std::size_t> recv_counts) override {
    staged_->all_to_all_v(group, input, send_counts, output, recv_counts);
  }
  void broadcast(const comm::ProcessGroup& group, std::span<float> data, int root) override {
    staged_->broadcast(group, data, root);
  }
  void barrier(const comm::ProcessGroup& group) override { staged_->barrier(group); }
  void throw_if_aborted() const override { inner_->throw_if_aborted(); }
  void note_progress(std::int64_t step, std::string_view op, int microbatch) override {
    inner_->note_progress(step, op, microbatch);
  }

  // Bytes moved device to device so far (tests).
  std::size_t bytes_copied() const { return copied_; }
  std::size_t staging_blocks() const { return blocks_; }

 private:
  bool on_device(const void* p) const { return storage_->owns(p); }
  void* staging_block(std::size_t bytes);

  comm::Communicator* inner_;
  comm::Communicator* staged_;
  tensor::DeviceAllocator* storage_;
  PeerExchange* exchange_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;  // reusable blocks by size
  std::size_t copied_ = 0, blocks_ = 0;
};

}  // namespace pipetune::runtime
