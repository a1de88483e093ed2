// Linear layer y = x W^T + b on the CPU: three sgemm calls (forward, dx, dW), Megatron layout.
//
// The sgemm calls use OpenBLAS's own threads (set_blas_threads). The bias terms use the
// backend's pool: the bias add splits the rows, the bias gradient splits the COLUMNS (each
// thread sums all rows in order over its columns, so db is the serial sum for any thread count).

#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/openblas_library.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

constexpr std::int64_t kRowGrain = 16;     // rows per scheduling unit (bias add)
constexpr std::int64_t kColumnGrain = 64;  // columns per scheduling unit (bias gradient)

blasint bl(std::int64_t v) {
  return static_cast<blasint>(v);
}

PIPETUNE_CPU_KERNEL void bias_add_rows(float* y, const float* b, std::int64_t OUT, std::int64_t n0,
                                       std::int64_t n1) {
  for (std::int64_t n = n0; n < n1; ++n) {
    float* yr = y + n * OUT;  // (OUT)
    for (std::int64_t o = 0; o < OUT; ++o) yr[o] += b[o];
  }
}

PIPETUNE_CPU_KERNEL void bias_grad_columns(const float* dy, float* db, std::int64_t N,
                                           std::int64_t OUT, std::int64_t o0, std::int64_t o1) {
  for (std::int64_t n = 0; n < N; ++n) {
    const float* dyr = dy + n * OUT;  // (OUT)
    for (std::int64_t o = o0; o < o1; ++o) db[o] += dyr[o];
  }
}

}  // namespace

void CpuBackend::do_linear_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                   TensorView y) {
  const std::int64_t N = x.shape.rows(), IN = w.shape[1], OUT = w.shape[0];
  // x (N, IN), w (OUT, IN), y (N, OUT) = x w^T
  openblas().sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bl(N), bl(OUT), bl(IN), 1.0f, x.data,
                   bl(IN), w.data, bl(IN), 0.0f, y.data, bl(OUT));
  if (!b.empty()) {
    pool_.parallel_for(N, kRowGrain, [&](std::int64_t n0, std::int64_t n1, int) {
      bias_add_rows(y.data, b.data, OUT, n0, n1);
    });
  }
}

void CpuBackend::do_linear_backward_input(ConstTensorView dy, ConstTensorView w, TensorView dx,
                                          GradientWrite write) {
  const std::int64_t N = dy.shape.rows(), IN = w.shape[1], OUT = w.shape[0];
  // dx (N, IN) (+)= dy (N, OUT) w (OUT, IN); beta 0 sets C without reading it (BLAS's rule)
  const float beta = write == GradientWrite::overwrite ? 0.0f : 1.0f;
  openblas().sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bl(N), bl(IN), bl(OUT), 1.0f, dy.data,
                   bl(OUT), w.data, bl(IN), beta, dx.data, bl(IN));
}

void CpuBackend::do_linear_backward_weight(ConstTensorView dy, ConstTensorView x, TensorView dw,
                                           TensorView db) {
  const std::int64_t N = dy.shape.rows(), IN = dw.shape[1], OUT = dw.shape[0];
  // dw (OUT, IN) += dy^T (OUT, N) x (N, IN)
  openblas().sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bl(OUT), bl(IN), bl(N), 1.0f, dy.data,
                   bl(OUT), x.data, bl(IN), 1.0f, dw.data, bl(IN));
  if (!db.empty()) {
    pool_.parallel_for(OUT, kColumnGrain, [&](std::int64_t o0, std::int64_t o1, int) {
      bias_grad_columns(dy.data, db.data, N, OUT, o0, o1);
    });
  }
}

}  // namespace pipetune::tensor
