// Token + position embedding on the CPU, full or vocabulary-range-sharded.
#include <algorithm>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

void CpuBackend::do_embedding_forward(std::span<const std::int32_t> tokens, ConstTensorView wte,
                                      std::int64_t vocab_lo, ConstTensorView wpe, TensorView out) {
  const std::int64_t B = out.shape[0], T = out.shape[1], C = out.shape[2];
  const std::int64_t rows = wte.shape[0];  // this shard holds ids [vocab_lo, vocab_lo + rows)
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      float* o = out.data + (b * T + t) * C;  // (C)
      const std::int64_t id = tokens[static_cast<std::size_t>(b * T + t)] - vocab_lo;
      if (id >= 0 && id < rows) {
        std::copy_n(wte.data + id * C, C, o);
      } else {
        std::fill_n(o, C, 0.0f);
      }
      if (!wpe.empty()) {
        const float* p = wpe.data + t * C;  // (C)
        for (std::int64_t c = 0; c < C; ++c) o[c] += p[c];
      }
    }
  }
}

void CpuBackend::do_embedding_backward_weight(std::span<const std::int32_t> tokens,
                                              ConstTensorView dout, std::int64_t vocab_lo,
                                              TensorView dwte, TensorView dwpe) {
  const std::int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  const std::int64_t rows = dwte.shape[0];
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = 0; t < T; ++t) {
      const float* d = dout.data + (b * T + t) * C;  // (C)
      const std::int64_t id = tokens[static_cast<std::size_t>(b * T + t)] - vocab_lo;
      if (id >= 0 && id < rows) {
        float* g = dwte.data + id * C;
        for (std::int64_t c = 0; c < C; ++c) g[c] += d[c];
      }
      if (!dwpe.empty()) {
        float* g = dwpe.data + t * C;
        for (std::int64_t c = 0; c < C; ++c) g[c] += d[c];
      }
    }
  }
}

}  // namespace pipetune::tensor
