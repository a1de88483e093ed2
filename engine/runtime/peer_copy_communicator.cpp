#include "engine/runtime/peer_copy_communicator.hpp"

#include <stdexcept>
#include <string>

#include "engine/comm/comm_errors.hpp"

namespace pipetune::runtime {

void PeerExchange::post(int src, int dst, int tag, Parcel parcel) {
  std::lock_guard lock(mutex_);
  ++parcels_;
  bytes_ += parcel.bytes;
  in_flight_[{src, dst, tag}].push_back(std::move(parcel));
}

std::size_t PeerExchange::parcels_posted() const {
  std::lock_guard lock(mutex_);
  return parcels_;
}

std::size_t PeerExchange::bytes_posted() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

std::size_t PeerExchange::shared_posted() const {
  std::lock_guard lock(mutex_);
  return shared_parcels_;
}

std::size_t PeerExchange::shared_bytes_posted() const {
  std::lock_guard lock(mutex_);
  return shared_bytes_;
}

void PeerExchange::post_shared(const std::string& key, int index, int src, Parcel parcel,
                               int readers) {
  std::lock_guard lock(mutex_);
  const std::size_t bytes = parcel.bytes;
  const auto [it, added] =
      shared_.try_emplace({key, index}, Shared{std::move(parcel), src, readers, {}});
  if (!added)
    throw std::logic_error("peer exchange: collective " + key + " got two blocks of group rank " +
                           std::to_string(index));
  ++shared_parcels_;
  shared_bytes_ += bytes;
}

PeerExchange::Parcel PeerExchange::take_shared(const std::string& key, int index) {
  std::lock_guard lock(mutex_);
  const auto it = shared_.find({key, index});
  if (it == shared_.end()) {
    // Its owner failed (a mismatch it found first, say) and took its block back when it left:
    // that rank's failure, not a protocol error, whichever member gets here first.
    if (const auto gone = abandoned_.find({key, index}); gone != abandoned_.end())
      throw comm::RankFailure(gone->second, "collective " + key,
                              "collective " + key + ": rank " + std::to_string(gone->second) +
                                  " (group rank " + std::to_string(index) +
                                  ") failed before its block was read");
    throw std::logic_error("peer exchange: collective " + key + " has no block of group rank " +
                           std::to_string(index));
  }
  ++being_copied_[it->second.src];
  return it->second.parcel;
}

void PeerExchange::release_shared(const std::string& key, int index,
                                  tensor::DeviceAllocator::Fence done) {
  {
    std::lock_guard lock(mutex_);
    const auto it = shared_.find({key, index});
    if (it == shared_.end())
      throw std::logic_error("peer exchange: collective " + key +
                             " released a block it never took (group rank " +
                             std::to_string(index) + ")");
    Shared& s = it->second;
    s.done.push_back(std::move(done));
    --being_copied_[s.src];
    if (--s.readers_left <= 0) {
      returns_[s.src].push_back(
          {const_cast<void*>(s.parcel.block), s.parcel.bytes, std::move(s.done)});
      shared_.erase(it);
    }
  }
  returned_.notify_all();
}

PeerExchange::Parcel PeerExchange::take(int src, int dst, int tag) {
  std::lock_guard lock(mutex_);
  const auto it = in_flight_.find({src, dst, tag});
  if (it == in_flight_.end() || it->second.empty())
    throw std::logic_error("peer exchange: rank " + std::to_string(dst) +
                           " got a token from rank " + std::to_string(src) + " (tag " +
                           std::to_string(tag) + ") with no block posted");
  Parcel p = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) in_flight_.erase(it);
  ++being_copied_[src];
  return p;
}

void PeerExchange::give_back(int src, Returned returned) {
  {
    std::lock_guard lock(mutex_);
    returns_[src].push_back(std::move(returned));
    --being_copied_[src];
  }
  returned_.notify_all();
}

std::vector<PeerExchange::Returned> PeerExchange::reclaim(int src) {
  std::lock_guard lock(mutex_);
  const auto it = returns_.find(src);
  if (it == returns_.end()) return {};
  std::vector<Returned> out = std::move(it->second);
  returns_.erase(it);
  return out;
}

std::vector<PeerExchange::Returned> PeerExchange::leave(int src) {
  std::unique_lock lock(mutex_);
  // A receiver copies out of a taken block between take and give_back, with no wait in between.
  returned_.wait(lock, [&] { return being_copied_[src] <= 0; });
  std::vector<Returned> out;
  if (const auto it = returns_.find(src); it != returns_.end()) {
    out = std::move(it->second);
    returns_.erase(it);
  }
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (std::get<0>(it->first) != src) {
      ++it;
      continue;
    }
    for (Parcel& p : it->second)  // never taken: the run failed before its receive
      out.push_back({const_cast<void*>(p.block), p.bytes, {}});
    it = in_flight_.erase(it);
  }
  // Collective blocks some member never read (the run failed in between); none is being read.
  for (auto it = shared_.begin(); it != shared_.end();) {
    if (it->second.src != src) {
      ++it;
      continue;
    }
    out.push_back({const_cast<void*>(it->second.parcel.block), it->second.parcel.bytes,
                   std::move(it->second.done)});
    abandoned_.emplace(it->first, src);
    it = shared_.erase(it);
  }
  return out;
}

PeerCopyCommunicator::PeerCopyCommunicator(comm::Communicator& direct, comm::Communicator& staged,
                                           tensor::DeviceAllocator& storage, PeerExchange& exchange,
                                           std::size_t collective_piece)
    : ForwardingCommunicator(staged),
      direct_(&direct),
      storage_(&storage),
      exchange_(&exchange),
      piece_(collective_piece > 0 ? collective_piece : kCollectivePiece) {}

PeerCopyCommunicator::~PeerCopyCommunicator() {
  // Every block of this rank's storage goes back to it before the storage goes; the storage's
  // own synchronisation orders the frees after the copies that read them.
  for (const PeerExchange::Returned& r : exchange_->leave(rank())) {
    for (const auto& fence : r.done) storage_->wait_for(fence);
    storage_->deallocate(r.block, r.bytes);
  }
  try {
    storage_->synchronize();
  } catch (...) {  // a failed device: the run already reports its error
  }
  for (auto& [bytes, blocks] : free_)
    for (const FreeBlock& b : blocks) storage_->deallocate(b.block, bytes);
}

void* PeerCopyCommunicator::staging_block(std::size_t bytes) {
  for (PeerExchange::Returned& r : exchange_->reclaim(rank()))
    free_[r.bytes].push_back({r.block, std::move(r.done)});
  std::vector<FreeBlock>& pool = free_[bytes];
  if (!pool.empty()) {
    FreeBlock b = std::move(pool.back());
    pool.pop_back();
    // The copy into the block waits for its readers.
    for (const auto& fence : b.readers_done) storage_->wait_for(fence);
    return b.block;
  }
  ++blocks_;
  return storage_->allocate(bytes, tensor::DeviceAllocator::Category::Temporaries);
}

void PeerCopyCommunicator::send(int dst, int tag, std::span<const float> data) {
  if (data.empty()) return inner().send(dst, tag, data);
  const std::size_t bytes = data.size_bytes();
  void* block = staging_block(bytes);
  if (on_device(data.data()))
    storage_->copy(block, data.data(), bytes);
  else
    storage_->copy_from_host(block, data.data(), bytes);
  exchange_->post(rank(), dst, tag, {block, bytes, storage_->record_fence(), storage_});
  const float token = 1.0f;
  direct_->send(dst, tag, std::span<const float>(&token, 1));
}

void PeerCopyCommunicator::recv(int src, int tag, std::span<float> data) {
  if (data.empty()) return inner().recv(src, tag, data);
  float token = 0.0f;
  direct_->recv(src, tag, std::span<float>(&token, 1));
  const PeerExchange::Parcel p = exchange_->take(src, rank(), tag);
  PeerExchange::Returned back{const_cast<void*>(p.block), p.bytes, {}};
  try {
    if (p.bytes != data.size_bytes())
      throw std::logic_error("peer exchange: rank " + std::to_string(rank()) + " expected " +
                             std::to_string(data.size_bytes()) + " bytes from rank " +
                             std::to_string(src) + " (tag " + std::to_string(tag) + "), got " +
                             std::to_string(p.bytes));
    if (on_device(data.data())) {
      storage_->wait_for(p.ready);
      storage_->copy_from_peer(data.data(), *p.owner, p.block, p.bytes);
      back.done.push_back(storage_->record_fence());
      copied_ += p.bytes;
    } else {
      // On the sender's storage, ordered after its copy into the block; done when it returns.
      p.owner->copy_to_host(data.data(), p.block, p.bytes);
    }
  } catch (...) {
    exchange_->give_back(src, std::move(back));
    throw;
  }
  exchange_->give_back(src, std::move(back));
}

}  // namespace pipetune::runtime
