// Shape, Tensor and the checked-call macro.
#include <gtest/gtest.h>

#include "engine/errors.hpp"
#include "engine/tensor/check.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::tensor {
namespace {

TEST(TensorShape, NumelRowsAndString) {
  const Shape s{4, 64, 768};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 4 * 64 * 768);
  EXPECT_EQ(s.rows(), 4 * 64);
  EXPECT_EQ(s.last(), 768);
  EXPECT_EQ(s.str(), "(4, 64, 768)");
  EXPECT_EQ(s, (Shape{4, 64, 768}));
  EXPECT_FALSE(s == (Shape{4, 64 * 768}));
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), InputError);
  EXPECT_THROW((Shape{2, -1}), InputError);
}

TEST(TensorTensor, OwnsZeroedValuesAndViews) {
  Tensor t(Shape{2, 3});
  EXPECT_EQ(t.numel(), 6);
  for (float v : t.values()) EXPECT_EQ(v, 0.0f);
  TensorView v = t;
  v.data[4] = 7.0f;
  EXPECT_EQ(t[4], 7.0f);
  const ConstTensorView cv = t.view();
  EXPECT_EQ(cv.shape, t.shape());
  EXPECT_TRUE(ConstTensorView{}.empty());
  EXPECT_THROW(Tensor(Shape{2, 2}, {1.0f, 2.0f}), InputError);
}

TEST(TensorCheck, MessageNamesOpFileAndLine) {
  try {
    PIPETUNE_TENSOR_CHECK(1 + 1 == 3, "my_op", std::string("x (1, 2) is wrong"));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("my_op: x (1, 2) is wrong [tensor_test.cpp:", 0), 0u) << msg;
  }
}

}  // namespace
}  // namespace pipetune::tensor
