// Linear layer through the Backend interface: forward against a naive loop, dx and dW/db against
// central finite differences, accumulation, and shape errors. Identities between ops hold bit
// for bit on the CPU; a device backend's GEMMs may round otherwise (its reduction floor).
#include "tests/engine/tensor/backend_test_support.hpp"

#include "engine/errors.hpp"

namespace pipetune::tensor::testing {
namespace {

class LinearOpTest : public BackendTest {};

TEST_P(LinearOpTest, ForwardMatchesNaiveLoop) {
  const std::int64_t B = 2, T = 3, IN = 5, OUT = 4;
  Tensor x = random_tensor({B, T, IN}, rng);  // (B, T, IN)
  Tensor w = random_tensor({OUT, IN}, rng);   // (OUT, IN)
  Tensor b = random_tensor({OUT}, rng);       // (OUT)
  Tensor y({B, T, OUT});                      // (B, T, OUT)
  be().linear_forward(x, w, b, y);
  std::vector<float> expected;
  for (std::int64_t n = 0; n < B * T; ++n) {
    for (std::int64_t o = 0; o < OUT; ++o) {
      double s = b[o];
      for (std::int64_t i = 0; i < IN; ++i) s += static_cast<double>(x[n * IN + i]) * w[o * IN + i];
      expected.push_back(static_cast<float>(s));
    }
  }
  EXPECT_TRUE(all_close_reduction("y", y.values(), expected, 1e-5, 1e-5));

  Tensor y_nobias({B * T, OUT});  // (N, OUT): leading dims may be flattened
  be().linear_forward(x, w, ConstTensorView{}, y_nobias);
  for (std::int64_t n = 0; n < B * T; ++n) {
    for (std::int64_t o = 0; o < OUT; ++o) expected[n * OUT + o] -= b[o];
  }
  EXPECT_TRUE(all_close_reduction("y without bias", y_nobias.values(), expected, 1e-5, 1e-5));
}

TEST_P(LinearOpTest, BackwardMatchesFiniteDifferences) {
  const std::int64_t N = 6, IN = 5, OUT = 3;
  Tensor x = random_tensor({N, IN}, rng);
  Tensor w = random_tensor({OUT, IN}, rng);
  Tensor b = random_tensor({OUT}, rng);
  Tensor r = random_tensor({N, OUT}, rng);  // random projection: L = sum(y * r), dL/dy = r
  auto loss = [&] {
    Tensor y({N, OUT});
    be().linear_forward(x, w, b, y);
    return dot(y, r);
  };
  Tensor dx({N, IN}), dw({OUT, IN}), db({OUT});
  be().linear_backward_input(r, w, dx);
  be().linear_backward_weight(r, x, dw, db);
  EXPECT_TRUE(grad_close("dx", dx, numeric_grad(loss, x)));
  EXPECT_TRUE(grad_close("dw", dw, numeric_grad(loss, w)));
  EXPECT_TRUE(grad_close("db", db, numeric_grad(loss, b)));
}

TEST_P(LinearOpTest, BackwardAccumulates) {
  Tensor x = random_tensor({4, 3}, rng), w = random_tensor({2, 3}, rng);
  Tensor dy = random_tensor({4, 2}, rng);
  Tensor dx1({4, 3}), dw1({2, 3}), db1({2});
  be().linear_backward_input(dy, w, dx1);
  be().linear_backward_weight(dy, x, dw1, db1);
  Tensor dx2 = dx1, dw2 = dw1, db2 = db1;
  be().linear_backward_input(dy, w, dx2);
  be().linear_backward_weight(dy, x, dw2, db2);
  for (auto* pair : {&dx1, &dw1, &db1}) be().scale(*pair, 2.0f);
  EXPECT_TRUE(all_close_reduction("dx twice", dx2.values(), dx1.values(), 1e-6, 1e-6));
  EXPECT_TRUE(all_close_reduction("dw twice", dw2.values(), dw1.values(), 1e-6, 1e-6));
  EXPECT_TRUE(all_close_reduction("db twice", db2.values(), db1.values(), 1e-6, 1e-6));
}

// GradientWrite::overwrite: dx = dy W whatever dx held (NaN here: never read), the same values
// as accumulating into zeros.
TEST_P(LinearOpTest, BackwardInputOverwriteIgnoresWhatDxHeld) {
  Tensor w = random_tensor({3, 5}, rng), dy = random_tensor({7, 3}, rng);
  Tensor want({7, 5}), got({7, 5});
  for (std::int64_t i = 0; i < got.numel(); ++i) got[i] = NAN;
  be().linear_backward_input(dy, w, want);
  be().linear_backward_input(dy, w, got, GradientWrite::overwrite);
  EXPECT_TRUE(all_close_reduction("dx overwritten", got.values(), want.values()));
}

// The fused linear + GELU ops. Forward: pre = x W^T + b and y = gelu(pre), as the two ops give
// them. Backward: for L = sum(r * (gelu(h) V^T)), dL/dh = gelu'(h) (r V), against central
// finite differences in h.
TEST_P(LinearOpTest, LinearGeluMatchesTheOpsAndFiniteDifferences) {
  const std::int64_t N = 5, IN = 4, HID = 6, OUT = 3;
  Tensor x = random_tensor({N, IN}, rng), w = random_tensor({HID, IN}, rng);
  Tensor b = random_tensor({HID}, rng);
  Tensor pre({N, HID}), y({N, HID}), pre_want({N, HID}), y_want({N, HID});
  be().linear_gelu_forward(x, w, b, pre, y);
  be().linear_forward(x, w, b, pre_want);
  be().gelu_forward(pre_want, y_want);
  EXPECT_TRUE(all_close_reduction("pre", pre.values(), pre_want.values()));
  EXPECT_TRUE(all_close_reduction("y", y.values(), y_want.values()));

  Tensor h = random_tensor({N, HID}, rng, 2.0f), v = random_tensor({OUT, HID}, rng);
  Tensor r = random_tensor({N, OUT}, rng);
  auto loss = [&] {
    Tensor g({N, HID}), z({N, OUT});
    be().gelu_forward(h, g);
    be().linear_forward(g, v, ConstTensorView{}, z);
    return dot(z, r);
  };
  Tensor dh({N, HID});
  for (std::int64_t i = 0; i < dh.numel(); ++i) dh[i] = NAN;  // written over, never read
  be().linear_gelu_backward_input(r, v, h, dh);
  EXPECT_TRUE(grad_close("dh", dh, numeric_grad(loss, h, 1e-3f)));
}

// Both gradients at once: the same values as linear_backward_input then linear_backward_weight, in
// either write mode, with and without a bias gradient; dw and db accumulate.
TEST_P(LinearOpTest, BackwardOfBothIsTheTwoOpsApart) {
  const std::int64_t N = 9, IN = 5, OUT = 4;
  const Tensor x = random_tensor({N, IN}, rng), w = random_tensor({OUT, IN}, rng);
  const Tensor dy = random_tensor({N, OUT}, rng);
  for (const GradientWrite write : {GradientWrite::overwrite, GradientWrite::accumulate}) {
    for (const bool bias : {true, false}) {
      const std::string at = std::string(write == GradientWrite::overwrite ? "overwrite" : "add") +
                             (bias ? ", bias" : ", no bias");
      const Tensor dx0 = random_tensor({N, IN}, rng), dw0 = random_tensor({OUT, IN}, rng);
      const Tensor db0 = random_tensor({OUT}, rng);
      Tensor dx_want = dx0, dw_want = dw0, db_want = db0;
      be().linear_backward_input(dy, w, dx_want, write);
      be().linear_backward_weight(dy, x, dw_want, bias ? TensorView(db_want) : TensorView{});
      Tensor dx = dx0, dw = dw0, db = db0;
      be().linear_backward(dy, x, w, dx, write, dw, bias ? TensorView(db) : TensorView{});
      EXPECT_TRUE(all_close_reduction("dx, " + at, dx.values(), dx_want.values()));
      EXPECT_TRUE(all_close_reduction("dw, " + at, dw.values(), dw_want.values()));
      EXPECT_TRUE(all_close_reduction("db, " + at, db.values(), db_want.values()));
    }
  }
  // x with other columns than w: refused, naming the op.
  Tensor bad_x({N, IN + 1}), dx({N, IN}), dw({OUT, IN});
  try {
    be().linear_backward(dy, bad_x, w, dx, GradientWrite::overwrite, dw, TensorView{});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("linear_backward"), std::string::npos) << e.what();
  }
}

// The MLP's second layer at once: linear_gelu_backward_input then linear_backward_weight, the same
// values; dpre written over (NaN never read), dw and db accumulate.
TEST_P(LinearOpTest, GeluBackwardOfBothIsTheTwoOpsApart) {
  const std::int64_t N = 7, HID = 6, OUT = 4;
  const Tensor pre = random_tensor({N, HID}, rng, 2.0f), w = random_tensor({OUT, HID}, rng);
  const Tensor dy = random_tensor({N, OUT}, rng);
  Tensor g({N, HID});
  be().gelu_forward(pre, g);  // the layer's input x
  for (const bool bias : {true, false}) {
    const Tensor dw0 = random_tensor({OUT, HID}, rng), db0 = random_tensor({OUT}, rng);
    Tensor dpre_want({N, HID}), dw_want = dw0, db_want = db0;
    be().linear_gelu_backward_input(dy, w, pre, dpre_want);
    be().linear_backward_weight(dy, g, dw_want, bias ? TensorView(db_want) : TensorView{});
    Tensor dpre({N, HID}), dw = dw0, db = db0;
    for (std::int64_t i = 0; i < dpre.numel(); ++i) dpre[i] = NAN;
    be().linear_gelu_backward(dy, g, w, pre, dpre, dw, bias ? TensorView(db) : TensorView{});
    const std::string at = bias ? " (bias)" : " (no bias)";
    EXPECT_TRUE(all_close_reduction("dpre" + at, dpre.values(), dpre_want.values()));
    EXPECT_TRUE(all_close_reduction("dw" + at, dw.values(), dw_want.values()));
    EXPECT_TRUE(all_close_reduction("db" + at, db.values(), db_want.values()));
  }
}

TEST_P(LinearOpTest, ShapeMismatchNamesOpAndShapes) {
  Tensor x({4, 3}), w({2, 5}), y({4, 2});
  try {
    be().linear_forward(x, w, ConstTensorView{}, y);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("linear_forward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(4, 3)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(2, 5)"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, LinearOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

}  // namespace
}  // namespace pipetune::tensor::testing
