// Point-to-point transfers between ranks whose storages share one device (single-GPU mode: the
// ranks of a run are streams of one GPU) as device-to-device copies, never through the host.
//
// A send copies the span into a staging block of the sender's storage (on the sender's stream,
// so the sender may reuse its span at once, as every send of the engine allows), records a
// fence, and posts the block to the run's PeerExchange; then a one-float token goes through the
// rank's own (thread) communicator, so the receive keeps its order, its watchdog and its abort.
// The receive takes the token, makes its own stream wait for the fence, copies the block into its
// span and hands the block back with a fence of its own; the sender reuses returned blocks
// (waiting for that fence on its stream) rather than freeing them, since freeing device memory
// synchronises the device. Every rank of the run takes part (all are on the one device), so both
// ends of a transfer always agree on the path. Host spans are handled too (copied into and out of
// the staging block), so both ends of a transfer need not agree on where their spans live.
//
// Collectives over device spans (all-reduce, reduce-scatter, all-gather, broadcast, all-to-all
// with equal or variable parts) run device to device too (peer_copy_collectives.cpp): each member
// copies its input into a staging block and posts it under the collective's key; after a barrier of
// the rank's own communicator (which keeps its watchdog, abort and mismatch checks) each member
// reads the blocks it needs on its own stream: copies, and for reductions
// DeviceAllocator::combine_from_peer folding the blocks in group-rank order, ((x0 + x1) + x2) +
// ..., the thread communicator's order, so the results are bit for bit the same. A block returns to
// its member once every reader released it (with the fences of their reads), and a second barrier
// ends the collective, so no member goes on (or frees its storage) while another still issues reads
// of its block. Host-side waits only: the device work stays asynchronous, ordered by the fences.
// Large all-reduces go in pieces of kCollectivePiece floats, bounding the staging memory.
// Collectives over host spans (the step's loss totals) go to the wrapped staging communicator;
// every member passes spans of the same kind, so all take the same path.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/comm/forwarding_communicator.hpp"
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
    // A collective's block of consecutive parts (all-to-all): the floats for each group rank.
    std::vector<std::size_t> parts = {};
  };
  struct Returned {
    void* block = nullptr;
    std::size_t bytes = 0;
    std::vector<tensor::DeviceAllocator::Fence> done;  // the readers' copies out of the block
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

  // Collectives: blocks several members read. `key` names one collective of one group (its
  // name, members and sequence number); the member at group rank `index` posts its block, each
  // of `readers` members takes it and releases it with the fence of its reads, and the last
  // release hands it back to `src` with every reader's fence.
  void post_shared(const std::string& key, int index, int src, Parcel parcel, int readers);
  // comm::RankFailure naming the owner when it left the exchange (failed) before this member
  // read its block; logic_error when never posted (a member passed the barrier without posting:
  // never, unless the members disagree on the protocol).
  Parcel take_shared(const std::string& key, int index);
  void release_shared(const std::string& key, int index, tensor::DeviceAllocator::Fence done);

  // Transfers posted so far, and their bytes (tests, and what the host no longer carries);
  // collective blocks apart.
  std::size_t parcels_posted() const;
  std::size_t bytes_posted() const;
  std::size_t shared_posted() const;
  std::size_t shared_bytes_posted() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::map<std::tuple<int, int, int>, std::deque<Parcel>> in_flight_;  // (src, dst, tag)
  std::unordered_map<int, std::vector<Returned>> returns_;             // by sender
  std::unordered_map<int, int> being_copied_;                          // taken, not given back
  struct Shared {
    Parcel parcel;
    int src = 0;
    int readers_left = 0;
    std::vector<tensor::DeviceAllocator::Fence> done;
  };
  std::map<std::pair<std::string, int>, Shared> shared_;  // (key, group rank)
  // Collective blocks whose owner left before every member read them: (key, group rank) -> owner.
  std::map<std::pair<std::string, int>, int> abandoned_;
  std::size_t parcels_ = 0, bytes_ = 0, shared_parcels_ = 0, shared_bytes_ = 0;
};

class PeerCopyCommunicator final : public comm::ForwardingCommunicator {
 public:
  // `direct` carries the tokens and the device collectives' barriers (the rank's own thread
  // communicator); `staged`, the wrapped communicator, everything else (the rank's
  // StagingCommunicator over `direct`). All must outlive this communicator.
  // `collective_piece`: the largest all-reduce round, in floats (kCollectivePiece; tests pass
  // less).
  PeerCopyCommunicator(comm::Communicator& direct, comm::Communicator& staged,
                       tensor::DeviceAllocator& storage, PeerExchange& exchange,
                       std::size_t collective_piece = kCollectivePiece);
  ~PeerCopyCommunicator() override;
  PeerCopyCommunicator(const PeerCopyCommunicator&) = delete;
  PeerCopyCommunicator& operator=(const PeerCopyCommunicator&) = delete;

  // Every call that carries spans; the rest goes to the staging communicator as it is.
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

  // Bytes moved device to device so far (tests); collectives run device to device.
  std::size_t bytes_copied() const { return copied_; }
  std::size_t staging_blocks() const { return blocks_; }
  std::size_t device_collectives() const { return collectives_; }

  // The largest all-reduce piece, in floats (64 MiB): bigger spans go in several rounds.
  static constexpr std::size_t kCollectivePiece = std::size_t{1} << 24;

 private:
  bool on_device(const void* p) const { return storage_->owns(p); }
  // An empty span has no storage to tell: it goes the way its storage's other spans go.
  bool on_device_or_empty(std::span<const float> s) const {
    return s.empty() ? storage_->on_device() : on_device(s.data());
  }
  void* staging_block(std::size_t bytes);
  void recycle(void* block, std::size_t bytes) { free_[bytes].push_back({block, {}}); }
  // The key of this member's next collective on `group` (same on every member: each calls the
  // group's collectives in the same order).
  std::string next_key(const comm::ProcessGroup& group);
  // Copies `data` into a staging block posted under `key` for `readers` members (`parts`: how
  // many of its floats go to each group rank, for all-to-all).
  void post_input(const std::string& key, int index, std::span<const float> data, int readers,
                  std::vector<std::size_t> parts = {});
  // All-to-all of device spans: part `me` of every member's block into `output`, in group order.
  void exchange_parts(const comm::ProcessGroup& group, std::span<const float> input,
                      std::vector<std::size_t> send, std::span<float> output,
                      std::span<const std::size_t> recv);
  void all_reduce_piece(const comm::ProcessGroup& group, std::span<float> data, comm::ReduceOp op);
  // Ends a collective once every member has released every block (a barrier).
  // Both reduce-scatters: output <- the reduction of every member's input at [offset, offset +
  // output size), read from the members' posted blocks in group-rank order.
  void reduce_own_chunk(const comm::ProcessGroup& group, std::span<const float> input,
                        std::size_t offset, std::span<float> output, comm::ReduceOp op);
  void finish(const comm::ProcessGroup& group);

  comm::Communicator* direct_;  // tokens and barriers, never staged
  tensor::DeviceAllocator* storage_;
  PeerExchange* exchange_;
  // Reusable blocks by size, each with its last readers' fences: the copy into a block waits
  // for them when the block is taken (on the stream then current: a rank's ops may run on two).
  struct FreeBlock {
    void* block = nullptr;
    std::vector<tensor::DeviceAllocator::Fence> readers_done;
  };
  std::unordered_map<std::size_t, std::vector<FreeBlock>> free_;
  std::map<std::pair<std::string, std::vector<int>>, std::uint64_t> sequence_;  // per group
  std::size_t piece_;
  std::size_t copied_ = 0, blocks_ = 0, collectives_ = 0;
};

}  // namespace pipetune::runtime
