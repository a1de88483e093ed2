// Causal multi-head self-attention core on the CPU. Per (batch, head) four strided sgemm calls
// read q, k, v straight out of the packed qkv (B, T, 3C) buffer; the softmax is a row loop.
// The full T x T score matrix is computed and the upper triangle masked (simple, BLAS-fast).
#include <cblas.h>

#include <cmath>
#include <vector>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

namespace {
blasint bl(std::int64_t v) {
  return static_cast<blasint>(v);
}
}  // namespace

void CpuBackend::do_attention_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                                      TensorView att) {
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C3 = qkv.shape[2], C = C3 / 3;
  const std::int64_t NH = num_heads, HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      const float* q = qkv.data + b * T * C3 + h * HS;  // (T, HS), row stride 3C
      const float* k = q + C;                           // (T, HS), row stride 3C
      const float* v = q + 2 * C;                       // (T, HS), row stride 3C
      float* a = att.data + (b * NH + h) * T * T;       // (T, T)
      float* o = out.data + b * T * C + h * HS;         // (T, HS), row stride C
      // a = scale * q k^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bl(T), bl(T), bl(HS), scale, q, bl(C3),
                  k, bl(C3), 0.0f, a, bl(T));
      for (std::int64_t t = 0; t < T; ++t) {
        float* row = a + t * T;  // (T): keys 0..t visible
        float mx = row[0];
        for (std::int64_t s = 1; s <= t; ++s) mx = std::max(mx, row[s]);
        float sum = 0.0f;
        for (std::int64_t s = 0; s <= t; ++s) {
          row[s] = std::exp(row[s] - mx);
          sum += row[s];
        }
        const float inv = 1.0f / sum;
        for (std::int64_t s = 0; s <= t; ++s) row[s] *= inv;
        for (std::int64_t s = t + 1; s < T; ++s) row[s] = 0.0f;
      }
      // o = a v
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bl(T), bl(HS), bl(T), 1.0f, a, bl(T),
                  v, bl(C3), 0.0f, o, bl(C));
    }
  }
}

void CpuBackend::do_attention_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                             ConstTensorView att, std::int64_t num_heads,
                                             TensorView dqkv) {
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C3 = qkv.shape[2], C = C3 / 3;
  const std::int64_t NH = num_heads, HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  std::vector<float> datt(static_cast<std::size_t>(T * T));  // (T, T) scratch
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      const float* q = qkv.data + b * T * C3 + h * HS;  // (T, HS), row stride 3C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv.data + b * T * C3 + h * HS;  // (T, HS), row stride 3C
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att.data + (b * NH + h) * T * T;       // (T, T)
      const float* dout_bh = dout.data + b * T * C + h * HS;  // (T, HS), row stride C
      float* da = datt.data();
      // da = dout v^T ; dv += a^T dout
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bl(T), bl(T), bl(HS), 1.0f, dout_bh,
                  bl(C), v, bl(C3), 0.0f, da, bl(T));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bl(T), bl(HS), bl(T), 1.0f, a, bl(T),
                  dout_bh, bl(C), 1.0f, dv, bl(C3));
      // softmax backward, in place: dpre = a * (da - sum_s a * da); zero above the diagonal
      for (std::int64_t t = 0; t < T; ++t) {
        const float* ar = a + t * T;
        float* dr = da + t * T;
        float dot = 0.0f;
        for (std::int64_t s = 0; s <= t; ++s) dot += ar[s] * dr[s];
        for (std::int64_t s = 0; s <= t; ++s) dr[s] = ar[s] * (dr[s] - dot);
        for (std::int64_t s = t + 1; s < T; ++s) dr[s] = 0.0f;
      }
      // dq += scale * dpre k ; dk += scale * dpre^T q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bl(T), bl(HS), bl(T), scale, da, bl(T),
                  k, bl(C3), 1.0f, dq, bl(C3));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bl(T), bl(HS), bl(T), scale, da, bl(T),
                  q, bl(C3), 1.0f, dk, bl(C3));
    }
  }
}

}  // namespace pipetune::tensor
