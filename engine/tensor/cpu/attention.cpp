// Causal multi-head self-attention core on the CPU.
//
// The pool splits the (batch, head) pairs; each pair is computed by one thread with register-
// tiled kernels (R rows x W columns of accumulators) over the causal lower triangle only: a row
// tile [i0, i0 + R) touches keys [0, i0 + R), so the work above the diagonal is at most one tile
// wide. Operands that the kernels read by columns (k^T, v^T) or in W-wide blocks are first copied
// into zero-padded per-thread scratch, kept by the backend between calls.
//
// Every (b, h) is computed the same way whichever thread runs it, and the tiling depends only on
// T and HS, so the results are bit-identical for any thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

using cpu::kVec;
using cpu::Vec16;

std::int64_t round_up(std::int64_t v, std::int64_t m) {
  return (v + m - 1) / m * m;
}

// acc[r][n] += sum_{k in [k0, k1)} a[r * a_rs + k * a_ks] * b[k * ldb + 16 n + (0..15)]
template <int R, int NV>
PIPETUNE_INLINE void mac_tile(const float* a, std::int64_t a_rs, std::int64_t a_ks, const float* b,
                              std::int64_t ldb, std::int64_t k0, std::int64_t k1,
                              Vec16 (&acc)[R][NV]) {
  for (std::int64_t k = k0; k < k1; ++k) {
    const float* bk = b + k * ldb;
    Vec16 bv[NV];
#pragma GCC unroll 8
    for (int n = 0; n < NV; ++n) bv[n] = cpu::load16(bk + n * kVec);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float s = a[r * a_rs + k * a_ks];
#pragma GCC unroll 8
      for (int n = 0; n < NV; ++n) acc[r][n] += s * bv[n];
    }
  }
}

// out[r, c0 + w] (=|+=) alpha * acc[r][w] for r < rows, w < min(16 NV, cols - c0).
template <int R, int NV>
PIPETUNE_INLINE void store_tile(const Vec16 (&acc)[R][NV], std::int64_t rows, float alpha,
                                bool accumulate, float* out, std::int64_t ld_out, std::int64_t c0,
                                std::int64_t cols) {
  constexpr int W = NV * kVec;
  const std::int64_t n = std::min<std::int64_t>(W, cols - c0);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* o = out + r * ld_out + c0;
    if (n == W) {
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        Vec16 x = alpha * acc[r][v];
        if (accumulate) x += cpu::load16(o + v * kVec);
        cpu::store16(o + v * kVec, x);
      }
    } else {
      float tmp[W];
      for (int v = 0; v < NV; ++v) cpu::store16(tmp + v * kVec, acc[r][v]);
      for (std::int64_t w = 0; w < n; ++w)
        o[w] = accumulate ? alpha * tmp[w] + o[w] : alpha * tmp[w];
    }
  }
}

// out rows [0, rows) x columns [c0, c0 + 16 NV) (only columns < cols stored) (=|+=) alpha *
// sum_{k in [k0, k1)} a(r, k) b(k, c). rows <= R; a short tile runs 1-row kernels.
template <int R, int NV>
PIPETUNE_INLINE void tile_product(const float* a, std::int64_t a_rs, std::int64_t a_ks,
                                  const float* b, std::int64_t ldb, std::int64_t k0,
                                  std::int64_t k1, std::int64_t rows, std::int64_t c0,
                                  std::int64_t cols, float alpha, bool accumulate, float* out,
                                  std::int64_t ld_out) {
  if (rows == R) {
    Vec16 acc[R][NV] = {};
    mac_tile<R, NV>(a, a_rs, a_ks, b + c0, ldb, k0, k1, acc);
    store_tile<R, NV>(acc, R, alpha, accumulate, out, ld_out, c0, cols);
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    Vec16 acc[1][NV] = {};
    mac_tile<1, NV>(a + r * a_rs, a_rs, a_ks, b + c0, ldb, k0, k1, acc);
    store_tile<1, NV>(acc, 1, alpha, accumulate, out + r * ld_out, ld_out, c0, cols);
  }
}

// dst (rows, ld_dst) = src (rows, HS) with row stride ld_src, columns [HS, ld_dst) zeroed.
PIPETUNE_INLINE void copy_padded(const float* src, std::int64_t ld_src, std::int64_t rows,
                                 std::int64_t HS, float* dst, std::int64_t ld_dst) {
  for (std::int64_t t = 0; t < rows; ++t) {
    std::copy_n(src + t * ld_src, HS, dst + t * ld_dst);
    std::fill(dst + t * ld_dst + HS, dst + (t + 1) * ld_dst, 0.0f);
  }
}

// dst (HS, ld_dst) = src (T, HS)^T, src contiguous (row stride HSp, in cache), columns
// [T, ld_dst) zeroed. 16 x 16 blocks: 16 contiguous reads, 16 contiguous writes per block row.
PIPETUNE_INLINE void transpose_padded(const float* src, std::int64_t HSp, std::int64_t T,
                                      std::int64_t HS, float* dst, std::int64_t ld_dst) {
  std::int64_t t0 = 0;
  for (; t0 + kVec <= T; t0 += kVec) {
    for (std::int64_t d0 = 0; d0 < HS; d0 += kVec) {
      const std::int64_t dn = std::min<std::int64_t>(kVec, HS - d0);
      float block[kVec][kVec];
      for (int r = 0; r < kVec; ++r) cpu::store16(block[r], cpu::load16(src + (t0 + r) * HSp + d0));
      for (std::int64_t d = 0; d < dn; ++d) {
        for (int r = 0; r < kVec; ++r) dst[(d0 + d) * ld_dst + t0 + r] = block[r][d];
      }
    }
  }
  for (std::int64_t t = t0; t < T; ++t) {
    for (std::int64_t d = 0; d < HS; ++d) dst[d * ld_dst + t] = src[t * HSp + d];
  }
  for (std::int64_t d = 0; d < HS; ++d) {
    std::fill(dst + d * ld_dst + T, dst + (d + 1) * ld_dst, 0.0f);
  }
}

// p[0, n) = softmax(p[0, n)) and p[n, round_up(n, 16)) = 0, in whole vectors: p is a padded
// row (the scores of the block holding n were computed, so the block is readable).
PIPETUNE_INLINE void softmax_padded_row(float* p, std::int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t nb = round_up(n, kVec);
  const Vec16 last = cpu::load16(p + nb - kVec);
  const auto first_masked = static_cast<std::int32_t>(n - (nb - kVec));
  cpu::store16(p + nb - kVec, cpu::lane_index() < first_masked ? last : Vec16{} + kNegInf);
  Vec16 mx = Vec16{} + kNegInf;
  for (std::int64_t j = 0; j < nb; j += kVec) mx = cpu::vmax(mx, cpu::load16(p + j));
  const float m = cpu::lanes_max(mx);
  Vec16 sum = {};
  for (std::int64_t j = 0; j < nb; j += kVec) {
    const Vec16 e = cpu::exp_approx(cpu::load16(p + j) - m);  // exp(-inf) = 0 for masked keys
    cpu::store16(p + j, e);
    sum += e;
  }
  const float inv = 1.0f / cpu::lanes_sum(sum);
  for (std::int64_t j = 0; j < nb; j += kVec) cpu::store16(p + j, cpu::load16(p + j) * inv);
}

// Arguments of one (b, h): q, k, v (T, HS) with row stride ld (3C); out / dout (T, HS) with row
// stride ld_out (C); att (T, T) the probabilities, zero above the diagonal; dq, dk, dv (T, HS)
// with row stride ld; scratch of scratch_floats(T, HS, W) floats.
struct Head {
  const float* q;
  const float* k;
  const float* v;
  std::int64_t ld;
  float* out;  // forward only
  const float* dout;
  std::int64_t ld_out;
  float* att_out;    // forward: the probabilities written
  const float* att;  // backward: the probabilities read
  float* dq;
  float* dk;
  float* dv;
  std::int64_t T, HS;
  float scale;
  float* scratch;
};

std::int64_t scratch_floats(std::int64_t T, std::int64_t HS, std::int64_t W) {
  const std::int64_t Tp = round_up(T, W), HSp = round_up(HS, W);
  const std::int64_t forward = HS * Tp + 2 * T * HSp + 16 * Tp;  // kt, vp, kp, prob (R <= 16)
  const std::int64_t backward = HS * Tp + 3 * T * HSp + std::max(T * Tp, T * HSp);  // + ds
  return std::max(forward, backward);
}

template <int R, int NV>
PIPETUNE_INLINE void forward_head(const Head& h) {
  constexpr int W = NV * kVec;
  const std::int64_t T = h.T, HS = h.HS, ld = h.ld;
  const std::int64_t Tp = round_up(T, W), HSp = round_up(HS, W);
  float* kt = h.scratch;       // (HS, Tp)  k^T, zero-padded
  float* vp = kt + HS * Tp;    // (T, HSp)  v, zero-padded
  float* kp = vp + T * HSp;    // (T, HSp)  k, zero-padded (staging for kt)
  float* prob = kp + T * HSp;  // (R, Tp)   scores, then probabilities, of one row tile
  copy_padded(h.k, ld, T, HS, kp, HSp);
  transpose_padded(kp, HSp, T, HS, kt, Tp);
  copy_padded(h.v, ld, T, HS, vp, HSp);
  for (std::int64_t i0 = 0; i0 < T; i0 += R) {
    const std::int64_t rows = std::min<std::int64_t>(R, T - i0);
    const std::int64_t keys = i0 + rows;  // keys [0, keys) are visible to some row of the tile
    // prob = scale * q k^T over the visible keys (W-wide blocks, padded columns included)
    for (std::int64_t j0 = 0; j0 < keys; j0 += W) {
      tile_product<R, NV>(h.q + i0 * ld, ld, 1, kt, Tp, 0, HS, rows, j0, Tp, h.scale, false, prob,
                          Tp);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t n = i0 + r + 1;  // keys 0..i visible
      float* p = prob + r * Tp;
      softmax_padded_row(p, n);
      const std::int64_t nb = round_up(n, kVec);
      if (nb < keys) std::fill(p + nb, p + keys, 0.0f);  // masked keys: exact zeros in prob v
      float* a = h.att_out + (i0 + r) * T;
      std::copy_n(p, n, a);
      std::fill(a + n, a + T, 0.0f);
    }
    // out = prob v over the visible keys
    for (std::int64_t c0 = 0; c0 < HS; c0 += W) {
      tile_product<R, NV>(prob, Tp, 1, vp, HSp, 0, keys, rows, c0, HS, 1.0f, false,
                          h.out + i0 * h.ld_out, h.ld_out);
    }
  }
}

template <int R, int NV>
PIPETUNE_INLINE void backward_head(const Head& h) {
  constexpr int W = NV * kVec;
  const std::int64_t T = h.T, HS = h.HS, ld = h.ld, ld_out = h.ld_out;
  const std::int64_t Tp = round_up(T, W), HSp = round_up(HS, W);
  float* vt = h.scratch;      // (HS, Tp)  v^T, zero-padded
  float* kp = vt + HS * Tp;   // (T, HSp)  k, zero-padded
  float* qp = kp + T * HSp;   // (T, HSp)  q, zero-padded
  float* dop = qp + T * HSp;  // (T, HSp)  dout, zero-padded
  float* ds = dop + T * HSp;  // (T, Tp)   d(scores), zero above the diagonal; first the
                              //           staging copy of v for vt
  const float* att = h.att;
  copy_padded(h.v, ld, T, HS, ds, HSp);
  transpose_padded(ds, HSp, T, HS, vt, Tp);
  copy_padded(h.k, ld, T, HS, kp, HSp);
  copy_padded(h.q, ld, T, HS, qp, HSp);
  copy_padded(h.dout, ld_out, T, HS, dop, HSp);
  for (std::int64_t i0 = 0; i0 < T; i0 += R) {
    const std::int64_t rows = std::min<std::int64_t>(R, T - i0);
    const std::int64_t keys = i0 + rows;
    // dprob = dout v^T over the visible keys
    for (std::int64_t j0 = 0; j0 < keys; j0 += W) {
      tile_product<R, NV>(h.dout + i0 * ld_out, ld_out, 1, vt, Tp, 0, HS, rows, j0, Tp, 1.0f, false,
                          ds + i0 * Tp, Tp);
    }
    // softmax backward in place: ds = p * (dprob - sum_j p dprob); zero above the diagonal
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = i0 + r, n = i + 1;
      const float* p = att + i * T;
      float* d = ds + i * Tp;
      const float dot = cpu::row_dot(p, d, n);
      for (std::int64_t s = 0; s < n; ++s) d[s] = p[s] * (d[s] - dot);
      std::fill(d + n, d + Tp, 0.0f);
    }
    // dq += scale * ds k over the visible keys
    for (std::int64_t c0 = 0; c0 < HS; c0 += W) {
      tile_product<R, NV>(ds + i0 * Tp, Tp, 1, kp, HSp, 0, keys, rows, c0, HS, h.scale, true,
                          h.dq + i0 * ld, ld);
    }
  }
  // dk += scale * ds^T q and dv += att^T dout, each key row j summing queries i >= j in order
  for (std::int64_t j0 = 0; j0 < T; j0 += R) {
    const std::int64_t rows = std::min<std::int64_t>(R, T - j0);
    for (std::int64_t c0 = 0; c0 < HS; c0 += W) {
      tile_product<R, NV>(ds + j0, 1, Tp, qp, HSp, j0, T, rows, c0, HS, h.scale, true,
                          h.dk + j0 * ld, ld);
      tile_product<R, NV>(att + j0, 1, T, dop, HSp, j0, T, rows, c0, HS, 1.0f, true, h.dv + j0 * ld,
                          ld);
    }
  }
}

// One instantiation per ISA level, each with the tile that fits its register file: AVX-512
// 8 x 32 (16 of 32 zmm), AVX2 4 x 16 (8 of 16 ymm, a Vec16 is two), baseline 2 x 16 (8 of 16
// xmm, a Vec16 is four).
constexpr int kRowsV4 = 8, kVecsV4 = 2;
#if PIPETUNE_CPU_ISA_LEVELS
PIPETUNE_TARGET_V4 void forward_head_v4(const Head& h) {
  forward_head<kRowsV4, kVecsV4>(h);
}
PIPETUNE_TARGET_V4 void backward_head_v4(const Head& h) {
  backward_head<kRowsV4, kVecsV4>(h);
}
PIPETUNE_TARGET_V3 void forward_head_v3(const Head& h) {
  forward_head<4, 1>(h);
}
PIPETUNE_TARGET_V3 void backward_head_v3(const Head& h) {
  backward_head<4, 1>(h);
}
#endif
void forward_head_base(const Head& h) {
  forward_head<2, 1>(h);
}
void backward_head_base(const Head& h) {
  backward_head<2, 1>(h);
}

struct HeadKernels {
  void (*forward)(const Head&);
  void (*backward)(const Head&);
  std::int64_t width;  // W: the padding unit of the scratch operands
};

HeadKernels head_kernels(CpuIsa isa) {
#if PIPETUNE_CPU_ISA_LEVELS
  switch (isa) {
    case CpuIsa::V4:
      return {forward_head_v4, backward_head_v4, kVecsV4 * kVec};
    case CpuIsa::V3:
      return {forward_head_v3, backward_head_v3, kVec};
    case CpuIsa::Base:
      break;
  }
#else
  (void)isa;
#endif
  return {forward_head_base, backward_head_base, kVec};
}

}  // namespace

void CpuBackend::do_attention_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                                      TensorView att) {
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C3 = qkv.shape[2], C = C3 / 3;
  const std::int64_t NH = num_heads, HS = C / NH;
  const HeadKernels kernels = head_kernels(isa_);
  reserve_scratch(static_cast<std::size_t>(scratch_floats(T, HS, kernels.width)));
  pool_.parallel_for(B * NH, 1, [&](std::int64_t u0, std::int64_t u1, int part) {
    Head h{};
    h.ld = C3;
    h.ld_out = C;
    h.T = T;
    h.HS = HS;
    h.scale = 1.0f / std::sqrt(static_cast<float>(HS));
    h.scratch = scratch(part);
    for (std::int64_t u = u0; u < u1; ++u) {
      const std::int64_t b = u / NH, hd = u % NH;
      h.q = qkv.data + b * T * C3 + hd * HS;  // (T, HS), row stride 3C
      h.k = h.q + C;
      h.v = h.q + 2 * C;
      h.out = out.data + b * T * C + hd * HS;  // (T, HS), row stride C
      h.att_out = att.data + u * T * T;        // (T, T)
      kernels.forward(h);
    }
  });
}

void CpuBackend::do_attention_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                             ConstTensorView att, std::int64_t num_heads,
                                             TensorView dqkv) {
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C3 = qkv.shape[2], C = C3 / 3;
  const std::int64_t NH = num_heads, HS = C / NH;
  const HeadKernels kernels = head_kernels(isa_);
  reserve_scratch(static_cast<std::size_t>(scratch_floats(T, HS, kernels.width)));
  pool_.parallel_for(B * NH, 1, [&](std::int64_t u0, std::int64_t u1, int part) {
    Head h{};
    h.ld = C3;
    h.ld_out = C;
    h.T = T;
    h.HS = HS;
    h.scale = 1.0f / std::sqrt(static_cast<float>(HS));
    h.scratch = scratch(part);
    for (std::int64_t u = u0; u < u1; ++u) {
      const std::int64_t b = u / NH, hd = u % NH;
      h.q = qkv.data + b * T * C3 + hd * HS;  // (T, HS), row stride 3C
      h.k = h.q + C;
      h.v = h.q + 2 * C;
      h.dout = dout.data + b * T * C + hd * HS;  // (T, HS), row stride C
      h.att = att.data + u * T * T;              // (T, T)
      h.dq = dqkv.data + b * T * C3 + hd * HS;
      h.dk = h.dq + C;
      h.dv = h.dq + 2 * C;
      kernels.backward(h);
    }
  });
}

}  // namespace pipetune::tensor
