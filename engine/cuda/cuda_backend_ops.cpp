// CudaBackend's row ops: LayerNorm, embedding, attention (stored and flash) and cross-entropy.
// Each checks nothing more (backend.cpp did), uploads the host ids it needs and launches the
// kernels of cuda_*.cu on the backend's stream.
#include <algorithm>
#include <limits>
#include <string>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/launch_shapes.hpp"
#include "engine/errors.hpp"

namespace pipetune::cuda {

using tensor::ConstTensorView;
using tensor::TensorView;

// ---- LayerNorm ------------------------------------------------------------------------------

void CudaBackend::do_layernorm_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                       TensorView y, TensorView mean, TensorView rstd) {
  activate();
  kernels::layernorm_forward(stream_, x.data, w.data, b.data, y.data, mean.data, rstd.data,
                             x.shape.rows(), x.shape.last(), tensor::kLayerNormEps);
}

void CudaBackend::do_layernorm_backward_input(ConstTensorView dy, ConstTensorView x,
                                              ConstTensorView w, ConstTensorView mean,
                                              ConstTensorView rstd, ConstTensorView residual,
                                              TensorView dx) {
  activate();
  kernels::layernorm_backward_input(stream_, dy.data, x.data, w.data, mean.data, rstd.data,
                                    residual.data, dx.data, x.shape.rows(), x.shape.last());
}

void CudaBackend::do_layernorm_backward_weight(ConstTensorView dy, ConstTensorView x,
                                               ConstTensorView mean, ConstTensorView rstd,
                                               TensorView dw, TensorView db) {
  activate();
  const std::int64_t N = x.shape.rows(), C = x.shape.last();
  const ColumnReduction r = column_reduction_shape(N, C, 2);
  auto* partial =
      static_cast<float*>(scratch(static_cast<std::size_t>(r.scratch_floats) * sizeof(float)));
  kernels::layernorm_backward_weight(stream_, dy.data, x.data, mean.data, rstd.data, dw.data,
                                     db.data, N, C, partial);
}

// ---- embedding ------------------------------------------------------------------------------

namespace {

void check_int32_positions(std::size_t n) {
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw InputError("embedding: " + std::to_string(n) +
                     " tokens exceed the CUDA backend's int32 positions");
  }
}

}  // namespace

void CudaBackend::do_embedding_forward(std::span<const std::int32_t> tokens, ConstTensorView wte,
                                       std::int64_t vocab_lo, ConstTensorView wpe, TensorView out) {
  activate();
  const std::int64_t T = out.shape[1], C = out.shape[2];
  const std::int32_t* ids = upload_ids(tokens);
  kernels::embedding_forward(stream_, ids, wte.data, wte.shape[0], vocab_lo, wpe.data, out.data,
                             static_cast<std::int64_t>(tokens.size()), T, C);
}

// The table gradient's buckets, built on the host from the host ids (a stable counting pass):
// packed_ = [row of each bucket (nb)] [start of each bucket (nb + 1)] [positions (P)], buckets in
// table-row order and each bucket's positions in increasing order.
void CudaBackend::do_embedding_backward_weight(std::span<const std::int32_t> tokens,
                                               ConstTensorView dout, std::int64_t vocab_lo,
                                               TensorView dwte, TensorView dwpe) {
  activate();
  const std::int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  const std::int64_t rows = dwte.shape[0];
  check_int32_positions(tokens.size());
  counts_.assign(static_cast<std::size_t>(rows), 0);
  std::int64_t in_shard = 0;
  for (std::int32_t id : tokens) {
    const std::int64_t r = id - vocab_lo;
    if (r >= 0 && r < rows) {
      ++counts_[static_cast<std::size_t>(r)];
      ++in_shard;
    }
  }
  std::int64_t buckets = 0;
  for (std::int32_t c : counts_) buckets += c > 0 ? 1 : 0;
  packed_.assign(static_cast<std::size_t>(2 * buckets + 1 + in_shard), 0);
  std::int32_t* bucket_row = packed_.data();
  std::int32_t* bucket_start = bucket_row + buckets;
  std::int32_t* positions = bucket_start + buckets + 1;
  // counts_ becomes each row's next write position in `positions`.
  std::int32_t next = 0, b = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t c = counts_[static_cast<std::size_t>(r)];
    if (c == 0) continue;
    bucket_row[b] = static_cast<std::int32_t>(r);
    bucket_start[b] = next;
    counts_[static_cast<std::size_t>(r)] = next;
    next += c;
    ++b;
  }
  bucket_start[buckets] = next;
  for (std::size_t n = 0; n < tokens.size(); ++n) {
    const std::int64_t r = tokens[n] - vocab_lo;
    if (r >= 0 && r < rows)
      positions[counts_[static_cast<std::size_t>(r)]++] = static_cast<std::int32_t>(n);
  }
  const auto* dev = static_cast<const std::int32_t*>(
      upload(packed_.data(), packed_.size() * sizeof(std::int32_t)));
  kernels::embedding_backward_table(stream_, dev, dev + buckets, dev + 2 * buckets + 1, buckets,
                                    dout.data, dwte.data, C);
  if (!dwpe.empty()) kernels::embedding_backward_position(stream_, dout.data, dwpe.data, B, T, C);
}

// ---- attention ------------------------------------------------------------------------------

void CudaBackend::do_attention_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                                       TensorView att) {
  activate();
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  kernels::attention_forward(stream_, qkv.data, out.data, att.data, B, T, num_heads, C / num_heads);
}

void CudaBackend::do_attention_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                              ConstTensorView att, std::int64_t num_heads,
                                              TensorView dqkv) {
  activate();
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  const std::int64_t floats = attention_backward_scratch_floats(B, num_heads, T);
  auto* ds = static_cast<float*>(scratch(static_cast<std::size_t>(floats) * sizeof(float)));
  kernels::attention_backward(stream_, dout.data, qkv.data, att.data, dqkv.data, ds, B, T,
                              num_heads, C / num_heads);
}

void CudaBackend::do_attention_flash_forward(ConstTensorView qkv, std::int64_t num_heads,
                                             TensorView out, TensorView lse) {
  activate();
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  kernels::flash_attention_forward(stream_, qkv.data, out.data, lse.data, B, T, num_heads,
                                   C / num_heads, options_.flash);
}

void CudaBackend::do_attention_flash_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                                    ConstTensorView out, ConstTensorView lse,
                                                    std::int64_t num_heads, TensorView dqkv,
                                                    tensor::GradientWrite write) {
  activate();
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  const FlashShape f = flash_attention_shape(B, num_heads, T, C / num_heads);
  auto* D =
      static_cast<float*>(scratch(static_cast<std::size_t>(f.scratch_floats) * sizeof(float)));
  kernels::flash_attention_backward(stream_, dout.data, qkv.data, out.data, lse.data, dqkv.data, D,
                                    B, T, num_heads, C / num_heads, options_.flash,
                                    write == tensor::GradientWrite::accumulate);
}

// Token slices: the warp-per-row kernels on the query rows [q_begin, T), whatever options_.flash
// chooses for whole sequences (the tiled kernels start their queries at row 0).
void CudaBackend::do_attention_flash_forward_rows(ConstTensorView qkv, std::int64_t q_begin,
                                                  std::int64_t num_heads, TensorView out,
                                                  TensorView lse) {
  activate();
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  kernels::flash_attention_forward_rows(stream_, qkv.data, out.data, lse.data, B, T, q_begin,
                                        num_heads, C / num_heads);
}

void CudaBackend::do_attention_flash_backward_input_rows(ConstTensorView dout, ConstTensorView qkv,
                                                         ConstTensorView out, ConstTensorView lse,
                                                         std::int64_t q_begin,
                                                         std::int64_t num_heads, TensorView dqkv) {
  activate();
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  const FlashShape f = flash_attention_shape(B, num_heads, T, C / num_heads, q_begin);
  auto* D =
      static_cast<float*>(scratch(static_cast<std::size_t>(f.scratch_floats) * sizeof(float)));
  kernels::flash_attention_backward_rows(stream_, dout.data, qkv.data, out.data, lse.data,
                                         dqkv.data, D, B, T, q_begin, num_heads, C / num_heads);
}

// ---- cross-entropy --------------------------------------------------------------------------

float CudaBackend::do_cross_entropy_forward(ConstTensorView logits,
                                            std::span<const std::int32_t> targets,
                                            TensorView losses) {
  activate();
  const std::int64_t N = logits.shape[0], V = logits.shape[1];
  const std::int32_t* ids = upload_ids(targets);
  const SumReduction r = sum_reduction_shape(N);
  const std::int64_t stats_bytes = scratch_bytes(3 * N * static_cast<std::int64_t>(sizeof(float)));
  auto* base = static_cast<char*>(scratch(static_cast<std::size_t>(
      stats_bytes + r.scratch_doubles * static_cast<std::int64_t>(sizeof(double)))));
  auto* max = reinterpret_cast<float*>(base);
  float* sum = max + N;
  float* target = sum + N;
  auto* partial = reinterpret_cast<double*>(base + stats_bytes);
  kernels::ce_local_stats(stream_, logits.data, ids, 0, max, sum, target, N, V);
  kernels::ce_losses(stream_, max, sum, target, losses.data, N);
  kernels::sum(stream_, losses.data, N, partial);
  double total = 0.0;
  download(&total, partial + r.blocks, sizeof total);
  return N == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(N));
}

void CudaBackend::do_cross_entropy_backward(ConstTensorView logits,
                                            std::span<const std::int32_t> targets, float grad_scale,
                                            TensorView dlogits) {
  activate();
  const std::int64_t N = logits.shape[0], V = logits.shape[1];
  const std::int32_t* ids = upload_ids(targets);
  auto* max = static_cast<float*>(scratch(static_cast<std::size_t>(3 * N) * sizeof(float)));
  float* sum = max + N;
  float* target = sum + N;
  kernels::ce_local_stats(stream_, logits.data, ids, 0, max, sum, target, N, V);
  kernels::ce_backward(stream_, logits.data, ids, 0, max, sum, grad_scale, dlogits.data, N, V,
                       false);
}

void CudaBackend::do_vocab_ce_local_stats(ConstTensorView logits_shard,
                                          std::span<const std::int32_t> targets,
                                          std::int64_t vocab_lo, TensorView local_max,
                                          TensorView local_sum, TensorView target_logit) {
  activate();
  const std::int32_t* ids = upload_ids(targets);
  kernels::ce_local_stats(stream_, logits_shard.data, ids, vocab_lo, local_max.data, local_sum.data,
                          target_logit.data, logits_shard.shape[0], logits_shard.shape[1]);
}

void CudaBackend::do_vocab_ce_rescale_sum(ConstTensorView local_max, ConstTensorView global_max,
                                          TensorView local_sum) {
  activate();
  kernels::ce_rescale_sum(stream_, local_max.data, global_max.data, local_sum.data,
                          local_sum.numel());
}

float CudaBackend::do_vocab_ce_loss(ConstTensorView global_max, ConstTensorView global_sum,
                                    ConstTensorView target_logit, TensorView losses) {
  activate();
  const std::int64_t N = losses.numel();
  const SumReduction r = sum_reduction_shape(N);
  auto* partial =
      static_cast<double*>(scratch(static_cast<std::size_t>(r.scratch_doubles) * sizeof(double)));
  kernels::ce_losses(stream_, global_max.data, global_sum.data, target_logit.data, losses.data, N);
  kernels::sum(stream_, losses.data, N, partial);
  double total = 0.0;
  download(&total, partial + r.blocks, sizeof total);
  return N == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(N));
}

void CudaBackend::do_vocab_ce_backward(ConstTensorView logits_shard,
                                       std::span<const std::int32_t> targets, std::int64_t vocab_lo,
                                       ConstTensorView global_max, ConstTensorView global_sum,
                                       float grad_scale, TensorView dlogits_shard,
                                       tensor::GradientWrite write) {
  activate();
  const std::int32_t* ids = upload_ids(targets);
  kernels::ce_backward(stream_, logits_shard.data, ids, vocab_lo, global_max.data, global_sum.data,
                       grad_scale, dlogits_shard.data, logits_shard.shape[0], logits_shard.shape[1],
                       write == tensor::GradientWrite::overwrite);
}

void CudaBackend::do_vocab_ce_numerators(ConstTensorView logits_shard, ConstTensorView row_max,
                                         TensorView numerators) {
  activate();
  kernels::ce_numerators(stream_, logits_shard.data, row_max.data, numerators.data,
                         logits_shard.shape[0], logits_shard.shape[1]);
}

void CudaBackend::do_vocab_ce_input_grad(ConstTensorView shard_max, ConstTensorView global_max,
                                         ConstTensorView global_sum, ConstTensorView weights,
                                         ConstTensorView target_rows, float grad_scale,
                                         TensorView dx) {
  activate();
  kernels::ce_input_grad(stream_, shard_max.data, global_max.data, global_sum.data, weights.data,
                         target_rows.data, grad_scale, dx.data, dx.shape[0], dx.shape[1]);
}

}  // namespace pipetune::cuda
