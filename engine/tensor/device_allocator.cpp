#include "engine/tensor/device_allocator.hpp"

#include "engine/comm/reduction.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipetune::tensor {

// ---- DeviceAllocator
// -----------------------------------------------------------------------------

void* DeviceAllocator::allocate(std::size_t bytes, Category category) {
  if (bytes == 0) return nullptr;
  void* block = do_allocate(bytes);
  try {
    std::lock_guard lock(mutex_);
    blocks_.emplace(reinterpret_cast<std::uintptr_t>(block), Block{bytes, category});
    const auto c = static_cast<std::size_t>(category);
    const auto b = static_cast<std::int64_t>(bytes);
    current_[c] += b;
    peak_[c] = std::max(peak_[c], current_[c]);
    total_ += b;
    peak_total_ = std::max(peak_total_, total_);
  } catch (...) {
    do_deallocate(block, bytes);
    throw;
  }
  return block;
}

void DeviceAllocator::deallocate(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) return;
  {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(block));
    if (it != blocks_.end()) {
      const auto b = static_cast<std::int64_t>(it->second.bytes);
      current_[static_cast<std::size_t>(it->second.category)] -= b;
      total_ -= b;
      bytes = it->second.bytes;
      blocks_.erase(it);
    }
  }
  do_deallocate(block, bytes);
}

bool DeviceAllocator::owns(const void* p) const {
  if (p == nullptr) return false;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mutex_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return false;
  --it;
  return a < it->first + it->second.bytes;
}

std::int64_t DeviceAllocator::bytes(Category category) const {
  std::lock_guard lock(mutex_);
  return current_[static_cast<std::size_t>(category)];
}

std::int64_t DeviceAllocator::peak_bytes(Category category) const {
  std::lock_guard lock(mutex_);
  return peak_[static_cast<std::size_t>(category)];
}

std::int64_t DeviceAllocator::total_bytes() const {
  std::lock_guard lock(mutex_);
  return total_;
}

std::int64_t DeviceAllocator::peak_total_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_total_;
}

std::int64_t DeviceAllocator::live_blocks() const {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(blocks_.size());
}

// ---- HostAllocator ------------------------------------------------------------------------------

HostAllocator::HostAllocator(std::size_t alignment)
    : alignment_(alignment == 0 ? __STDCPP_DEFAULT_NEW_ALIGNMENT__ : alignment),
      aligned_new_(alignment_ > __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
  if ((alignment_ & (alignment_ - 1)) != 0)
    throw std::invalid_argument("HostAllocator: alignment " + std::to_string(alignment_) +
                                " is not a power of two");
}

void* HostAllocator::do_allocate(std::size_t bytes) {
  return aligned_new_ ? ::operator new(bytes, std::align_val_t(alignment_)) : ::operator new(bytes);
}

void HostAllocator::do_deallocate(void* block, std::size_t /*bytes*/) noexcept {
  if (aligned_new_)
    ::operator delete(block, std::align_val_t(alignment_));
  else
    ::operator delete(block);
}

void HostAllocator::copy_to_host(void* host, const void* device, std::size_t bytes) {
  if (bytes > 0) std::memmove(host, device, bytes);
}
void HostAllocator::copy_from_host(void* device, const void* host, std::size_t bytes) {
  if (bytes > 0) std::memmove(device, host, bytes);
}
void DeviceAllocator::copy_from_peer(void* dst, DeviceAllocator& peer, const void* src,
                                     std::size_t bytes) {
  // Two host storages are one address space; a device and another storage are not.
  if (on_device() || peer.on_device())
    throw std::logic_error("storage '" + std::string(name()) + "' cannot copy from '" +
                           std::string(peer.name()) + "'");
  if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
}

void DeviceAllocator::combine_from_peer(float* dst, DeviceAllocator& peer, const float* src,
                                        std::size_t count, comm::ReduceOp op) {
  if (on_device() || peer.on_device())
    throw std::logic_error("storage '" + std::string(name()) + "' cannot combine from '" +
                           std::string(peer.name()) + "'");
  comm::fold_into(op, dst, src, count);
}

void* DeviceAllocator::allocate_host_tier(std::size_t bytes) {
  return bytes == 0 ? nullptr : ::operator new(bytes);
}

void DeviceAllocator::free_host_tier(void* block, std::size_t /*bytes*/) noexcept {
  ::operator delete(block);
}

DeviceAllocator::Fence DeviceAllocator::offload_to_host(void* host, const void* device,
                                                        std::size_t bytes) {
  copy_to_host(host, device, bytes);
  return nullptr;
}

DeviceAllocator::Fence DeviceAllocator::reload_from_host(void* device, const void* host,
                                                         std::size_t bytes) {
  copy_from_host(device, host, bytes);
  return nullptr;
}

void HostAllocator::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
}
void HostAllocator::fill_zero(void* dst, std::size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

HostAllocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

// ---- FlatStorage --------------------------------------------------------------------------------

FlatStorage::FlatStorage(std::size_t count, DeviceAllocator::Category category,
                         DeviceAllocator* allocator)
    : allocator_(allocator != nullptr ? allocator : &host_allocator()), category_(category) {
  data_ = static_cast<float*>(allocator_->allocate(count * sizeof(float), category));
  size_ = count;
  try {
    zero();
  } catch (...) {
    free();
    throw;
  }
}

FlatStorage::FlatStorage(FlatStorage&& o) noexcept
    : allocator_(o.allocator_), category_(o.category_), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

FlatStorage& FlatStorage::operator=(FlatStorage&& o) noexcept {
  if (this != &o) {
    free();
    allocator_ = o.allocator_;
    category_ = o.category_;
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

FlatStorage::~FlatStorage() {
  free();
}

void FlatStorage::free() noexcept {
  if (data_ != nullptr) allocator_->deallocate(data_, size_ * sizeof(float));
  data_ = nullptr;
  size_ = 0;
}

TensorView FlatStorage::view(std::size_t offset, Shape shape) {
  return {data_ + offset, shape};
}
ConstTensorView FlatStorage::view(std::size_t offset, Shape shape) const {
  return {data_ + offset, shape};
}

std::span<float> FlatStorage::host_span() {
  if (on_device())
    throw std::logic_error("FlatStorage: host access to " + std::string(allocator_->name()) +
                           " storage (copy it with to_host())");
  return {data_, size_};
}
std::span<const float> FlatStorage::host_span() const {
  if (on_device())
    throw std::logic_error("FlatStorage: host access to " + std::string(allocator_->name()) +
                           " storage (copy it with to_host())");
  return {data_, size_};
}

std::vector<float> FlatStorage::to_host() const {
  std::vector<float> out(size_);
  allocator_->copy_to_host(out.data(), data_, size_ * sizeof(float));
  return out;
}

void FlatStorage::upload(std::span<const float> values) {
  if (values.size() != size_)
    throw std::invalid_argument("FlatStorage::upload: " + std::to_string(values.size()) +
                                " values for " + std::to_string(size_));
  allocator_->copy_from_host(data_, values.data(), size_ * sizeof(float));
}

void FlatStorage::download(std::size_t offset, std::span<float> out) const {
  if (offset + out.size() > size_)
    throw std::out_of_range("FlatStorage::download: [" + std::to_string(offset) + ", " +
                            std::to_string(offset + out.size()) + ") of " + std::to_string(size_));
  allocator_->copy_to_host(out.data(), data_ + offset, out.size() * sizeof(float));
}

void FlatStorage::upload(std::size_t offset, std::span<const float> values) {
  if (offset + values.size() > size_)
    throw std::out_of_range("FlatStorage::upload: [" + std::to_string(offset) + ", " +
                            std::to_string(offset + values.size()) + ") of " +
                            std::to_string(size_));
  allocator_->copy_from_host(data_ + offset, values.data(), values.size() * sizeof(float));
}

void FlatStorage::zero() {
  allocator_->fill_zero(data_, size_ * sizeof(float));
}

// ---- view copies --------------------------------------------------------------------------------

namespace {
void check_same(std::int64_t a, std::size_t b, const char* what) {
  if (static_cast<std::size_t>(a) != b)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(a) + " elements vs " +
                                std::to_string(b));
}
}  // namespace

void download(DeviceAllocator& storage, ConstTensorView src, std::span<float> out) {
  check_same(src.numel(), out.size(), "download");
  storage.copy_to_host(out.data(), src.data, out.size() * sizeof(float));
}

std::vector<float> download(DeviceAllocator& storage, ConstTensorView src) {
  std::vector<float> out(static_cast<std::size_t>(src.numel()));
  download(storage, src, out);
  return out;
}

void upload(DeviceAllocator& storage, std::span<const float> values, TensorView dst) {
  check_same(dst.numel(), values.size(), "upload");
  storage.copy_from_host(dst.data, values.data(), values.size() * sizeof(float));
}

void copy(DeviceAllocator& storage, ConstTensorView src, TensorView dst) {
  check_same(src.numel(), static_cast<std::size_t>(dst.numel()), "copy");
  storage.copy(dst.data, src.data, static_cast<std::size_t>(dst.numel()) * sizeof(float));
}

void fill_zero(DeviceAllocator& storage, TensorView dst) {
  storage.fill_zero(dst.data, static_cast<std::size_t>(dst.numel()) * sizeof(float));
}

// ---- HostAccess ---------------------------------------------------------------------------------

HostAccess::HostAccess(DeviceAllocator& storage, TensorView view, Mode mode)
    : storage_(&storage),
      target_(view.data),
      size_(static_cast<std::size_t>(view.numel())),
      mode_(mode) {
  if (!storage.on_device()) {
    host_ = view.data;
    return;
  }
  copy_.resize(size_);
  if (mode != Mode::write && size_ > 0)
    storage.copy_to_host(copy_.data(), view.data, size_ * sizeof(float));
  host_ = copy_.data();
  pending_ = mode != Mode::read;
}

HostAccess::HostAccess(DeviceAllocator& storage, ConstTensorView view)
    : HostAccess(storage, TensorView{const_cast<float*>(view.data), view.shape}, Mode::read) {}

void HostAccess::commit() {
  if (!pending_) return;
  pending_ = false;
  if (size_ > 0) storage_->copy_from_host(target_, copy_.data(), size_ * sizeof(float));
}

HostAccess::~HostAccess() noexcept(false) {
  if (pending_ && std::uncaught_exceptions() == 0) commit();
}

}  // namespace pipetune::tensor
