// Small helpers for activation buffers: model::Buffer storage (buffer_cache.hpp) viewed with a
// shape, and the storage-aware element copies host code uses on them and on parameter views.
//
// The rank's storage is the device allocator of the BufferCache bound to the calling thread (a
// GPU rank), else host memory. On host storage every helper is the plain loop it replaced
// (std::fill, std::copy, vector::assign), so the CPU path computes the same bits as fast; on a
// device they are the allocator's copies, ordered on the rank's stream.
#pragma once

#include <algorithm>
#include <cstddef>

#include "engine/model/buffer_cache.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::model {

// The device allocator of the calling thread's rank, or null on host storage.
inline tensor::DeviceAllocator* device_storage() {
  const BufferCache* cache = BufferCache::current();
  return cache != nullptr ? cache->storage() : nullptr;
}
// The calling thread's storage: its rank's device allocator, else the host's.
inline tensor::DeviceAllocator& rank_storage() {
  tensor::DeviceAllocator* d = device_storage();
  return d != nullptr ? *d : tensor::host_allocator();
}

// Sizes `buffer` for `shape` without clearing (the op overwrites it) and returns a view. On a
// device the old contents are not kept when the buffer grows (no host relocation of elements).
inline tensor::TensorView sized(Buffer& buffer, tensor::Shape shape) {
  const auto n = static_cast<std::size_t>(shape.numel());
  if (n > buffer.capacity() && device_storage() != nullptr) Buffer().swap(buffer);
  buffer.resize(n);
  return {buffer.data(), shape};
}

// Sizes `buffer` for `shape`, zero-filled, and returns a view of it.
inline tensor::TensorView zeros(Buffer& buffer, tensor::Shape shape) {
  tensor::DeviceAllocator* d = device_storage();
  if (d == nullptr) {
    buffer.assign(static_cast<std::size_t>(shape.numel()), 0.0f);
    return {buffer.data(), shape};
  }
  tensor::TensorView v = sized(buffer, shape);
  tensor::fill_zero(*d, v);
  return v;
}

// dst <- 0 (a view in the rank's storage).
inline void fill_zero(tensor::TensorView dst) {
  if (tensor::DeviceAllocator* d = device_storage())
    tensor::fill_zero(*d, dst);
  else
    std::fill(dst.data, dst.data + dst.numel(), 0.0f);
}

// dst <- src, both views in the rank's storage with the same element count.
inline void copy_values(tensor::ConstTensorView src, tensor::TensorView dst) {
  if (tensor::DeviceAllocator* d = device_storage())
    tensor::copy(*d, src, dst);
  else
    std::copy(src.data, src.data + src.numel(), dst.data);
}

// Sizes `buffer` like `src` and copies src's elements into it.
inline void assign_copy(Buffer& buffer, tensor::ConstTensorView src) {
  if (device_storage() == nullptr) {
    buffer.assign(src.data, src.data + src.numel());
    return;
  }
  copy_values(src, sized(buffer, tensor::Shape{src.numel()}));
}

// A copy of elements [lo, hi) of `buffer`.
inline Buffer copy_of(const Buffer& buffer, std::size_t lo, std::size_t hi) {
  if (device_storage() == nullptr) return Buffer(buffer.begin() + lo, buffer.begin() + hi);
  Buffer out;
  const auto n = static_cast<std::int64_t>(hi - lo);
  copy_values({buffer.data() + lo, tensor::Shape{n}}, sized(out, tensor::Shape{n}));
  return out;
}
inline Buffer copy_of(const Buffer& buffer) {
  return copy_of(buffer, 0, buffer.size());
}

inline tensor::TensorView view(Buffer& buffer, tensor::Shape shape) {
  return {buffer.data(), shape};
}
inline tensor::ConstTensorView view(const Buffer& buffer, tensor::Shape shape) {
  return {buffer.data(), shape};
}

// Frees the storage (back to the rank's cache).
inline void release(Buffer& buffer) {
  Buffer().swap(buffer);
}

inline std::size_t bytes_of(const Buffer& buffer) {
  return buffer.capacity() * sizeof(float);
}

}  // namespace pipetune::model
