// CpuBackend: construction, BLAS thread control and the elementwise ops.
#include "engine/tensor/cpu/cpu_backend.hpp"

#include <algorithm>

#include "engine/tensor/cpu/openblas_library.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

// Elementwise ops split flat ranges in units of this many floats (smaller tensors stay on the
// calling thread). A multiple of 16 keeps every part's start at the same vector alignment.
constexpr std::int64_t kElementGrain = 1 << 15;

PIPETUNE_CPU_KERNEL void scale_range(float* p, float s, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) p[i] *= s;
}

PIPETUNE_CPU_KERNEL void add_range(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

PIPETUNE_CPU_KERNEL void accumulate_range(float* dst, const float* src, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void set_blas_threads(int threads) {
  openblas().set_num_threads(std::max(1, threads));
}

int blas_threads() {
  return openblas().get_num_threads();
}

CpuIsa detected_cpu_isa() {
#if PIPETUNE_CPU_ISA_LEVELS
  if (__builtin_cpu_supports("x86-64-v4")) return CpuIsa::V4;
  if (__builtin_cpu_supports("x86-64-v3")) return CpuIsa::V3;
#endif
  return CpuIsa::Base;
}

CpuBackend::CpuBackend(int threads) : pool_(threads), isa_(detected_cpu_isa()) {
  scratch_.resize(static_cast<std::size_t>(pool_.size()));
}

void CpuBackend::limit_isa(CpuIsa max_level) {
  isa_ = std::min(detected_cpu_isa(), max_level);
}

void CpuBackend::reserve_scratch(std::size_t floats) {
  for (auto& s : scratch_) {
    if (s.size() < floats) s.resize(floats);
  }
}

void CpuBackend::do_zero(TensorView t) {
  pool_.parallel_for(t.numel(), kElementGrain, [&](std::int64_t i0, std::int64_t i1, int) {
    std::fill(t.data + i0, t.data + i1, 0.0f);
  });
}

void CpuBackend::do_scale(TensorView t, float s) {
  pool_.parallel_for(t.numel(), kElementGrain, [&](std::int64_t i0, std::int64_t i1, int) {
    scale_range(t.data + i0, s, i1 - i0);
  });
}

void CpuBackend::do_add(ConstTensorView a, ConstTensorView b, TensorView out) {
  pool_.parallel_for(out.numel(), kElementGrain, [&](std::int64_t i0, std::int64_t i1, int) {
    add_range(a.data + i0, b.data + i0, out.data + i0, i1 - i0);
  });
}

void CpuBackend::do_accumulate(TensorView dst, ConstTensorView src) {
  pool_.parallel_for(dst.numel(), kElementGrain, [&](std::int64_t i0, std::int64_t i1, int) {
    accumulate_range(dst.data + i0, src.data + i0, i1 - i0);
  });
}

void CpuBackend::do_fill_columns(TensorView t, std::int64_t col_lo, float value) {
  const std::int64_t rows = t.shape[0], cols = t.shape[1];
  for (std::int64_t r = 0; r < rows; ++r)
    std::fill(t.data + r * cols + col_lo, t.data + (r + 1) * cols, value);
}

}  // namespace pipetune::tensor
