// BufferCache: freed blocks come back for the same size, the byte limit holds, and Buffers use
// the cache bound to their thread (and plain new/delete without one).
#include "engine/model/buffer_cache.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>

namespace pipetune::model {
namespace {

TEST(BufferCache, GivesBackABlockOfTheSameSizeOnly) {
  BufferCache cache(1 << 20);
  void* a = ::operator new(4096);
  ASSERT_TRUE(cache.give(a, 4096));
  EXPECT_EQ(cache.cached_bytes(), 4096u);
  EXPECT_EQ(cache.take(8192), nullptr);  // no block of that size
  EXPECT_EQ(cache.take(4096), a);
  EXPECT_EQ(cache.take(4096), nullptr);  // taken once
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 2u);
  ::operator delete(a);
}

TEST(BufferCache, RefusesBlocksBeyondItsLimit) {
  BufferCache cache(10000);
  void* a = ::operator new(6000);
  void* b = ::operator new(6000);
  EXPECT_TRUE(cache.give(a, 6000));
  EXPECT_FALSE(cache.give(b, 6000));  // 12000 > 10000: the caller keeps (and frees) it
  EXPECT_EQ(cache.cached_bytes(), 6000u);
  ::operator delete(b);
}  // the destructor frees `a`

// A "device" of `capacity` bytes in host memory: an allocation beyond it throws, as cudaMalloc
// does when the GPU is full.
class SmallDevice final : public tensor::DeviceAllocator {
 public:
  explicit SmallDevice(std::size_t capacity) : capacity_(capacity) {}
  tensor::StorageKind kind() const override { return tensor::StorageKind::device; }
  std::string_view name() const override { return "small"; }
  std::size_t alignment() const override { return 16; }
  void copy_to_host(void* h, const void* d, std::size_t n) override { std::memcpy(h, d, n); }
  void copy_from_host(void* d, const void* h, std::size_t n) override { std::memcpy(d, h, n); }
  void copy(void* d, const void* s, std::size_t n) override { std::memmove(d, s, n); }
  void fill_zero(void* d, std::size_t n) override { std::memset(d, 0, n); }
  std::size_t used = 0;

 protected:
  void* do_allocate(std::size_t n) override {
    if (used + n > capacity_) throw std::runtime_error("out of device memory");
    used += n;
    return ::operator new(n);
  }
  void do_deallocate(void* p, std::size_t n) noexcept override {
    used -= n;
    ::operator delete(p);
  }

 private:
  std::size_t capacity_;
};

TEST(BufferCache, AFullDeviceGetsTheCachedBlocksBackBeforeTheAllocationFails) {
  SmallDevice device(10000);
  BufferCache cache(std::numeric_limits<std::size_t>::max(), &device);
  void* a = cache.allocate_block(4000);
  void* b = cache.allocate_block(4000);
  cache.release_block(a, 4000);  // kept: the device still holds 8000 bytes
  cache.release_block(b, 4000);
  EXPECT_EQ(cache.cached_bytes(), 8000u);
  EXPECT_EQ(device.used, 8000u);
  EXPECT_EQ(cache.allocate_block(4000), b);  // the same size comes from the cache
  // 6000 more do not fit beside 8000: the kept block goes back to the device first.
  void* c = cache.allocate_block(6000);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(device.used, 10000u);
  // Nothing left to give back: the device's error reaches the caller.
  EXPECT_THROW(cache.allocate_block(1000), std::runtime_error);
  cache.release_block(c, 6000);
  cache.release_block(b, 4000);
}  // the destructor gives the kept blocks back

// Two streams of one device at once (an overlapped pair): a block freed while held is not handed
// out again until the hold ends, since the stream that used it may still be running; then it is.
TEST(BufferCache, BlocksFreedDuringAHoldAreReusedOnlyAfterIt) {
  SmallDevice device(1 << 20);
  BufferCache cache(std::numeric_limits<std::size_t>::max(), &device);
  void* before = cache.allocate_block(4000);
  cache.release_block(before, 4000);  // freed before the hold: reusable during it
  cache.hold_releases();
  void* a = cache.allocate_block(4000);
  EXPECT_EQ(a, before);
  cache.release_block(a, 4000);
  EXPECT_EQ(cache.held_blocks(), 1u);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  void* b = cache.allocate_block(4000);  // the other stream's request: a new block
  EXPECT_NE(b, a);
  EXPECT_EQ(device.used, 8000u);
  cache.end_hold();
  EXPECT_EQ(cache.held_blocks(), 0u);
  EXPECT_EQ(cache.cached_bytes(), 4000u);
  EXPECT_EQ(cache.allocate_block(4000), a);  // after the hold, as any freed block
  // A hold that is never ended still gives its blocks back with the cache.
  cache.hold_releases();
  cache.release_block(a, 4000);
  cache.release_block(b, 4000);
  EXPECT_EQ(cache.held_blocks(), 2u);
  cache.release_all();
  EXPECT_EQ(device.used, 0u);
}

TEST(BufferCache, BufferReusesStorageOfTheBoundCache) {
  BufferCache cache(1 << 20);
  {
    ScopedBufferCache bind(cache);
    EXPECT_EQ(BufferCache::current(), &cache);
    const float* first = nullptr;
    {
      Buffer b(1000);
      first = b.data();
    }
    EXPECT_EQ(cache.cached_bytes(), 1000 * sizeof(float));
    Buffer again(1000);
    EXPECT_EQ(again.data(), first);  // the same block, no new allocation
    Buffer other(999);
    EXPECT_NE(other.data(), first);
  }
  EXPECT_EQ(BufferCache::current(), nullptr);  // unbound after the scope
}

TEST(BufferCache, ZeroFilledWhereAsked) {
  BufferCache cache(1 << 20);
  ScopedBufferCache bind(cache);
  { Buffer dirty(64, 7.0f); }
  Buffer clean(64, 0.0f);  // takes the dirty block, and fills it
  for (float v : clean) ASSERT_EQ(v, 0.0f);
}

TEST(BufferCache, BuffersMoveAcrossThreadsWithOrWithoutACache) {
  BufferCache cache(1 << 20);
  Buffer moved;
  {
    ScopedBufferCache bind(cache);
    moved = Buffer(256, 1.0f);
  }
  // Freed on a thread with no cache bound: plain delete; with one bound: kept there.
  std::thread([b = std::move(moved)]() mutable { Buffer().swap(b); }).join();
  BufferCache other(1 << 20);
  std::thread([&] {
    ScopedBufferCache bind(other);
    Buffer b(128, 2.0f);
  }).join();
  EXPECT_EQ(other.cached_bytes(), 128 * sizeof(float));
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

}  // namespace
}  // namespace pipetune::model
