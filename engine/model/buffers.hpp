// Small helpers for activation buffers: model::Buffer storage (buffer_cache.hpp) viewed with a
// shape.
#pragma once

#include <cstddef>

#include "engine/model/buffer_cache.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::model {

// Sizes `buffer` for `shape`, zero-filled, and returns a view of it.
inline tensor::TensorView zeros(Buffer& buffer, tensor::Shape shape) {
  buffer.assign(static_cast<std::size_t>(shape.numel()), 0.0f);
  return {buffer.data(), shape};
}

// Sizes `buffer` for `shape` without clearing (the op overwrites it) and returns a view.
inline tensor::TensorView sized(Buffer& buffer, tensor::Shape shape) {
  buffer.resize(static_cast<std::size_t>(shape.numel()));
  return {buffer.data(), shape};
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
