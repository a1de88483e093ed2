// Linear layer y = x W^T + b on the CPU: three sgemm calls (forward, dx, dW), Megatron layout.
#include <cblas.h>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

namespace {
blasint bl(std::int64_t v) {
  return static_cast<blasint>(v);
}
}  // namespace

void CpuBackend::do_linear_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                   TensorView y) {
  const std::int64_t N = x.shape.rows(), IN = w.shape[1], OUT = w.shape[0];
  // x (N, IN), w (OUT, IN), y (N, OUT) = x w^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bl(N), bl(OUT), bl(IN), 1.0f, x.data, bl(IN),
              w.data, bl(IN), 0.0f, y.data, bl(OUT));
  if (!b.empty()) {
    for (std::int64_t n = 0; n < N; ++n) {
      float* yr = y.data + n * OUT;  // (OUT)
      for (std::int64_t o = 0; o < OUT; ++o) yr[o] += b.data[o];
    }
  }
}

void CpuBackend::do_linear_backward_input(ConstTensorView dy, ConstTensorView w, TensorView dx) {
  const std::int64_t N = dy.shape.rows(), IN = w.shape[1], OUT = w.shape[0];
  // dx (N, IN) += dy (N, OUT) w (OUT, IN)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bl(N), bl(IN), bl(OUT), 1.0f, dy.data,
              bl(OUT), w.data, bl(IN), 1.0f, dx.data, bl(IN));
}

void CpuBackend::do_linear_backward_weight(ConstTensorView dy, ConstTensorView x, TensorView dw,
                                           TensorView db) {
  const std::int64_t N = dy.shape.rows(), IN = dw.shape[1], OUT = dw.shape[0];
  // dw (OUT, IN) += dy^T (OUT, N) x (N, IN)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bl(OUT), bl(IN), bl(N), 1.0f, dy.data,
              bl(OUT), x.data, bl(IN), 1.0f, dw.data, bl(IN));
  if (!db.empty()) {
    for (std::int64_t n = 0; n < N; ++n) {
      const float* dyr = dy.data + n * OUT;  // (OUT)
      for (std::int64_t o = 0; o < OUT; ++o) db.data[o] += dyr[o];
    }
  }
}

}  // namespace pipetune::tensor
