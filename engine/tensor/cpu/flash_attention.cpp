// Flash-style causal attention on the CPU: the reference for the CUDA flash kernels, computed row
// by row with no (T, T) matrix anywhere. Each query row's scores live in a T-float scratch row;
// the forward keeps lse = max + log(sum exp(s - max)) per row, and the backward recomputes the
// probabilities p = exp(s - lse) from q, k and lse (FlashAttention-2's backward):
//   D_i = dout_i . out_i,  dp_ij = dout_i . v_j,  ds_ij = p_ij (dp_ij - D_i),
//   dq_i += scale sum_j ds_ij k_j,  dk_j += scale sum_i ds_ij q_i,  dv_j += sum_i p_ij dout_i.
//
// The pool splits the (batch, head) pairs; one thread computes a whole pair (its dk and dv sum
// over the pair's query rows in order), so results are bit-identical for any thread count.
#include <algorithm>
#include <cmath>

#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

// One (b, h): q, k, v (T, HS) with row stride ld (3C); out, dout (T, HS) with row stride ld_out
// (C); lse (T); dq, dk, dv (T, HS) with row stride ld; row: T floats of scratch.
struct FlashHead {
  const float* q;
  const float* k;
  const float* v;
  std::int64_t ld;
  const float* out;
  float* out_w;  // forward: the output written
  const float* dout;
  std::int64_t ld_out;
  const float* lse;
  float* lse_w;  // forward: the log-sum-exp written
  float* dq;
  float* dk;
  float* dv;
  std::int64_t T, HS;
  // The first query row computed (token slices: the rows before it are earlier slices', whose
  // keys and values the queries attend to). out, dout and lse hold rows [q0, T) from their row 0.
  std::int64_t q0 = 0;
  float scale;
  float* row;
};

PIPETUNE_CPU_KERNEL void flash_forward_head(const FlashHead& h) {
  const std::int64_t HS = h.HS;
  for (std::int64_t i = h.q0; i < h.T; ++i) {
    const float* qi = h.q + i * h.ld;  // (HS)
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j <= i; ++j) {
      const float s = h.scale * cpu::row_dot(qi, h.k + j * h.ld, HS);
      h.row[j] = s;
      mx = std::max(mx, s);
    }
    float sum = 0.0f;
    for (std::int64_t j = 0; j <= i; ++j) sum += (h.row[j] = std::exp(h.row[j] - mx));
    float* o = h.out_w + (i - h.q0) * h.ld_out;  // (HS)
    std::fill_n(o, HS, 0.0f);
    for (std::int64_t j = 0; j <= i; ++j) {
      const float p = h.row[j];
      const float* vj = h.v + j * h.ld;  // (HS)
      for (std::int64_t d = 0; d < HS; ++d) o[d] += p * vj[d];
    }
    const float inv = 1.0f / sum;
    for (std::int64_t d = 0; d < HS; ++d) o[d] *= inv;
    h.lse_w[i - h.q0] = mx + std::log(sum);
  }
}

PIPETUNE_CPU_KERNEL void flash_backward_head(const FlashHead& h) {
  const std::int64_t HS = h.HS;
  for (std::int64_t i = h.q0; i < h.T; ++i) {
    const float* qi = h.q + i * h.ld;                   // (HS)
    const float* doi = h.dout + (i - h.q0) * h.ld_out;  // (HS)
    const float D = cpu::row_dot(doi, h.out + (i - h.q0) * h.ld_out, HS);
    const float lse = h.lse[i - h.q0];
    float* dqi = h.dq + i * h.ld;  // (HS)
    for (std::int64_t j = 0; j <= i; ++j) {
      const float* kj = h.k + j * h.ld;  // (HS)
      const float p = std::exp(h.scale * cpu::row_dot(qi, kj, HS) - lse);
      const float dp = cpu::row_dot(doi, h.v + j * h.ld, HS);
      const float ds = p * (dp - D) * h.scale;
      float* dkj = h.dk + j * h.ld;  // (HS)
      float* dvj = h.dv + j * h.ld;  // (HS)
      for (std::int64_t d = 0; d < HS; ++d) {
        dqi[d] += ds * kj[d];
        dkj[d] += ds * qi[d];
        dvj[d] += p * doi[d];
      }
    }
  }
}

}  // namespace

// The whole sequence is the rows case from row 0.
void CpuBackend::do_attention_flash_forward(ConstTensorView qkv, std::int64_t num_heads,
                                            TensorView out, TensorView lse) {
  do_attention_flash_forward_rows(qkv, 0, num_heads, out, lse);
}

void CpuBackend::do_attention_flash_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                                   ConstTensorView out, ConstTensorView lse,
                                                   std::int64_t num_heads, TensorView dqkv,
                                                   GradientWrite write) {
  if (write == GradientWrite::overwrite) std::fill_n(dqkv.data, dqkv.numel(), 0.0f);
  do_attention_flash_backward_input_rows(dout, qkv, out, lse, 0, num_heads, dqkv);
}

// The query rows [q_begin, T) of each (b, h): token slices, or from 0 the whole sequence.
void CpuBackend::do_attention_flash_forward_rows(ConstTensorView qkv, std::int64_t q_begin,
                                                 std::int64_t num_heads, TensorView out,
                                                 TensorView lse) {
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C3 = qkv.shape[2], C = C3 / 3;
  const std::int64_t NH = num_heads, HS = C / NH, rows = T - q_begin;
  reserve_scratch(static_cast<std::size_t>(T));
  pool_.parallel_for(B * NH, 1, [&](std::int64_t u0, std::int64_t u1, int part) {
    FlashHead h{};
    h.ld = C3;
    h.ld_out = C;
    h.T = T;
    h.HS = HS;
    h.q0 = q_begin;
    h.scale = 1.0f / std::sqrt(static_cast<float>(HS));
    h.row = scratch(part);
    for (std::int64_t u = u0; u < u1; ++u) {
      const std::int64_t b = u / NH, hd = u % NH;
      h.q = qkv.data + b * T * C3 + hd * HS;  // (T, HS), row stride 3C
      h.k = h.q + C;
      h.v = h.q + 2 * C;
      h.out_w = out.data + b * rows * C + hd * HS;  // (T - q_begin, HS), row stride C
      h.lse_w = lse.data + u * rows;                // (T - q_begin)
      flash_forward_head(h);
    }
  });
}

void CpuBackend::do_attention_flash_backward_input_rows(ConstTensorView dout, ConstTensorView qkv,
                                                        ConstTensorView out, ConstTensorView lse,
                                                        std::int64_t q_begin,
                                                        std::int64_t num_heads, TensorView dqkv) {
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C3 = qkv.shape[2], C = C3 / 3;
  const std::int64_t NH = num_heads, HS = C / NH, rows = T - q_begin;
  pool_.parallel_for(B * NH, 1, [&](std::int64_t u0, std::int64_t u1, int) {
    FlashHead h{};
    h.ld = C3;
    h.ld_out = C;
    h.T = T;
    h.HS = HS;
    h.q0 = q_begin;
    h.scale = 1.0f / std::sqrt(static_cast<float>(HS));
    for (std::int64_t u = u0; u < u1; ++u) {
      const std::int64_t b = u / NH, hd = u % NH;
      h.q = qkv.data + b * T * C3 + hd * HS;  // (T, HS), row stride 3C
      h.k = h.q + C;
      h.v = h.q + 2 * C;
      h.out = out.data + b * rows * C + hd * HS;  // (T - q_begin, HS), row stride C
      h.dout = dout.data + b * rows * C + hd * HS;
      h.lse = lse.data + u * rows;  // (T - q_begin)
      h.dq = dqkv.data + b * T * C3 + hd * HS;
      h.dk = h.dq + C;
      h.dv = h.dq + 2 * C;
      flash_backward_head(h);
    }
  });
}

}  // namespace pipetune::tensor
