// CpuBackend: BLAS thread control and the elementwise ops.
#include "engine/tensor/cpu/cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>

namespace pipetune::tensor {

void set_blas_threads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
}

int blas_threads() {
  return openblas_get_num_threads();
}

void CpuBackend::do_zero(TensorView t) {
  std::fill_n(t.data, t.numel(), 0.0f);
}

void CpuBackend::do_scale(TensorView t, float s) {
  float* p = t.data;
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) p[i] *= s;
}

void CpuBackend::do_add(ConstTensorView a, ConstTensorView b, TensorView out) {
  const std::int64_t n = out.numel();
  for (std::int64_t i = 0; i < n; ++i) out.data[i] = a.data[i] + b.data[i];
}

void CpuBackend::do_accumulate(TensorView dst, ConstTensorView src) {
  const std::int64_t n = dst.numel();
  for (std::int64_t i = 0; i < n; ++i) dst.data[i] += src.data[i];
}

}  // namespace pipetune::tensor
