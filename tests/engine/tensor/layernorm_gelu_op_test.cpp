// LayerNorm and GELU through the Backend interface, against closed forms in double (at sizes a
// device backend splits into blocks, too) and finite differences.
#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::tensor::testing {
namespace {

class LayerNormOpTest : public BackendTest {};

TEST_P(LayerNormOpTest, ForwardNormalisesEachRow) {
  const std::int64_t N = 4, C = 8;
  Tensor x = random_tensor({N, C}, rng, 3.0f);
  Tensor w({C}), b({C});
  w.fill(1.0f);
  Tensor y({N, C}), mean({N}), rstd({N});
  be().layernorm_forward(x, w, b, y, mean, rstd);
  for (std::int64_t n = 0; n < N; ++n) {
    double m = 0.0, v = 0.0, xm = 0.0;
    for (std::int64_t c = 0; c < C; ++c) {
      m += y[n * C + c];
      v += static_cast<double>(y[n * C + c]) * y[n * C + c];
      xm += x[n * C + c];
    }
    EXPECT_NEAR(m / C, 0.0, 1e-5);
    EXPECT_NEAR(v / C, 1.0, 1e-3);
    EXPECT_NEAR(mean[n], xm / C, 1e-5);
  }
}

TEST_P(LayerNormOpTest, BackwardMatchesFiniteDifferences) {
  const std::int64_t B = 2, T = 3, C = 6;
  Tensor x = random_tensor({B, T, C}, rng);  // (B, T, C)
  Tensor w = random_tensor({C}, rng);
  Tensor b = random_tensor({C}, rng);
  Tensor r = random_tensor({B, T, C}, rng);
  auto loss = [&] {
    Tensor y({B, T, C}), mean({B * T}), rstd({B * T});
    be().layernorm_forward(x, w, b, y, mean, rstd);
    return dot(y, r);
  };
  Tensor y({B, T, C}), mean({B * T}), rstd({B * T});
  be().layernorm_forward(x, w, b, y, mean, rstd);
  Tensor dx({B, T, C}), dw({C}), db({C});
  be().layernorm_backward_input(r, x, w, mean, rstd, dx);
  be().layernorm_backward_weight(r, x, mean, rstd, dw, db);
  EXPECT_TRUE(grad_close("dx", dx, numeric_grad(loss, x, 1e-3f), 2e-2));
  EXPECT_TRUE(grad_close("dw", dw, numeric_grad(loss, w)));
  EXPECT_TRUE(grad_close("db", db, numeric_grad(loss, b)));
}

// LayerNorm in double: y, mean and rstd of the forward; the backward's dx, dw and db added to
// what they held (llm.c's formulas: dx += rstd (w dy - mean(w dy) - xhat mean(w dy xhat))).
struct LayerNormReference {
  std::vector<float> y, mean, rstd, dx, dw, db;
};
LayerNormReference layernorm_reference(const Tensor& x, const Tensor& w, const Tensor& b,
                                       const Tensor& dy, const Tensor& dx0, const Tensor& dw0,
                                       const Tensor& db0) {
  const std::int64_t C = x.shape().last(), N = x.numel() / C;
  LayerNormReference r{std::vector<float>(x.numel()), {}, {}, dx0.values(), {}, {}};
  std::vector<double> dw(dw0.values().begin(), dw0.values().end());
  std::vector<double> db(db0.values().begin(), db0.values().end());
  for (std::int64_t n = 0; n < N; ++n) {
    const float* xr = x.data() + n * C;
    const float* dyr = dy.data() + n * C;
    double mean = 0.0, var = 0.0;
    for (std::int64_t c = 0; c < C; ++c) mean += xr[c];
    mean /= static_cast<double>(C);
    for (std::int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(C) + kLayerNormEps);
    r.mean.push_back(static_cast<float>(mean));
    r.rstd.push_back(static_cast<float>(rstd));
    double dnorm_mean = 0.0, dnorm_xhat_mean = 0.0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double xhat = (xr[c] - mean) * rstd;
      r.y[n * C + c] = static_cast<float>(xhat * w[c] + b[c]);
      dnorm_mean += static_cast<double>(w[c]) * dyr[c];
      dnorm_xhat_mean += static_cast<double>(w[c]) * dyr[c] * xhat;
      dw[c] += dyr[c] * xhat;
      db[c] += dyr[c];
    }
    dnorm_mean /= static_cast<double>(C);
    dnorm_xhat_mean /= static_cast<double>(C);
    for (std::int64_t c = 0; c < C; ++c) {
      const double xhat = (xr[c] - mean) * rstd;
      r.dx[n * C + c] += static_cast<float>(
          rstd * (static_cast<double>(w[c]) * dyr[c] - dnorm_mean - xhat * dnorm_xhat_mean));
    }
  }
  r.dw.assign(dw.begin(), dw.end());
  r.db.assign(db.begin(), db.end());
  return r;
}

// One row of one channel, rows longer than a warp, GPT-2's width; gradients that already hold
// values (the backward accumulates).
TEST_P(LayerNormOpTest, ForwardAndBackwardMatchADoubleReference) {
  for (const auto& [N, C] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {264, 100}, {256, 768}}) {
    const Tensor x = random_tensor({N, C}, rng, 2.0f), w = random_tensor({C}, rng);
    const Tensor b = random_tensor({C}, rng), dy = random_tensor({N, C}, rng);
    const Tensor dx0 = random_tensor({N, C}, rng), dw0 = random_tensor({C}, rng);
    const Tensor db0 = random_tensor({C}, rng);
    Tensor y({N, C}), mean({N}), rstd({N}), dx = dx0, dw = dw0, db = db0;
    be().layernorm_forward(x, w, b, y, mean, rstd);
    be().layernorm_backward_input(dy, x, w, mean, rstd, dx);
    be().layernorm_backward_weight(dy, x, mean, rstd, dw, db);
    const LayerNormReference want = layernorm_reference(x, w, b, dy, dx0, dw0, db0);
    const std::string at = " (N " + std::to_string(N) + ", C " + std::to_string(C) + ")";
    const auto close = [&](const std::string& name, const Tensor& got,
                           const std::vector<float>& expected) {
      return all_close_reduction(name + at, got.values(), expected, 1e-5, 1e-5 * max_abs(expected));
    };
    EXPECT_TRUE(close("y", y, want.y));
    EXPECT_TRUE(close("mean", mean, want.mean));
    EXPECT_TRUE(close("rstd", rstd, want.rstd));
    EXPECT_TRUE(close("dx", dx, want.dx));
    EXPECT_TRUE(close("dw", dw, want.dw));
    EXPECT_TRUE(close("db", db, want.db));
  }
}

// dx = residual + the input gradient in one pass equals copying the residual into dx and adding
// the gradient there (what the transformer block did before), bit for bit on the CPU, over a dx
// of NaN; and residual = dx is the plain accumulation.
TEST_P(LayerNormOpTest, BackwardWithAResidualIsTheResidualPlusTheGradient) {
  for (const auto& [N, C] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {7, 6}, {37, 100}}) {
    const Tensor x = random_tensor({N, C}, rng), w = random_tensor({C}, rng);
    const Tensor b = random_tensor({C}, rng), dy = random_tensor({N, C}, rng);
    const Tensor residual = random_tensor({N, C}, rng);
    Tensor y({N, C}), mean({N}), rstd({N});
    be().layernorm_forward(x, w, b, y, mean, rstd);
    Tensor copied = residual;  // the copy, then the gradient added
    be().layernorm_backward_input(dy, x, w, mean, rstd, copied);
    Tensor joined({N, C});
    for (float& v : joined.values()) v = std::nanf("");
    be().layernorm_backward_input(dy, x, w, mean, rstd, joined, residual);
    Tensor itself = residual;
    be().layernorm_backward_input(dy, x, w, mean, rstd, itself, itself);
    const std::string at = " (N " + std::to_string(N) + ", C " + std::to_string(C) + ")";
    EXPECT_TRUE(all_close_elementwise("residual apart" + at, joined.values(), copied.values()));
    EXPECT_TRUE(all_close_elementwise("residual = dx" + at, itself.values(), copied.values()));
  }
  Tensor x({2, 3}), w({3}), mean({2}), rstd({2}), dx({2, 3}), bad({3, 2});
  EXPECT_THROW(be().layernorm_backward_input(x, x, w, mean, rstd, dx, bad), InputError);
}

INSTANTIATE_TEST_SUITE_P(Backends, LayerNormOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

class GeluOpTest : public BackendTest {};

TEST_P(GeluOpTest, ForwardMatchesTanhApproximation) {
  Tensor x({5}, {-3.0f, -1.0f, 0.0f, 0.5f, 2.0f});
  Tensor y({5});
  be().gelu_forward(x, y);
  std::vector<float> expected;
  for (float v : x.values()) {
    const double u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
    expected.push_back(static_cast<float>(0.5 * v * (1.0 + std::tanh(u))));
  }
  EXPECT_TRUE(all_close_elementwise("gelu", y.values(), expected, 1e-6, 1e-7));
}

// 7000 values (a device backend's vector loads and their tails) against the tanh formula and its
// derivative in double; the backward adds to what dx held.
TEST_P(GeluOpTest, ForwardAndBackwardMatchTheFormulaInDouble) {
  const Tensor x = random_tensor({7, 1000}, rng, 3.0f), dy = random_tensor({7, 1000}, rng);
  const Tensor dx0 = random_tensor({7, 1000}, rng);
  Tensor y({7, 1000}), dx = dx0;
  be().gelu_forward(x, y);
  be().gelu_backward_input(dy, x, dx);
  const double k = std::sqrt(2.0 / M_PI);
  std::vector<float> want_y, want_dx;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double v = x[i], th = std::tanh(k * (v + 0.044715 * v * v * v));
    want_y.push_back(static_cast<float>(0.5 * v * (1.0 + th)));
    const double grad =
        0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * v * v);
    want_dx.push_back(static_cast<float>(dx0[i] + grad * dy[i]));
  }
  EXPECT_TRUE(all_close_elementwise("y", y.values(), want_y, 1e-5, 1e-5 * max_abs(want_y)));
  EXPECT_TRUE(all_close_elementwise("dx", dx.values(), want_dx, 1e-5, 1e-5 * max_abs(want_dx)));
}

TEST_P(GeluOpTest, BackwardMatchesFiniteDifferences) {
  Tensor x = random_tensor({3, 7}, rng, 2.0f);
  Tensor r = random_tensor({3, 7}, rng);
  auto loss = [&] {
    Tensor y({3, 7});
    be().gelu_forward(x, y);
    return dot(y, r);
  };
  Tensor dx({3, 7});
  be().gelu_backward_input(r, x, dx);
  EXPECT_TRUE(grad_close("dx", dx, numeric_grad(loss, x, 1e-3f)));
}

// GradientWrite::overwrite: dx = gelu'(x) dy whatever dx held (NaN here: never read).
TEST_P(GeluOpTest, BackwardOverwriteIgnoresWhatDxHeld) {
  Tensor x = random_tensor({5, 9}, rng, 2.0f), dy = random_tensor({5, 9}, rng);
  Tensor want({5, 9}), got({5, 9});
  for (std::int64_t i = 0; i < got.numel(); ++i) got[i] = NAN;
  be().gelu_backward_input(dy, x, want);
  be().gelu_backward_input(dy, x, got, GradientWrite::overwrite);
  EXPECT_TRUE(all_close_elementwise("dx overwritten", got.values(), want.values()));
}

// In place (dx is dy), as the MLPs call it: the same values as into a separate buffer.
TEST_P(GeluOpTest, BackwardInPlaceOverDyMatchesASeparateOutput) {
  Tensor x = random_tensor({4, 1000}, rng, 2.0f), dy = random_tensor({4, 1000}, rng);
  Tensor want({4, 1000}), in_place = dy;
  be().gelu_backward_input(dy, x, want, GradientWrite::overwrite);
  be().gelu_backward_input(in_place, x, in_place, GradientWrite::overwrite);
  EXPECT_TRUE(all_close_elementwise("dx in place", in_place.values(), want.values()));
}

// Each value through the same operations wherever a buffer starts or ends: the CPU kernels'
// vectorized loops and their scalar remainders give the same bits (pieces of 1, 2, ..., 40).
TEST_P(GeluOpTest, AValueIsTheSameWhereverTheBufferIsCut) {
  const std::int64_t n = 40 * 41 / 2;
  const Tensor x = random_tensor({n}, rng, 3.0f), dy = random_tensor({n}, rng);
  const Tensor dx0 = random_tensor({n}, rng);
  Tensor y({n}), y_cut({n}), dx = dx0, dx_cut = dx0, dx_over({n}), dx_over_cut({n});
  be().gelu_forward(x, y);
  be().gelu_backward_input(dy, x, dx);
  be().gelu_backward_input(dy, x, dx_over, GradientWrite::overwrite);
  for (std::int64_t begin = 0, len = 1; begin < n; begin += len, ++len) {
    const Shape shape{len};
    const ConstTensorView xs{x.data() + begin, shape}, dys{dy.data() + begin, shape};
    be().gelu_forward(xs, {y_cut.data() + begin, shape});
    be().gelu_backward_input(dys, xs, {dx_cut.data() + begin, shape});
    be().gelu_backward_input(dys, xs, {dx_over_cut.data() + begin, shape},
                             GradientWrite::overwrite);
  }
  const double tol = bit_exact() ? 0.0 : 1e-6;
  EXPECT_TRUE(all_close("y", y_cut.values(), y.values(), tol, tol));
  EXPECT_TRUE(all_close("dx", dx_cut.values(), dx.values(), tol, tol));
  EXPECT_TRUE(all_close("dx overwritten", dx_over_cut.values(), dx_over.values(), tol, tol));
}

INSTANTIATE_TEST_SUITE_P(Backends, GeluOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

class ElementwiseOpTest : public BackendTest {};

TEST_P(ElementwiseOpTest, AddAccumulateScaleZero) {
  Tensor a({2, 2}, {1, 2, 3, 4}), b({2, 2}, {10, 20, 30, 40}), out({2, 2});
  be().add(a, b, out);
  EXPECT_TRUE(all_close("add", out.values(), {11, 22, 33, 44}, 0, 0));
  be().accumulate(out, a);
  EXPECT_TRUE(all_close("accumulate", out.values(), {12, 24, 36, 48}, 0, 0));
  be().scale(out, 0.5f);
  EXPECT_TRUE(all_close("scale", out.values(), {6, 12, 18, 24}, 0, 0));
  be().zero(out);
  EXPECT_TRUE(all_close("zero", out.values(), {0, 0, 0, 0}, 0, 0));
  Tensor wrong({4});
  EXPECT_THROW(be().add(a, wrong, out), InputError);
}

TEST_P(ElementwiseOpTest, FillColumnsFromAColumnToTheEnd) {
  Tensor t({2, 3}, {1, 2, 3, 4, 5, 6});
  be().fill_columns(t, 1, -7.0f);
  EXPECT_TRUE(all_close("fill_columns", t.values(), {1, -7, -7, 4, -7, -7}, 0, 0));
  be().fill_columns(t, 3, 9.0f);  // no column: nothing changes
  EXPECT_TRUE(all_close("fill_columns (none)", t.values(), {1, -7, -7, 4, -7, -7}, 0, 0));
  EXPECT_THROW(be().fill_columns(t, 4, 0.0f), InputError);
  Tensor flat({6});
  EXPECT_THROW(be().fill_columns(flat, 1, 0.0f), InputError);
}

INSTANTIATE_TEST_SUITE_P(Backends, ElementwiseOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

}  // namespace
}  // namespace pipetune::tensor::testing
