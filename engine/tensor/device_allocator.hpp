// Where a rank's tensors live: the allocator behind the model's flat allocations (parameters,
// gradients, optimizer state) and its activation and scratch buffers (model::Buffer), and the
// explicit copies host code uses to read or write values in that storage.
//
// DeviceAllocator is the interface. HostAllocator (here) is today's storage: ::operator new, the
// same allocation std::vector makes, so the CPU path keeps its speed and its bits. The CUDA
// implementation (engine/cuda/device_allocator_cuda.hpp) hands out cudaMalloc'd memory of the
// rank's device and copies on the rank's stream, so that every copy is ordered after the kernels
// that wrote the source. The engine library itself never depends on CUDA.
//
// Every allocation is accounted by category (the memory ledger's categories: parameters,
// gradients, optimizer state, activations, temporaries, vocabulary layers), so a GPU rank's
// accounting is in device bytes. The allocator also knows its live blocks (owns()), which is how
// a communicator tells device spans from host spans (runtime/staging_communicator.hpp).
//
// Host code never dereferences a pointer of an allocator whose kind() is device: it goes through
// the copies below (or HostAccess, which is the data itself on host storage and a downloaded copy
// on a device).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "engine/comm/communicator.hpp"  // ReduceOp
#include "engine/tensor/tensor.hpp"
#include "profiler/trace.hpp"

namespace pipetune::tensor {

enum class StorageKind : std::uint8_t { host, device };

class DeviceAllocator {
 public:
  using Category = profiler::MemoryCategory;

  virtual ~DeviceAllocator() = default;
  DeviceAllocator() = default;
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  virtual StorageKind kind() const = 0;
  virtual std::string_view name() const = 0;  // "host", "cuda:0"
  bool on_device() const { return kind() == StorageKind::device; }
  // Every block starts at a multiple of this (a power of two).
  virtual std::size_t alignment() const = 0;

  // A block of `bytes` (nullptr for 0), accounted under `category`. Throws std::bad_alloc (host)
  // or the implementation's error (CudaError) when out of memory.
  void* allocate(std::size_t bytes, Category category);
  // Frees a block from allocate() with the same size; accounted back under its category.
  void deallocate(void* block, std::size_t bytes) noexcept;

  // Copies between this storage and host memory. copy_to_host waits until the bytes are on the
  // host; copy_from_host until the host bytes may be reused. `device` pointers belong to this
  // allocator (any offset into a block).
  virtual void copy_to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual void copy_from_host(void* device, const void* host, std::size_t bytes) = 0;
  // Within this storage (ordered with the rank's computation).
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill_zero(void* dst, std::size_t bytes) = 0;
  // Waits for everything issued on the rank's storage (a no-op on the host).
  virtual void synchronize() {}

  // Ordering between the storages of ranks that share one device (ranks as streams of one GPU).
  // A fence marks everything issued on this storage so far; wait_for makes what is issued here
  // next wait for another storage's fence, without blocking the host. Null: nothing to wait for
  // (storages whose copies are done when they return, like the host's).
  using Fence = std::shared_ptr<const void>;
  virtual Fence record_fence() { return nullptr; }
  virtual void wait_for(const Fence& fence) { (void)fence; }
  // Copies `bytes` from a block of `peer` (another rank's storage on the same device) into this
  // storage, ordered on this storage; the caller has waited for the fence of the peer's writes.
  // Storages that cannot reach each other throw std::logic_error.
  virtual void copy_from_peer(void* dst, DeviceAllocator& peer, const void* src, std::size_t bytes);
  // dst[i] = dst[i] op src[i] for `count` floats, the communicators' fold (comm/reduction.hpp):
  // dst in this storage, src in a block of `peer`, ordered like copy_from_peer. The reductions of
  // ranks that share one device fold their blocks with it (runtime/peer_copy_communicator.hpp).
  virtual void combine_from_peer(float* dst, DeviceAllocator& peer, const float* src,
                                 std::size_t count, comm::ReduceOp op);

  // The offload tier (activation offload, KARMA): host memory this storage copies a rank's
  // activations to after their forward and back before their backward, beside the computation.
  // Host-tier blocks are pinned on a GPU (so the copies are DMA that overlaps the kernels), plain
  // operator new elsewhere. offload_to_host and reload_from_host start a copy ordered after
  // everything issued so far on the rank's stream and return a fence that is done when the copy
  // is; null means it was done on return (host storage copies synchronously). Until an offload's
  // fence is done, its device source must stay allocated and unwritten, and a reload's host
  // source kept; the rank's stream waits for a reload with wait_for(fence) before reading it.
  virtual void* allocate_host_tier(std::size_t bytes);
  virtual void free_host_tier(void* block, std::size_t bytes) noexcept;
  virtual Fence offload_to_host(void* host, const void* device, std::size_t bytes);
  virtual Fence reload_from_host(void* device, const void* host, std::size_t bytes);
  // Whether the copy a fence marks is done, without waiting (a null fence is); and the host's
  // wait for it.
  virtual bool fence_done(const Fence& fence) { return fence == nullptr; }
  virtual void wait_host(const Fence& fence) { (void)fence; }

  // True when `p` points into a live block of this allocator.
  bool owns(const void* p) const;

  std::int64_t bytes(Category category) const;
  std::int64_t peak_bytes(Category category) const;
  std::int64_t total_bytes() const;
  std::int64_t peak_total_bytes() const;
  std::int64_t live_blocks() const;

 protected:
  virtual void* do_allocate(std::size_t bytes) = 0;
  virtual void do_deallocate(void* block, std::size_t bytes) noexcept = 0;

 private:
  struct Block {
    std::size_t bytes = 0;
    Category category = Category::Temporaries;
  };
  mutable std::mutex mutex_;                // blocks may be freed on another thread
  std::map<std::uintptr_t, Block> blocks_;  // start address -> block
  std::array<std::int64_t, profiler::kMemoryCategoryCount> current_{}, peak_{};
  std::int64_t total_ = 0, peak_total_ = 0;
};

// Host memory from ::operator new (alignment 0 or the default: what std::vector<float> gets), or
// aligned operator new for a larger power-of-two alignment.
class HostAllocator final : public DeviceAllocator {
 public:
  explicit HostAllocator(std::size_t alignment = 0);
  StorageKind kind() const override { return StorageKind::host; }
  std::string_view name() const override { return "host"; }
  std::size_t alignment() const override { return alignment_; }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override;
  void copy_from_host(void* device, const void* host, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void fill_zero(void* dst, std::size_t bytes) override;

 protected:
  void* do_allocate(std::size_t bytes) override;
  void do_deallocate(void* block, std::size_t bytes) noexcept override;

 private:
  std::size_t alignment_;
  bool aligned_new_;  // alignment beyond operator new's default
};

// The process's shared host allocator (the storage of every tensor without an explicit one).
HostAllocator& host_allocator();

// An owning flat fp32 allocation in a storage (llm.c style: one per kind), zero-initialised.
// Moves carry the block; copies are explicit (to_host / upload). With no allocator it is host.
class FlatStorage {
 public:
  FlatStorage() = default;
  FlatStorage(std::size_t count, DeviceAllocator::Category category,
              DeviceAllocator* allocator = nullptr);
  FlatStorage(FlatStorage&& other) noexcept;
  FlatStorage& operator=(FlatStorage&& other) noexcept;
  FlatStorage(const FlatStorage&) = delete;
  FlatStorage& operator=(const FlatStorage&) = delete;
  ~FlatStorage();

  float* data() { return data_; }
  const float* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  DeviceAllocator& allocator() const { return *allocator_; }
  bool on_device() const { return allocator_->on_device(); }
  DeviceAllocator::Category category() const { return category_; }
  TensorView view(std::size_t offset, Shape shape);
  ConstTensorView view(std::size_t offset, Shape shape) const;

  // Host-only element access: throws std::logic_error on device storage.
  std::span<float> host_span();
  std::span<const float> host_span() const;

  // Explicit copies: every element to the host, or `values` (size() of them) into the storage.
  std::vector<float> to_host() const;
  void upload(std::span<const float> values);
  // Elements [offset, offset + out.size()) to the host / from the host.
  void download(std::size_t offset, std::span<float> out) const;
  void upload(std::size_t offset, std::span<const float> values);
  void zero();

 private:
  void free() noexcept;

  DeviceAllocator* allocator_ = &host_allocator();
  DeviceAllocator::Category category_ = DeviceAllocator::Category::Temporaries;
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

// Copies of views that live in `storage` (offsets are the views'; sizes must match).
void download(DeviceAllocator& storage, ConstTensorView src, std::span<float> out);
std::vector<float> download(DeviceAllocator& storage, ConstTensorView src);
void upload(DeviceAllocator& storage, std::span<const float> values, TensorView dst);
void copy(DeviceAllocator& storage, ConstTensorView src, TensorView dst);
void fill_zero(DeviceAllocator& storage, TensorView dst);

// Host access to the values of a view in `storage`: on host storage the view's own memory (no
// copy); on a device a host copy, downloaded first unless the access only writes, and written
// back by commit() (or the destructor when still pending and no exception is in flight).
class HostAccess {
 public:
  enum class Mode : std::uint8_t { read, write, read_write };
  HostAccess(DeviceAllocator& storage, TensorView view, Mode mode);
  HostAccess(DeviceAllocator& storage, ConstTensorView view);  // read
  HostAccess(const HostAccess&) = delete;
  HostAccess& operator=(const HostAccess&) = delete;
  ~HostAccess() noexcept(false);

  float* data() { return host_; }
  const float* data() const { return host_; }
  std::size_t size() const { return size_; }
  float& operator[](std::size_t i) { return host_[i]; }
  float operator[](std::size_t i) const { return host_[i]; }
  void commit();  // writes a device copy back (nothing on host storage or for read)

 private:
  DeviceAllocator* storage_;
  float* target_;
  std::size_t size_;
  Mode mode_;
  std::vector<float> copy_;
  float* host_;
  bool pending_ = false;
};

}  // namespace pipetune::tensor
