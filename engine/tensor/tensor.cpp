#include "engine/tensor/tensor.hpp"

#include <algorithm>

#include "engine/errors.hpp"

namespace pipetune::tensor {

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  if (dims.size() > kMaxRank) {
    throw InputError("Shape: rank " + std::to_string(dims.size()) + " exceeds the maximum of " +
                     std::to_string(kMaxRank));
  }
  for (std::int64_t d : dims) {
    if (d < 0) throw InputError("Shape: negative dimension " + std::to_string(d));
    dims_[static_cast<std::size_t>(rank_++)] = d;
  }
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

std::int64_t Shape::rows() const {
  const std::int64_t l = last();
  return l == 0 ? 0 : numel() / l;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims_[static_cast<std::size_t>(i)]);
  }
  return s + ")";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i) {
    if (a.dims_[static_cast<std::size_t>(i)] != b.dims_[static_cast<std::size_t>(i)]) return false;
  }
  return true;
}

Tensor::Tensor(Shape shape, std::vector<float> values) : shape_(shape), data_(std::move(values)) {
  if (static_cast<std::int64_t>(data_.size()) != shape_.numel()) {
    throw InputError("Tensor: " + std::to_string(data_.size()) + " values do not fill shape " +
                     shape_.str());
  }
}

void Tensor::fill(float value) {
  std::fill(data_.begin(), data_.end(), value);
}

}  // namespace pipetune::tensor
