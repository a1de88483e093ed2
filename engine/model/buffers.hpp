// Small helpers for activation buffers: owning std::vector<float> storage viewed with a shape.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/tensor/tensor.hpp"

namespace pipetune::model {

// Sizes `buffer` for `shape`, zero-filled, and returns a view of it.
inline tensor::TensorView zeros(std::vector<float>& buffer, tensor::Shape shape) {
  buffer.assign(static_cast<std::size_t>(shape.numel()), 0.0f);
  return {buffer.data(), shape};
}

// Sizes `buffer` for `shape` without clearing (the op overwrites it) and returns a view.
inline tensor::TensorView sized(std::vector<float>& buffer, tensor::Shape shape) {
  buffer.resize(static_cast<std::size_t>(shape.numel()));
  return {buffer.data(), shape};
}

inline tensor::TensorView view(std::vector<float>& buffer, tensor::Shape shape) {
  return {buffer.data(), shape};
}
inline tensor::ConstTensorView view(const std::vector<float>& buffer, tensor::Shape shape) {
  return {buffer.data(), shape};
}

inline void release(std::vector<float>& buffer) {
  std::vector<float>().swap(buffer);
}

inline std::size_t bytes_of(const std::vector<float>& buffer) {
  return buffer.capacity() * sizeof(float);
}

}  // namespace pipetune::model
