#include "engine/model/buffer_cache.hpp"

namespace pipetune::model {

BufferCache::~BufferCache() {
  release_all();
}

void* BufferCache::allocate_block(std::size_t bytes) {
  void* block = take(bytes);
  if (block != nullptr) return block;
  if (storage_ == nullptr) return ::operator new(bytes);
  try {
    return storage_->allocate(bytes, profiler::MemoryCategory::Activations);
  } catch (...) {
    // Out of device memory with blocks of other sizes kept: give them back and try once more.
    if (cached_bytes_ == 0) throw;
    release_all();
    return storage_->allocate(bytes, profiler::MemoryCategory::Activations);
  }
}

void BufferCache::release_all() noexcept {
  end_hold();
  for (auto& [bytes, blocks] : free_) {
    for (void* block : blocks) {
      if (storage_ != nullptr)
        storage_->deallocate(block, bytes);
      else
        ::operator delete(block);
    }
    blocks.clear();
  }
  cached_bytes_ = 0;
}

void BufferCache::release_block(void* block, std::size_t bytes) noexcept {
  if (holding_ && storage_ != nullptr) {
    try {
      held_.emplace_back(block, bytes);
      return;
    } catch (...) {  // no room to hold it: freeing it waits for the device, which is as safe
    }
  }
  if (give(block, bytes)) return;
  if (storage_ != nullptr)
    storage_->deallocate(block, bytes);
  else
    ::operator delete(block);
}

void* BufferCache::take(std::size_t bytes) noexcept {
  auto it = free_.find(bytes);
  if (it == free_.end() || it->second.empty()) {
    ++misses_;
    return nullptr;
  }
  void* block = it->second.back();
  it->second.pop_back();
  cached_bytes_ -= bytes;
  ++hits_;
  return block;
}

bool BufferCache::give(void* block, std::size_t bytes) noexcept {
  if (block == nullptr || bytes == 0 || cached_bytes_ + bytes > max_bytes_) return false;
  try {
    free_[bytes].push_back(block);
  } catch (...) {  // no memory for the bookkeeping: let the caller free the block
    return false;
  }
  cached_bytes_ += bytes;
  return true;
}

BufferCache*& BufferCache::bound() noexcept {
  // The only thread-local state: which rank's cache this thread allocates from.
  thread_local BufferCache* cache = nullptr;
  return cache;
}

BufferCache* BufferCache::current() noexcept {
  return bound();
}

void BufferCache::end_hold() noexcept {
  holding_ = false;
  for (auto [block, bytes] : std::exchange(held_, {})) release_block(block, bytes);
}

}  // namespace pipetune::model
