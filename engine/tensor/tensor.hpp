// Tensors for the engine's ops: a small fixed-rank Shape, non-owning views (TensorView,
// ConstTensorView) that ops take, and Tensor, a simple owning fp32 host tensor.
//
// Ops take views so the model can point them into one flat allocation per kind (llm.c style:
// parameters, gradients, optimizer state, activations each one buffer). A default-constructed
// view (data == nullptr) means "absent", e.g. a linear layer without bias.
// Layout is always dense row-major (C order); the last dimension is contiguous.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace pipetune::tensor {

class Shape {
 public:
  static constexpr int kMaxRank = 4;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);  // throws InputError on rank > 4 or dim < 0

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t numel() const;
  std::int64_t last() const { return rank_ == 0 ? 1 : dims_[rank_ - 1]; }
  std::int64_t rows() const;  // numel() / last(): leading dimensions flattened
  std::string str() const;    // "(4, 64, 768)"

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

struct ConstTensorView;

struct TensorView {
  float* data = nullptr;
  Shape shape;

  bool empty() const { return data == nullptr; }
  std::int64_t numel() const { return shape.numel(); }
};

struct ConstTensorView {
  const float* data = nullptr;
  Shape shape;

  ConstTensorView() = default;
  ConstTensorView(const float* d, Shape s) : data(d), shape(s) {}
  ConstTensorView(TensorView v) : data(v.data), shape(v.shape) {}  // NOLINT: implicit on purpose
  bool empty() const { return data == nullptr; }
  std::int64_t numel() const { return shape.numel(); }
};

// Owning fp32 host tensor, zero-initialised.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape) : shape_(shape), data_(static_cast<std::size_t>(shape.numel())) {}
  Tensor(Shape shape, std::vector<float> values);  // throws InputError on a size mismatch

  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return shape_.numel(); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  float& operator[](std::int64_t i) { return data_[static_cast<std::size_t>(i)]; }
  float operator[](std::int64_t i) const { return data_[static_cast<std::size_t>(i)]; }
  std::vector<float>& values() { return data_; }
  const std::vector<float>& values() const { return data_; }

  TensorView view() { return {data_.data(), shape_}; }
  ConstTensorView view() const { return {data_.data(), shape_}; }
  operator TensorView() { return view(); }             // NOLINT: implicit on purpose
  operator ConstTensorView() const { return view(); }  // NOLINT: implicit on purpose

  void fill(float value);

 private:
  Shape shape_;
  std::vector<float> data_;
};

}  // namespace pipetune::tensor
