// Token + position embedding on the CPU, full or vocabulary-range-sharded.
//
// Forward splits the token rows across the pool. The backward scatter-add can hit one table row
// from many tokens, so it splits the CHANNELS instead: every thread walks all tokens in order
// over its column range, and each gradient element gets exactly the serial sum.
#include <algorithm>

#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

constexpr std::int64_t kRowGrain = 16;     // tokens per scheduling unit (forward)
constexpr std::int64_t kColumnGrain = 64;  // channels per scheduling unit (backward)

PIPETUNE_CPU_KERNEL void forward_rows(const std::int32_t* tokens, const float* wte,
                                      std::int64_t rows, std::int64_t vocab_lo, const float* wpe,
                                      float* out, std::int64_t T, std::int64_t C, std::int64_t n0,
                                      std::int64_t n1) {
  for (std::int64_t n = n0; n < n1; ++n) {
    float* o = out + n * C;  // (C)
    const std::int64_t id = tokens[n] - vocab_lo;
    const bool in_shard = id >= 0 && id < rows;
    if (wpe != nullptr) {
      const float* p = wpe + (n % T) * C;  // (C)
      if (in_shard) {
        const float* e = wte + id * C;  // (C)
        for (std::int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
      } else {
        for (std::int64_t c = 0; c < C; ++c) o[c] = 0.0f + p[c];
      }
    } else if (in_shard) {
      std::copy_n(wte + id * C, C, o);
    } else {
      std::fill_n(o, C, 0.0f);
    }
  }
}

PIPETUNE_CPU_KERNEL void backward_columns(const std::int32_t* tokens, const float* dout,
                                          std::int64_t rows, std::int64_t vocab_lo, float* dwte,
                                          float* dwpe, std::int64_t N, std::int64_t T,
                                          std::int64_t C, std::int64_t c0, std::int64_t c1) {
  for (std::int64_t n = 0; n < N; ++n) {
    const float* d = dout + n * C;  // (C)
    const std::int64_t id = tokens[n] - vocab_lo;
    if (id >= 0 && id < rows) {
      float* g = dwte + id * C;  // (C)
      for (std::int64_t c = c0; c < c1; ++c) g[c] += d[c];
    }
    if (dwpe != nullptr) {
      float* g = dwpe + (n % T) * C;  // (C)
      for (std::int64_t c = c0; c < c1; ++c) g[c] += d[c];
    }
  }
}

}  // namespace

void CpuBackend::do_embedding_forward(std::span<const std::int32_t> tokens, ConstTensorView wte,
                                      std::int64_t vocab_lo, ConstTensorView wpe, TensorView out) {
  const std::int64_t B = out.shape[0], T = out.shape[1], C = out.shape[2];
  const std::int64_t rows = wte.shape[0];  // this shard holds ids [vocab_lo, vocab_lo + rows)
  pool_.parallel_for(B * T, kRowGrain, [&](std::int64_t n0, std::int64_t n1, int) {
    forward_rows(tokens.data(), wte.data, rows, vocab_lo, wpe.data, out.data, T, C, n0, n1);
  });
}

void CpuBackend::do_embedding_backward_weight(std::span<const std::int32_t> tokens,
                                              ConstTensorView dout, std::int64_t vocab_lo,
                                              TensorView dwte, TensorView dwpe) {
  const std::int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  const std::int64_t rows = dwte.shape[0];
  pool_.parallel_for(C, kColumnGrain, [&](std::int64_t c0, std::int64_t c1, int) {
    backward_columns(tokens.data(), dout.data, rows, vocab_lo, dwte.data, dwpe.data, B * T, T, C,
                     c0, c1);
  });
}

}  // namespace pipetune::tensor
