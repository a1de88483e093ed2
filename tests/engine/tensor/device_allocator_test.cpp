// The storage abstraction behind the model's flat allocations (engine/tensor/device_allocator.hpp)
// on host storage: accounting per category, bytes, alignment, owns(); FlatStorage's explicit
// copies; the view copy helpers; HostAccess, which is the data itself on the host and a copy
// (downloaded, written back) on a device.
#include "engine/tensor/device_allocator.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace pipetune::tensor {
namespace {

using Category = profiler::MemoryCategory;

TEST(HostAllocator, AccountsBytesPerCategoryWithPeaks) {
  HostAllocator a;
  void* p = a.allocate(1000, Category::Parameters);
  void* g = a.allocate(400, Category::Gradients);
  void* t = a.allocate(64, Category::Temporaries);
  EXPECT_EQ(a.bytes(Category::Parameters), 1000);
  EXPECT_EQ(a.bytes(Category::Gradients), 400);
  EXPECT_EQ(a.bytes(Category::Temporaries), 64);
  EXPECT_EQ(a.bytes(Category::Activations), 0);
  EXPECT_EQ(a.total_bytes(), 1464);
  EXPECT_EQ(a.live_blocks(), 3);
  a.deallocate(t, 64);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.bytes(Category::Parameters), 0);
  EXPECT_EQ(a.peak_bytes(Category::Parameters), 1000);
  EXPECT_EQ(a.total_bytes(), 400);
  EXPECT_EQ(a.peak_total_bytes(), 1464);
  a.deallocate(g, 400);
  EXPECT_EQ(a.total_bytes(), 0);
  EXPECT_EQ(a.live_blocks(), 0);
}

TEST(HostAllocator, ZeroBytesIsNoBlock) {
  HostAllocator a;
  EXPECT_EQ(a.allocate(0, Category::Activations), nullptr);
  a.deallocate(nullptr, 0);
  EXPECT_EQ(a.total_bytes(), 0);
}

TEST(HostAllocator, AlignsBlocks) {
  HostAllocator plain;  // operator new's alignment, as std::vector<float>
  EXPECT_EQ(plain.alignment(), __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  HostAllocator wide(256);
  EXPECT_EQ(wide.alignment(), 256u);
  std::vector<void*> blocks;
  for (std::size_t bytes : {4u, 12u, 100u, 4096u, 12345u}) {
    void* p = plain.allocate(bytes, Category::Activations);
    void* q = wide.allocate(bytes, Category::Activations);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % plain.alignment(), 0u) << bytes;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 256, 0u) << bytes;
    plain.deallocate(p, bytes);
    wide.deallocate(q, bytes);
  }
  EXPECT_THROW(HostAllocator(48), std::invalid_argument);
}

TEST(HostAllocator, OwnsExactlyItsLiveBlocks) {
  HostAllocator a;
  auto* p = static_cast<float*>(a.allocate(40, Category::Activations));
  EXPECT_TRUE(a.owns(p));
  EXPECT_TRUE(a.owns(p + 9));
  EXPECT_FALSE(a.owns(p + 10));  // one past the end
  float outside = 0.0f;
  EXPECT_FALSE(a.owns(&outside));
  EXPECT_FALSE(a.owns(nullptr));
  a.deallocate(p, 40);
  EXPECT_FALSE(a.owns(p));
  EXPECT_EQ(a.kind(), StorageKind::host);
  EXPECT_FALSE(a.on_device());
}

TEST(FlatStorage, IsZeroedAccountedAndFreed) {
  HostAllocator a;
  {
    FlatStorage s(10, Category::OptimizerState, &a);
    EXPECT_EQ(s.size(), 10u);
    EXPECT_EQ(a.bytes(Category::OptimizerState), 40);
    for (float v : s.host_span()) EXPECT_EQ(v, 0.0f);
    FlatStorage moved = std::move(s);
    EXPECT_EQ(s.size(), 0u);  // NOLINT: the moved-from storage is empty
    EXPECT_EQ(a.bytes(Category::OptimizerState), 40);
  }
  EXPECT_EQ(a.total_bytes(), 0);
}

TEST(FlatStorage, CopiesInAndOut) {
  FlatStorage s(6, Category::Parameters);  // the shared host allocator
  EXPECT_FALSE(s.on_device());
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  s.upload(values);
  EXPECT_EQ(s.to_host(), values);
  std::vector<float> part(3);
  s.download(2, part);
  EXPECT_EQ(part, (std::vector<float>{3, 4, 5}));
  const std::vector<float> two = {-1, -2};
  s.upload(4, two);
  EXPECT_EQ(s.to_host(), (std::vector<float>{1, 2, 3, 4, -1, -2}));
  EXPECT_THROW(s.upload(5, two), std::out_of_range);
  EXPECT_THROW(s.upload(two), std::invalid_argument);
  s.zero();
  EXPECT_EQ(s.to_host(), std::vector<float>(6, 0.0f));
  TensorView v = s.view(2, Shape{2, 2});
  EXPECT_EQ(v.data, s.data() + 2);
}

TEST(ViewCopies, WorkOnHostStorage) {
  HostAllocator& h = host_allocator();
  std::vector<float> a = {1, 2, 3, 4}, b(4, 9.0f);
  TensorView va{a.data(), Shape{4}}, vb{b.data(), Shape{2, 2}};
  copy(h, va, vb);
  EXPECT_EQ(b, a);
  fill_zero(h, vb);
  EXPECT_EQ(b, std::vector<float>(4, 0.0f));
  upload(h, std::vector<float>{7, 8, 9, 10}, vb);
  EXPECT_EQ(download(h, vb), (std::vector<float>{7, 8, 9, 10}));
  std::vector<float> three(3);
  EXPECT_THROW(download(h, vb, three), std::invalid_argument);
}

// A "device" that is host memory behind the copy functions: HostAccess must work on copies.
class CopyingDevice final : public DeviceAllocator {
 public:
  StorageKind kind() const override { return StorageKind::device; }
  std::string_view name() const override { return "copying"; }
  std::size_t alignment() const override { return 16; }
  void copy_to_host(void* h, const void* d, std::size_t n) override {
    ++downloads;
    std::memcpy(h, d, n);
  }
  void copy_from_host(void* d, const void* h, std::size_t n) override {
    ++uploads;
    std::memcpy(d, h, n);
  }
  void copy(void* d, const void* s, std::size_t n) override { std::memmove(d, s, n); }
  void fill_zero(void* d, std::size_t n) override { std::memset(d, 0, n); }
  int downloads = 0, uploads = 0;

 protected:
  void* do_allocate(std::size_t n) override { return ::operator new(n); }
  void do_deallocate(void* p, std::size_t) noexcept override { ::operator delete(p); }
};

TEST(HostAccess, IsTheDataItselfOnTheHost) {
  std::vector<float> x = {1, 2, 3};
  TensorView v{x.data(), Shape{3}};
  HostAccess access(host_allocator(), v, HostAccess::Mode::read_write);
  EXPECT_EQ(access.data(), x.data());
  access[1] = 20.0f;
  EXPECT_EQ(x[1], 20.0f);
}

TEST(HostAccess, DownloadsAndWritesBackOnADevice) {
  CopyingDevice d;
  FlatStorage s(4, Category::Activations, &d);
  s.upload(std::vector<float>{1, 2, 3, 4});
  d.downloads = d.uploads = 0;
  {
    HostAccess rw(d, s.view(0, Shape{4}), HostAccess::Mode::read_write);
    EXPECT_NE(rw.data(), s.data());
    EXPECT_EQ(rw[2], 3.0f);
    rw[2] = 30.0f;
    EXPECT_EQ(d.downloads, 1);
    rw.commit();
    EXPECT_EQ(d.uploads, 1);
  }
  EXPECT_EQ(d.uploads, 1);  // committed once
  {
    HostAccess w(d, s.view(1, Shape{2}), HostAccess::Mode::write);  // no download
    EXPECT_EQ(d.downloads, 1);
    w[0] = -2.0f;
    w[1] = -3.0f;
  }  // written back by the destructor
  EXPECT_EQ(s.to_host(), (std::vector<float>{1, -2, -3, 4}));
  {
    const HostAccess r(d, ConstTensorView(s.view(0, Shape{4})));
    EXPECT_EQ(r[3], 4.0f);
  }
  EXPECT_EQ(d.uploads, 2);  // the commit and the write; a read writes nothing back
}

TEST(FlatStorage, RefusesHostAccessOnADevice) {
  CopyingDevice d;
  FlatStorage s(4, Category::Parameters, &d);
  EXPECT_TRUE(s.on_device());
  EXPECT_THROW((void)s.host_span(), std::logic_error);
  EXPECT_EQ(d.bytes(Category::Parameters), 16);
}

}  // namespace
}  // namespace pipetune::tensor
