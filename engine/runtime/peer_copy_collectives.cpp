// PeerCopyCommunicator's collectives over device spans: device to device between the storages of
// ranks that share one device (peer_copy_communicator.hpp says the protocol).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/collective_checks.hpp"
#include "engine/comm/comm_errors.hpp"
#include "engine/runtime/peer_copy_communicator.hpp"

namespace pipetune::runtime {

namespace {

// The blocks one member reads in one collective. Each is released with the fence of the reads
// when the member is done, on success and on error alike, so that no owner waits for it forever.
class Reads {
 public:
  Reads(PeerExchange& exchange, tensor::DeviceAllocator& storage, std::string key, int rank)
      : exchange_(exchange), storage_(storage), key_(std::move(key)), rank_(rank) {}
  Reads(const Reads&) = delete;
  Reads& operator=(const Reads&) = delete;
  ~Reads() {
    tensor::DeviceAllocator::Fence read;
    try {
      read = storage_.record_fence();
    } catch (...) {  // a failed device: the run reports it; nothing it issued will run
    }
    for (int index : taken_) exchange_.release_shared(key_, index, read);
  }

  // Group rank `index`'s block, with this member's stream waiting for its copy in.
  PeerExchange::Parcel take(int index) {
    PeerExchange::Parcel p = exchange_.take_shared(key_, index);
    taken_.push_back(index);
    storage_.wait_for(p.ready);
    return p;
  }

  // The same, of `bytes` (the size this member passed: all must agree).
  const float* take(int index, std::size_t bytes, tensor::DeviceAllocator*& owner) {
    const PeerExchange::Parcel p = take(index);
    if (p.bytes != bytes)
      mismatch("expected " + std::to_string(bytes) + " bytes from group rank " +
               std::to_string(index) + ", which passed " + std::to_string(p.bytes));
    owner = p.owner;
    return static_cast<const float*>(p.block);
  }

  [[noreturn]] void mismatch(const std::string& message) const {
    throw comm::CommMismatch(
        rank_, "collective " + key_,
        "rank " + std::to_string(rank_) + ": collective " + key_ + " " + message);
  }

 private:
  PeerExchange& exchange_;
  tensor::DeviceAllocator& storage_;
  std::string key_;
  int rank_;
  std::vector<int> taken_;
};

std::string sizes(const char* what, std::size_t got, std::size_t per, int g) {
  return std::string(what) + " takes " + std::to_string(per) + " x " + std::to_string(g) +
         " floats, got " + std::to_string(got);
}

}  // namespace

std::string PeerCopyCommunicator::next_key(const comm::ProcessGroup& group) {
  std::uint64_t& seq = sequence_[{group.name, group.ranks}];
  return group.describe() + " #" + std::to_string(seq++);
}

void PeerCopyCommunicator::post_input(const std::string& key, int index,
                                      std::span<const float> data, int readers,
                                      std::vector<std::size_t> parts) {
  const std::size_t bytes = data.size_bytes();
  void* block = staging_block(bytes);
  try {
    storage_->copy(block, data.data(), bytes);
  } catch (...) {
    recycle(block, bytes);
    throw;
  }
  exchange_->post_shared(key, index, rank(),
                         {block, bytes, storage_->record_fence(), storage_, std::move(parts)},
                         readers);
}

void PeerCopyCommunicator::finish(const comm::ProcessGroup& group) {
  // No member leaves while another still reads its block: a member's block is back with it
  // before its next collective, and a member's storage never goes while a block is read.
  direct_->barrier(group);
  ++collectives_;
}

void PeerCopyCommunicator::all_reduce(const comm::ProcessGroup& group, std::span<float> data,
                                      comm::ReduceOp op) {
  if (data.empty() || group.size() <= 1 || !on_device(data.data()))
    return inner().all_reduce(group, data, op);
  for (std::size_t at = 0; at < data.size(); at += piece_)
    all_reduce_piece(group, data.subspan(at, std::min(piece_, data.size() - at)), op);
}

void PeerCopyCommunicator::all_reduce_piece(const comm::ProcessGroup& group, std::span<float> data,
                                            comm::ReduceOp op) {
  const int g = group.size();
  const std::string key = next_key(group);
  post_input(key, group.index_of(rank()), data, g);
  direct_->barrier(group);  // every member's block is posted
  {
    Reads reads(*exchange_, *storage_, key, rank());
    // Folded in group-rank order into the caller's span (its own input is safe in its block).
    for (int i = 0; i < g; ++i) {
      tensor::DeviceAllocator* owner = nullptr;
      const float* block = reads.take(i, data.size_bytes(), owner);
      if (i == 0)
        storage_->copy_from_peer(data.data(), *owner, block, data.size_bytes());
      else
        storage_->combine_from_peer(data.data(), *owner, block, data.size(), op);
      copied_ += data.size_bytes();
    }
  }
  finish(group);
}

void PeerCopyCommunicator::reduce_scatter(const comm::ProcessGroup& group,
                                          std::span<const float> input, std::span<float> output,
                                          comm::ReduceOp op) {
  if (output.empty() || group.size() <= 1 || !on_device(input.data()) || !on_device(output.data()))
    return inner().reduce_scatter(group, input, output, op);
  const int g = group.size(), me = group.index_of(rank());
  const std::size_t n = output.size();
  if (input.size() != n * static_cast<std::size_t>(g))
    throw comm::CommMismatch(
        rank(), "reduce_scatter on " + group.describe(),
        "rank " + std::to_string(rank()) + ": " + sizes("reduce_scatter", input.size(), n, g));
  reduce_own_chunk(group, input, n * static_cast<std::size_t>(me), output, op);
}

void PeerCopyCommunicator::reduce_scatter_v(const comm::ProcessGroup& group,
                                            std::span<const float> input,
                                            std::span<const std::size_t> counts,
                                            std::span<float> output, comm::ReduceOp op) {
  // Every member takes the same way: the counts are the same on each, and the output's size is
  // the caller's count, so a member with nothing to receive still posts its input for the others.
  const bool devices = group.size() > 1 && on_device(input.data()) &&
                       (output.empty() || on_device(output.data())) && !input.empty();
  if (!devices) return inner().reduce_scatter_v(group, input, counts, output, op);
  const std::vector<std::size_t> at =
      comm::check_reduce_scatter_v(rank(), group, input.size(), counts, output.size());
  reduce_own_chunk(group, input, at[static_cast<std::size_t>(group.index_of(rank()))], output, op);
}

void PeerCopyCommunicator::reduce_own_chunk(const comm::ProcessGroup& group,
                                            std::span<const float> input, std::size_t offset,
                                            std::span<float> output, comm::ReduceOp op) {
  const int g = group.size(), me = group.index_of(rank());
  const std::size_t n = output.size();
  const std::string key = next_key(group);
  post_input(key, me, input, g);
  direct_->barrier(group);
  {
    Reads reads(*exchange_, *storage_, key, rank());
    for (int i = 0; i < g; ++i) {
      tensor::DeviceAllocator* owner = nullptr;
      const float* block = reads.take(i, input.size_bytes(), owner);
      if (n == 0) continue;
      if (i == 0)
        storage_->copy_from_peer(output.data(), *owner, block + offset, n * sizeof(float));
      else
        storage_->combine_from_peer(output.data(), *owner, block + offset, n, op);
      copied_ += n * sizeof(float);
    }
  }
  finish(group);
}

void PeerCopyCommunicator::all_gather(const comm::ProcessGroup& group, std::span<const float> input,
                                      std::span<float> output) {
  if (input.empty() || group.size() <= 1 || !on_device(input.data()) || !on_device(output.data()))
    return inner().all_gather(group, input, output);
  const int g = group.size();
  const std::size_t n = input.size();
  if (output.size() != n * static_cast<std::size_t>(g))
    throw comm::CommMismatch(
        rank(), "all_gather on " + group.describe(),
        "rank " + std::to_string(rank()) + ": " + sizes("all_gather", output.size(), n, g));
  const std::string key = next_key(group);
  post_input(key, group.index_of(rank()), input, g);  // before any write: they may overlap
  direct_->barrier(group);
  {
    Reads reads(*exchange_, *storage_, key, rank());
    for (int i = 0; i < g; ++i) {
      tensor::DeviceAllocator* owner = nullptr;
      const float* block = reads.take(i, input.size_bytes(), owner);
      storage_->copy_from_peer(output.data() + n * static_cast<std::size_t>(i), *owner, block,
                               input.size_bytes());
      copied_ += input.size_bytes();
    }
  }
  finish(group);
}

void PeerCopyCommunicator::broadcast(const comm::ProcessGroup& group, std::span<float> data,
                                     int root) {
  if (data.empty() || group.size() <= 1 || !on_device(data.data()))
    return inner().broadcast(group, data, root);
  const int g = group.size(), me = group.index_of(rank());
  if (root < 0 || root >= g)
    throw comm::CommMismatch(rank(), "broadcast on " + group.describe(),
                             "rank " + std::to_string(rank()) + ": broadcast over " +
                                 group.describe() + " from group rank " + std::to_string(root));
  const std::string key = next_key(group);
  if (me == root) post_input(key, me, data, g - 1);
  direct_->barrier(group);
  if (me != root) {
    Reads reads(*exchange_, *storage_, key, rank());
    tensor::DeviceAllocator* owner = nullptr;
    const float* block = reads.take(root, data.size_bytes(), owner);
    storage_->copy_from_peer(data.data(), *owner, block, data.size_bytes());
    copied_ += data.size_bytes();
  }
  finish(group);
}

void PeerCopyCommunicator::all_to_all(const comm::ProcessGroup& group, std::span<const float> input,
                                      std::span<float> output) {
  const auto g = static_cast<std::size_t>(group.size());
  if (input.empty() || g <= 1 || !on_device(input.data()) || !on_device(output.data()) ||
      input.size() % g != 0 || output.size() != input.size())
    return inner().all_to_all(group, input, output);  // which also names a bad size
  const std::vector<std::size_t> parts(g, input.size() / g);
  exchange_parts(group, input, parts, output, parts);
}

void PeerCopyCommunicator::all_to_all_v(const comm::ProcessGroup& group,
                                        std::span<const float> input,
                                        std::span<const std::size_t> send_counts,
                                        std::span<float> output,
                                        std::span<const std::size_t> recv_counts) {
  const auto g = static_cast<std::size_t>(group.size());
  std::size_t sent = 0, received = 0;
  for (std::size_t c : send_counts) sent += c;
  for (std::size_t c : recv_counts) received += c;
  // Tokens routed nowhere make empty spans on some members only: the path is chosen by the
  // storage (every member's is a device in single-GPU mode), never by a span's size.
  const bool device = on_device_or_empty(input) && on_device_or_empty(output);
  if (g <= 1 || !device || send_counts.size() != g || recv_counts.size() != g ||
      sent != input.size() || received != output.size())
    return inner().all_to_all_v(group, input, send_counts, output, recv_counts);
  exchange_parts(group, input, {send_counts.begin(), send_counts.end()}, output, recv_counts);
}

void PeerCopyCommunicator::exchange_parts(const comm::ProcessGroup& group,
                                          std::span<const float> input,
                                          std::vector<std::size_t> send, std::span<float> output,
                                          std::span<const std::size_t> recv) {
  const int g = group.size(), me = group.index_of(rank());
  const std::string key = next_key(group);
  post_input(key, me, input, g, std::move(send));
  direct_->barrier(group);
  {
    Reads reads(*exchange_, *storage_, key, rank());
    std::size_t at = 0;
    for (int i = 0; i < g; ++i) {
      const PeerExchange::Parcel p = reads.take(i);
      const auto want = recv[static_cast<std::size_t>(i)];
      if (p.parts.size() != static_cast<std::size_t>(g))
        reads.mismatch("got " + std::to_string(p.parts.size()) + " parts from group rank " +
                       std::to_string(i) + " for " + std::to_string(g) + " members");
      std::size_t offset = 0;
      for (int j = 0; j < me; ++j) offset += p.parts[static_cast<std::size_t>(j)];
      const std::size_t n = p.parts[static_cast<std::size_t>(me)];
      if (n != want)
        reads.mismatch("expected " + std::to_string(want) + " floats from group rank " +
                       std::to_string(i) + ", which sends " + std::to_string(n));
      if (n > 0)
        storage_->copy_from_peer(output.data() + at, *p.owner,
                                 static_cast<const float*>(p.block) + offset, n * sizeof(float));
      at += n;
      copied_ += n * sizeof(float);
    }
  }
  finish(group);
}

}  // namespace pipetune::runtime
