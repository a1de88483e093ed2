// Storage for the activation and scratch buffers of a rank (model::Buffer), recycled by size.
//
// A training step allocates the same buffers with the same sizes every micro-batch and frees them
// when their W pass is done. Straight from the heap, every large one is a fresh mmap: its pages
// fault in and are zeroed by the kernel again each step, and value-initialising vectors zeroes
// them once more. On a GPT-2-small step that was about a third of the step time. BufferCache
// keeps freed blocks by exact byte size (shapes repeat exactly) so the next request of that size
// gets memory that is already mapped, as PyTorch's caching allocator does on GPUs. It holds at
// most `max_bytes`; beyond that a freed block goes back to the heap.
//
// The cache belongs to the rank: the rank's thread creates one and binds it with
// ScopedBufferCache for the run. CachingAllocator is stateless (so a Buffer stays a plain vector
// that moves between functions and ranks), and finds the cache bound to the thread it runs on;
// the thread-local variable is only that pointer. With no cache bound (tests, other threads) it
// is operator new / delete. Blocks always come from operator new, so a buffer may be freed on
// any thread, cached there or not.
//
// CachingAllocator default-initialises elements: resize() and the count constructor leave new
// floats unset (every op writes its outputs; model::zeros() clears where a buffer accumulates).
// Builds with PIPETUNE_POISON_BUFFERS (debug and sanitizer builds) fill every host block they hand
// out with NaN, so a read before the first write shows up as a non-finite loss in the tests.
//
// Device storage: a cache made with a tensor::DeviceAllocator whose kind is device (a GPU rank)
// takes its blocks from that allocator (accounted as activations) and gives them back to it, so
// every Buffer of the rank's thread is device memory, and host code reaches its values only
// through the copies of buffers.hpp / device_allocator.hpp. A device block must be freed on its
// rank's thread while the cache is bound (the runtime does); a host block freed there (made on a
// thread without the cache) still goes to operator delete. Without a device allocator nothing
// changes: blocks come from operator new as before. A GPU rank's cache has no byte limit by
// default (TrainOptions::device_buffer_cache_bytes): cudaFree waits for the whole device, and
// GPT-2 at batch 64 (about 40 GB of activations, the logits 13 GB) freed and allocated most of
// them every step past a 2 GiB limit. It keeps no more than the largest set of buffers ever live
// at once, and an allocation the device cannot satisfy first empties the cache.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <new>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/tensor/device_allocator.hpp"

namespace pipetune::model {

class BufferCache {
 public:
  // `storage`: a device allocator for the rank's buffers, or null for host memory (operator new).
  explicit BufferCache(std::size_t max_bytes, tensor::DeviceAllocator* storage = nullptr)
      : max_bytes_(max_bytes),
        storage_(storage != nullptr && storage->on_device() ? storage : nullptr) {}
  ~BufferCache();
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  // A cached block of exactly `bytes`, or nullptr.
  void* take(std::size_t bytes) noexcept;
  // Keeps the block for reuse; false when that would exceed max_bytes (the caller frees it).
  bool give(void* block, std::size_t bytes) noexcept;

  std::size_t cached_bytes() const { return cached_bytes_; }
  std::size_t hits() const { return hits_; }
  std::size_t misses() const { return misses_; }
  // The device allocator behind this cache's blocks, or null (host memory).
  tensor::DeviceAllocator* storage() const { return storage_; }

  // A new block of `bytes` (from the cache, else the storage), and its release. When the device
  // storage has no room, the cache first gives every kept block back and asks once more.
  void* allocate_block(std::size_t bytes);
  void release_block(void* block, std::size_t bytes) noexcept;

  // Frees every kept block (to the device storage, or operator delete), held ones too.
  void release_all() noexcept;

  // Two streams of one device at once (an overlapped pair): a block freed while held is set aside,
  // not handed out again, since the kernels of the stream that used it may still be running while
  // the other stream would take it. end_hold() makes the held blocks reusable: call it once the
  // streams are joined (what is issued next comes after both).
  void hold_releases() noexcept { holding_ = true; }
  void end_hold() noexcept;
  bool holding() const { return holding_; }
  std::size_t held_blocks() const { return held_.size(); }

  // The cache bound to the calling thread, or nullptr.
  static BufferCache* current() noexcept;

 private:
  friend class ScopedBufferCache;
  static BufferCache*& bound() noexcept;

  std::unordered_map<std::size_t, std::vector<void*>> free_;  // bytes -> blocks
  std::size_t max_bytes_;
  tensor::DeviceAllocator* storage_ = nullptr;
  std::size_t cached_bytes_ = 0;
  std::size_t hits_ = 0, misses_ = 0;
  bool holding_ = false;
  std::vector<std::pair<void*, std::size_t>> held_;  // block, bytes
};

// Binds `cache` to the calling thread until the end of the scope (then restores the previous).
// Declare it before anything that owns Buffers, so they are freed while it is still bound.
class ScopedBufferCache {
 public:
  explicit ScopedBufferCache(BufferCache& cache) noexcept
      : previous_(std::exchange(BufferCache::bound(), &cache)) {}
  ~ScopedBufferCache() { BufferCache::bound() = previous_; }
  ScopedBufferCache(const ScopedBufferCache&) = delete;
  ScopedBufferCache& operator=(const ScopedBufferCache&) = delete;

 private:
  BufferCache* previous_;
};

template <class T>
struct CachingAllocator {
  using value_type = T;

  CachingAllocator() noexcept = default;
  template <class U>
  CachingAllocator(const CachingAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    void* block = nullptr;
    BufferCache* cache = BufferCache::current();
    if (cache != nullptr && cache->storage() != nullptr)
      return static_cast<T*>(cache->allocate_block(bytes));  // device memory: never touched here
    if (cache != nullptr) block = cache->take(bytes);
    if (block == nullptr) block = ::operator new(bytes);
#ifdef PIPETUNE_POISON_BUFFERS
    if constexpr (std::is_floating_point_v<T>)
      std::fill_n(static_cast<T*>(block), n, std::numeric_limits<T>::quiet_NaN());
#endif
    return static_cast<T*>(block);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (BufferCache* cache = BufferCache::current()) {
      if (cache->storage() != nullptr) {
        if (cache->storage()->owns(p)) {
          cache->release_block(p, bytes);
          return;
        }
      } else if (cache->give(p, bytes)) {
        return;
      }
    }
    ::operator delete(p);
  }

  // Default-initialisation: no zero fill on resize() or Buffer(n).
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  friend bool operator==(const CachingAllocator&, const CachingAllocator&) noexcept {
    return true;
  }
};

// An activation or scratch buffer: a vector of floats whose storage comes from the rank's cache.
using Buffer = std::vector<float, CachingAllocator<float>>;

}  // namespace pipetune::model
