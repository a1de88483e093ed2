// LayerNorm on the CPU (llm.c formulation), input and weight gradients split.
//
// Forward and input backward are per row: the pool splits the rows. The weight backward sums
// over rows, so the pool splits the COLUMNS instead and every thread walks all rows in order:
// each dw[c], db[c] gets exactly the serial sum, whatever the thread count.
#include <cmath>

#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

using cpu::kVec;
using cpu::Vec16;

constexpr std::int64_t kRowGrain = 16;     // rows per scheduling unit
constexpr std::int64_t kColumnGrain = 64;  // columns per unit of the weight gradient

PIPETUNE_CPU_KERNEL void forward_rows(const float* x, const float* w, const float* b, float* y,
                                      float* mean, float* rstd, std::int64_t n0, std::int64_t n1,
                                      std::int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  for (std::int64_t n = n0; n < n1; ++n) {
    const float* xr = x + n * C;  // (C)
    const float m = cpu::row_sum(xr, C) * inv_c;
    Vec16 acc = {};
    std::int64_t c = 0;
    for (; c + kVec <= C; c += kVec) {
      const Vec16 d = cpu::load16(xr + c) - m;
      acc += d * d;
    }
    if (c < C) {
      const Vec16 d = cpu::load_tail(xr, c, C, m) - m;  // padding lanes give 0
      acc += d * d;
    }
    const float var = cpu::lanes_sum(acc) * inv_c;
    const float s = 1.0f / std::sqrt(var + kLayerNormEps);
    float* yr = y + n * C;  // (C)
    for (std::int64_t k = 0; k < C; ++k) yr[k] = (xr[k] - m) * s * w[k] + b[k];
    mean[n] = m;
    rstd[n] = s;
  }
}

PIPETUNE_CPU_KERNEL void backward_input_rows(const float* dy, const float* x, const float* w,
                                             const float* mean, const float* rstd,
                                             const float* residual, float* dx, std::int64_t n0,
                                             std::int64_t n1, std::int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  for (std::int64_t n = n0; n < n1; ++n) {
    const float* xr = x + n * C;         // (C)
    const float* dyr = dy + n * C;       // (C)
    const float* rr = residual + n * C;  // (C), may be dxr
    float* dxr = dx + n * C;             // (C)
    const float m = mean[n], s = rstd[n];
    // dx = residual + rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w
    Vec16 acc_d = {}, acc_dn = {};
    std::int64_t c = 0;
    for (; c + kVec <= C; c += kVec) {
      const Vec16 norm = (cpu::load16(xr + c) - m) * s;
      const Vec16 dnorm = cpu::load16(dyr + c) * cpu::load16(w + c);
      acc_d += dnorm;
      acc_dn += dnorm * norm;
    }
    if (c < C) {  // padding lanes: dnorm = 0, norm = 0
      const Vec16 norm = (cpu::load_tail(xr, c, C, m) - m) * s;
      const Vec16 dnorm = cpu::load_tail(dyr, c, C, 0.0f) * cpu::load_tail(w, c, C, 0.0f);
      acc_d += dnorm;
      acc_dn += dnorm * norm;
    }
    const float dnorm_mean = cpu::lanes_sum(acc_d) * inv_c;
    const float dnorm_norm_mean = cpu::lanes_sum(acc_dn) * inv_c;
    for (std::int64_t k = 0; k < C; ++k) {
      const float norm = (xr[k] - m) * s;
      const float dnorm = dyr[k] * w[k];
      dxr[k] = rr[k] + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

// dw[c0:c1] += sum_n dy[n, c] * norm[n, c], db[c0:c1] += sum_n dy[n, c], rows in order.
PIPETUNE_CPU_KERNEL void backward_weight_columns(const float* dy, const float* x, const float* mean,
                                                 const float* rstd, float* dw, float* db,
                                                 std::int64_t N, std::int64_t C, std::int64_t c0,
                                                 std::int64_t c1) {
  for (std::int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;    // (C)
    const float* dyr = dy + n * C;  // (C)
    const float m = mean[n], s = rstd[n];
    for (std::int64_t c = c0; c < c1; ++c) {
      dw[c] += dyr[c] * ((xr[c] - m) * s);
      db[c] += dyr[c];
    }
  }
}

}  // namespace

void CpuBackend::do_layernorm_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                      TensorView y, TensorView mean, TensorView rstd) {
  const std::int64_t N = x.shape.rows(), C = x.shape.last();
  pool_.parallel_for(N, kRowGrain, [&](std::int64_t n0, std::int64_t n1, int) {
    forward_rows(x.data, w.data, b.data, y.data, mean.data, rstd.data, n0, n1, C);
  });
}

void CpuBackend::do_layernorm_backward_input(ConstTensorView dy, ConstTensorView x,
                                             ConstTensorView w, ConstTensorView mean,
                                             ConstTensorView rstd, ConstTensorView residual,
                                             TensorView dx) {
  const std::int64_t N = x.shape.rows(), C = x.shape.last();
  pool_.parallel_for(N, kRowGrain, [&](std::int64_t n0, std::int64_t n1, int) {
    backward_input_rows(dy.data, x.data, w.data, mean.data, rstd.data, residual.data, dx.data, n0,
                        n1, C);
  });
}

void CpuBackend::do_layernorm_backward_weight(ConstTensorView dy, ConstTensorView x,
                                              ConstTensorView mean, ConstTensorView rstd,
                                              TensorView dw, TensorView db) {
  const std::int64_t N = x.shape.rows(), C = x.shape.last();
  pool_.parallel_for(C, kColumnGrain, [&](std::int64_t c0, std::int64_t c1, int) {
    backward_weight_columns(dy.data, x.data, mean.data, rstd.data, dw.data, db.data, N, C, c0, c1);
  });
}

}  // namespace pipetune::tensor
