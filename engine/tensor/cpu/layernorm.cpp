// LayerNorm on the CPU (llm.c formulation), input and weight gradients split.
#include <cmath>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

void CpuBackend::do_layernorm_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                      TensorView y, TensorView mean, TensorView rstd) {
  const std::int64_t N = x.shape.rows(), C = x.shape.last();
  for (std::int64_t n = 0; n < N; ++n) {
    const float* xr = x.data + n * C;  // (C)
    float m = 0.0f;
    for (std::int64_t c = 0; c < C; ++c) m += xr[c];
    m /= static_cast<float>(C);
    float var = 0.0f;
    for (std::int64_t c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
    var /= static_cast<float>(C);
    const float s = 1.0f / std::sqrt(var + kLayerNormEps);
    float* yr = y.data + n * C;  // (C)
    for (std::int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * w.data[c] + b.data[c];
    mean.data[n] = m;
    rstd.data[n] = s;
  }
}

void CpuBackend::do_layernorm_backward_input(ConstTensorView dy, ConstTensorView x,
                                             ConstTensorView w, ConstTensorView mean,
                                             ConstTensorView rstd, TensorView dx) {
  const std::int64_t N = x.shape.rows(), C = x.shape.last();
  for (std::int64_t n = 0; n < N; ++n) {
    const float* xr = x.data + n * C;    // (C)
    const float* dyr = dy.data + n * C;  // (C)
    float* dxr = dx.data + n * C;        // (C)
    const float m = mean.data[n], s = rstd.data[n];
    // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (std::int64_t c = 0; c < C; ++c) {
      const float norm = (xr[c] - m) * s;
      const float dnorm = dyr[c] * w.data[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_norm_mean /= static_cast<float>(C);
    for (std::int64_t c = 0; c < C; ++c) {
      const float norm = (xr[c] - m) * s;
      const float dnorm = dyr[c] * w.data[c];
      dxr[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

void CpuBackend::do_layernorm_backward_weight(ConstTensorView dy, ConstTensorView x,
                                              ConstTensorView mean, ConstTensorView rstd,
                                              TensorView dw, TensorView db) {
  const std::int64_t N = x.shape.rows(), C = x.shape.last();
  for (std::int64_t n = 0; n < N; ++n) {
    const float* xr = x.data + n * C;    // (C)
    const float* dyr = dy.data + n * C;  // (C)
    const float m = mean.data[n], s = rstd.data[n];
    for (std::int64_t c = 0; c < C; ++c) {
      dw.data[c] += dyr[c] * (xr[c] - m) * s;
      db.data[c] += dyr[c];
    }
  }
}

}  // namespace pipetune::tensor
