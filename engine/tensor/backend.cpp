// Shape checks shared by every backend, then dispatch to the backend's do_* implementation: the
// elementwise, linear, embedding, layernorm, GELU, attention and cross-entropy ops (MoE in
// backend_moe.cpp, the optimizer in backend_optimizer.cpp).
#include "engine/tensor/backend.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/errors.hpp"
#include "engine/tensor/backend_checks.hpp"
#include "engine/tensor/check.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::tensor {

std::string_view attention_kernel_name(AttentionKernel k) {
  return k == AttentionKernel::flash ? "flash" : "stored";
}

using namespace backend_checks;

namespace {

void tokens_in_range(const char* op, const char* name, std::span<const std::int32_t> ids,
                     std::int64_t vocab_size) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    PIPETUNE_TENSOR_CHECK(ids[i] >= 0 && ids[i] < vocab_size, op,
                          std::string(name) + "[" + std::to_string(i) +
                              "] = " + std::to_string(ids[i]) + " outside [0, " +
                              std::to_string(vocab_size) + ")");
  }
}

}  // namespace

// ---- elementwise ----------------------------------------------------------------------------

void Backend::zero(TensorView t) {
  need("zero", "t", t);
  do_zero(t);
}

void Backend::scale(TensorView t, float s) {
  need("scale", "t", t);
  do_scale(t, s);
}

void Backend::add(ConstTensorView a, ConstTensorView b, TensorView out) {
  same_shape("add", "a", a, "b", b);
  same_shape("add", "a", a, "out", out);
  do_add(a, b, out);
}

void Backend::accumulate(TensorView dst, ConstTensorView src) {
  same_shape("accumulate", "dst", dst, "src", src);
  do_accumulate(dst, src);
}

void Backend::fill_columns(TensorView t, std::int64_t col_lo, float value) {
  rank_is("fill_columns", "t", t, 2);
  PIPETUNE_TENSOR_CHECK(col_lo >= 0 && col_lo <= t.shape[1], "fill_columns",
                        "col_lo " + std::to_string(col_lo) + " outside [0, cols] of " + sh("t", t));
  if (col_lo < t.shape[1]) do_fill_columns(t, col_lo, value);
}

// ---- linear ---------------------------------------------------------------------------------

namespace {

// x (N, in), w (out, in), b (out) or empty, y (N, out), for `op`.
void check_linear_forward(const char* op, ConstTensorView x, ConstTensorView w, ConstTensorView b,
                          ConstTensorView y) {
  need(op, "x", x);
  rank_is(op, "w", w, 2);
  need(op, "y", y);
  PIPETUNE_TENSOR_CHECK(x.shape.last() == w.shape[1] && y.shape.last() == w.shape[0] &&
                            y.shape.rows() == x.shape.rows(),
                        op,
                        sh("x", x) + " w " + w.shape.str() + " " + sh("y", y) +
                            " (want x (N, in), w (out, in), y (N, out))");
  PIPETUNE_TENSOR_CHECK(b.empty() || (b.shape.rank() == 1 && b.shape[0] == w.shape[0]), op,
                        sh("b", b) + " does not match w " + w.shape.str());
}

// dy (N, out), w (out, in), dx (N, in), for `op`.
void check_linear_backward_input(const char* op, ConstTensorView dy, ConstTensorView w,
                                 ConstTensorView dx) {
  need(op, "dy", dy);
  rank_is(op, "w", w, 2);
  need(op, "dx", dx);
  PIPETUNE_TENSOR_CHECK(dy.shape.last() == w.shape[0] && dx.shape.last() == w.shape[1] &&
                            dy.shape.rows() == dx.shape.rows(),
                        op,
                        sh("dy", dy) + " w " + w.shape.str() + " " + sh("dx", dx) +
                            " (want dy (N, out), w (out, in), dx (N, in))");
}

// dy (N, out), x (N, in), dw (out, in), db (out) or empty, for `op`.
void check_linear_backward_weight(const char* op, ConstTensorView dy, ConstTensorView x,
                                  ConstTensorView dw, ConstTensorView db) {
  need(op, "dy", dy);
  need(op, "x", x);
  rank_is(op, "dw", dw, 2);
  PIPETUNE_TENSOR_CHECK(dy.shape.rows() == x.shape.rows() && dw.shape[0] == dy.shape.last() &&
                            dw.shape[1] == x.shape.last(),
                        op,
                        sh("dy", dy) + " " + sh("x", x) + " " + sh("dw", dw) +
                            " (want dy (N, out), x (N, in), dw (out, in))");
  PIPETUNE_TENSOR_CHECK(db.empty() || (db.shape.rank() == 1 && db.shape[0] == dw.shape[0]), op,
                        sh("db", db) + " does not match dw " + dw.shape.str());
}

// Both gradients of one layer at once: dx's and dw's checks, and dw w's shape.
void check_linear_backward_both(const char* op, ConstTensorView dy, ConstTensorView x,
                                ConstTensorView w, ConstTensorView dx, ConstTensorView dw,
                                ConstTensorView db) {
  check_linear_backward_input(op, dy, w, dx);
  check_linear_backward_weight(op, dy, x, dw, db);
  PIPETUNE_TENSOR_CHECK(dw.shape == w.shape, op,
                        sh("dw", dw) + " is not w's shape " + w.shape.str());
}

}  // namespace

void Backend::linear_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                             TensorView y) {
  check_linear_forward("linear_forward", x, w, b, y);
  do_linear_forward(x, w, b, y);
}

void Backend::linear_backward_input(ConstTensorView dy, ConstTensorView w, TensorView dx,
                                    GradientWrite write) {
  check_linear_backward_input("linear_backward_input", dy, w, dx);
  do_linear_backward_input(dy, w, dx, write);
}

void Backend::linear_gelu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                  TensorView pre, TensorView y) {
  check_linear_forward("linear_gelu_forward", x, w, b, pre);
  same_shape("linear_gelu_forward", "pre", pre, "y", y);
  do_linear_gelu_forward(x, w, b, pre, y);
}

void Backend::linear_gelu_backward_input(ConstTensorView dy, ConstTensorView w, ConstTensorView pre,
                                         TensorView dpre) {
  check_linear_backward_input("linear_gelu_backward_input", dy, w, dpre);
  same_shape("linear_gelu_backward_input", "pre", pre, "dpre", dpre);
  do_linear_gelu_backward_input(dy, w, pre, dpre);
}

void Backend::do_linear_gelu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                     TensorView pre, TensorView y) {
  do_linear_forward(x, w, b, pre);
  do_gelu_forward(pre, y);
}

void Backend::do_linear_gelu_backward_input(ConstTensorView dy, ConstTensorView w,
                                            ConstTensorView pre, TensorView dpre) {
  do_linear_backward_input(dy, w, dpre, GradientWrite::overwrite);
  do_gelu_backward_input(dpre, pre, dpre, GradientWrite::overwrite);  // in place, element-wise
}

void Backend::linear_backward_weight(ConstTensorView dy, ConstTensorView x, TensorView dw,
                                     TensorView db) {
  check_linear_backward_weight("linear_backward_weight", dy, x, dw, db);
  do_linear_backward_weight(dy, x, dw, db);
}

void Backend::linear_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                              TensorView dx, GradientWrite write, TensorView dw, TensorView db) {
  check_linear_backward_both("linear_backward", dy, x, w, dx, dw, db);
  do_linear_backward(dy, x, w, dx, write, dw, db);
}

void Backend::linear_gelu_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                   ConstTensorView pre, TensorView dpre, TensorView dw,
                                   TensorView db) {
  check_linear_backward_both("linear_gelu_backward", dy, x, w, dpre, dw, db);
  same_shape("linear_gelu_backward", "pre", pre, "dpre", dpre);
  do_linear_gelu_backward(dy, x, w, pre, dpre, dw, db);
}

void Backend::do_linear_gelu_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                      ConstTensorView pre, TensorView dpre, TensorView dw,
                                      TensorView db) {
  do_linear_gelu_backward_input(dy, w, pre, dpre);
  do_linear_backward_weight(dy, x, dw, db);
}

void Backend::do_linear_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                 TensorView dx, GradientWrite write, TensorView dw, TensorView db) {
  do_linear_backward_input(dy, w, dx, write);
  do_linear_backward_weight(dy, x, dw, db);
}

// ---- embedding ------------------------------------------------------------------------------

namespace {

void check_embedding(const char* op, std::span<const std::int32_t> tokens, ConstTensorView table,
                     std::int64_t vocab_lo, std::int64_t vocab_size, ConstTensorView wpe,
                     ConstTensorView out) {
  rank_is(op, "table", table, 2);
  rank_is(op, "out", out, 3);
  PIPETUNE_TENSOR_CHECK(out.shape.rows() == static_cast<std::int64_t>(tokens.size()) &&
                            out.shape[2] == table.shape[1],
                        op,
                        sh("out", out) + " table " + table.shape.str() + " tokens (" +
                            std::to_string(tokens.size()) + ") (want out (B, T, C), " +
                            "table (V, C), B*T tokens)");
  PIPETUNE_TENSOR_CHECK(vocab_lo >= 0 && vocab_lo + table.shape[0] <= vocab_size, op,
                        "shard [" + std::to_string(vocab_lo) + ", " +
                            std::to_string(vocab_lo + table.shape[0]) + ") outside vocabulary " +
                            std::to_string(vocab_size));
  PIPETUNE_TENSOR_CHECK(wpe.empty() || (wpe.shape.rank() == 2 && wpe.shape[0] >= out.shape[1] &&
                                        wpe.shape[1] == out.shape[2]),
                        op, sh("wpe", wpe) + " does not cover " + sh("out", out));
  tokens_in_range(op, "tokens", tokens, vocab_size);
}

}  // namespace

void Backend::embedding_forward(std::span<const std::int32_t> tokens, ConstTensorView wte,
                                ConstTensorView wpe, TensorView out) {
  rank_is("embedding_forward", "wte", wte, 2);
  check_embedding("embedding_forward", tokens, wte, 0, wte.shape[0], wpe, out);
  do_embedding_forward(tokens, wte, 0, wpe, out);
}

void Backend::embedding_shard_forward(std::span<const std::int32_t> tokens,
                                      ConstTensorView wte_shard, std::int64_t vocab_lo,
                                      std::int64_t vocab_size, ConstTensorView wpe,
                                      TensorView out) {
  check_embedding("embedding_shard_forward", tokens, wte_shard, vocab_lo, vocab_size, wpe, out);
  do_embedding_forward(tokens, wte_shard, vocab_lo, wpe, out);
}

void Backend::embedding_backward_weight(std::span<const std::int32_t> tokens, ConstTensorView dout,
                                        TensorView dwte, TensorView dwpe) {
  rank_is("embedding_backward_weight", "dwte", dwte, 2);
  check_embedding("embedding_backward_weight", tokens, dwte, 0, dwte.shape[0], dwpe, dout);
  do_embedding_backward_weight(tokens, dout, 0, dwte, dwpe);
}

void Backend::embedding_shard_backward_weight(std::span<const std::int32_t> tokens,
                                              ConstTensorView dout, std::int64_t vocab_lo,
                                              std::int64_t vocab_size, TensorView dwte_shard,
                                              TensorView dwpe) {
  check_embedding("embedding_shard_backward_weight", tokens, dwte_shard, vocab_lo, vocab_size, dwpe,
                  dout);
  do_embedding_backward_weight(tokens, dout, vocab_lo, dwte_shard, dwpe);
}

// ---- layernorm ------------------------------------------------------------------------------

namespace {

void check_layernorm(const char* op, ConstTensorView x, ConstTensorView mean,
                     ConstTensorView rstd) {
  need(op, "x", x);
  length_n(op, "mean", mean, x.shape.rows());
  length_n(op, "rstd", rstd, x.shape.rows());
}

void check_channel_vector(const char* op, const char* name, ConstTensorView v, ConstTensorView x) {
  rank_is(op, name, v, 1);
  PIPETUNE_TENSOR_CHECK(v.shape[0] == x.shape.last(), op,
                        sh(name, v) + " does not match the channels of " + sh("x", x));
}

}  // namespace

void Backend::layernorm_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                TensorView y, TensorView mean, TensorView rstd) {
  const char* op = "layernorm_forward";
  check_layernorm(op, x, mean, rstd);
  check_channel_vector(op, "w", w, x);
  check_channel_vector(op, "b", b, x);
  same_shape(op, "x", x, "y", y);
  do_layernorm_forward(x, w, b, y, mean, rstd);
}

void Backend::layernorm_backward_input(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                       ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                                       ConstTensorView residual) {
  const char* op = "layernorm_backward_input";
  check_layernorm(op, x, mean, rstd);
  check_channel_vector(op, "w", w, x);
  same_shape(op, "x", x, "dy", dy);
  same_shape(op, "x", x, "dx", dx);
  if (residual.data == nullptr)
    residual = dx;
  else
    same_shape(op, "x", x, "residual", residual);
  do_layernorm_backward_input(dy, x, w, mean, rstd, residual, dx);
}

void Backend::layernorm_backward_weight(ConstTensorView dy, ConstTensorView x, ConstTensorView mean,
                                        ConstTensorView rstd, TensorView dw, TensorView db) {
  const char* op = "layernorm_backward_weight";
  check_layernorm(op, x, mean, rstd);
  same_shape(op, "x", x, "dy", dy);
  check_channel_vector(op, "dw", dw, x);
  check_channel_vector(op, "db", db, x);
  do_layernorm_backward_weight(dy, x, mean, rstd, dw, db);
}

// ---- gelu -----------------------------------------------------------------------------------

void Backend::gelu_forward(ConstTensorView x, TensorView y) {
  same_shape("gelu_forward", "x", x, "y", y);
  do_gelu_forward(x, y);
}

void Backend::gelu_backward_input(ConstTensorView dy, ConstTensorView x, TensorView dx,
                                  GradientWrite write) {
  same_shape("gelu_backward_input", "x", x, "dy", dy);
  same_shape("gelu_backward_input", "x", x, "dx", dx);
  do_gelu_backward_input(dy, x, dx, write);
}

// ---- attention ------------------------------------------------------------------------------

namespace {

// qkv (B, T, 3C) with C a multiple of num_heads, out (B, T, C): what both attention forms share.
void check_qkv_and_out(const char* op, ConstTensorView qkv, std::int64_t nh, ConstTensorView out) {
  rank_is(op, "qkv", qkv, 3);
  rank_is(op, "out", out, 3);
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C3 = qkv.shape[2];
  PIPETUNE_TENSOR_CHECK(nh > 0 && C3 % 3 == 0 && (C3 / 3) % nh == 0, op,
                        sh("qkv", qkv) + " is not (B, T, 3 * num_heads * head_size) for " +
                            "num_heads " + std::to_string(nh));
  PIPETUNE_TENSOR_CHECK(out.shape == Shape({B, T, C3 / 3}), op,
                        sh("out", out) + " must be (B, T, C) for " + sh("qkv", qkv));
}

void check_attention(const char* op, ConstTensorView qkv, std::int64_t nh, ConstTensorView out,
                     ConstTensorView att) {
  check_qkv_and_out(op, qkv, nh, out);
  rank_is(op, "att", att, 4);
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1];
  PIPETUNE_TENSOR_CHECK(att.shape == Shape({B, nh, T, T}), op,
                        sh("att", att) + " must be (B, NH, T, T) for " + sh("qkv", qkv) +
                            " num_heads " + std::to_string(nh));
}

}  // namespace

void Backend::attention_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                                TensorView att) {
  check_attention("attention_forward", qkv, num_heads, out, att);
  do_attention_forward(qkv, num_heads, out, att);
}

void Backend::attention_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                       ConstTensorView att, std::int64_t num_heads,
                                       TensorView dqkv) {
  check_attention("attention_backward_input", qkv, num_heads, dout, att);
  same_shape("attention_backward_input", "qkv", qkv, "dqkv", dqkv);
  do_attention_backward_input(dout, qkv, att, num_heads, dqkv);
}

namespace {

void check_flash(const char* op, ConstTensorView qkv, std::int64_t nh, ConstTensorView out,
                 ConstTensorView lse) {
  check_qkv_and_out(op, qkv, nh, out);
  rank_is(op, "lse", lse, 3);
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1];
  PIPETUNE_TENSOR_CHECK(lse.shape == Shape({B, nh, T}), op,
                        sh("lse", lse) + " must be (B, NH, T) for " + sh("qkv", qkv) +
                            " num_heads " + std::to_string(nh));
}

}  // namespace

void Backend::attention_flash_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                                      TensorView lse) {
  check_flash("attention_flash_forward", qkv, num_heads, out, lse);
  do_attention_flash_forward(qkv, num_heads, out, lse);
}

void Backend::attention_flash_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                             ConstTensorView out, ConstTensorView lse,
                                             std::int64_t num_heads, TensorView dqkv,
                                             GradientWrite write) {
  const char* op = "attention_flash_backward_input";
  check_flash(op, qkv, num_heads, out, lse);
  same_shape(op, "out", out, "dout", dout);
  same_shape(op, "qkv", qkv, "dqkv", dqkv);
  do_attention_flash_backward_input(dout, qkv, out, lse, num_heads, dqkv, write);
}

namespace {

// qkv (B, T, 3C) and the rows [q_begin, T): out (B, T - q_begin, C), lse (B, NH, T - q_begin).
void check_flash_rows(const char* op, ConstTensorView qkv, std::int64_t q_begin, std::int64_t nh,
                      ConstTensorView out, ConstTensorView lse) {
  rank_is(op, "qkv", qkv, 3);
  rank_is(op, "out", out, 3);
  rank_is(op, "lse", lse, 3);
  const std::int64_t B = qkv.shape[0], T = qkv.shape[1], C3 = qkv.shape[2];
  PIPETUNE_TENSOR_CHECK(q_begin >= 0 && q_begin < T, op,
                        "q_begin " + std::to_string(q_begin) + " outside the " + std::to_string(T) +
                            " rows of " + sh("qkv", qkv));
  PIPETUNE_TENSOR_CHECK(nh > 0 && C3 % (3 * nh) == 0, op,
                        sh("qkv", qkv) + " last dim must be 3 * num_heads * head_size, num_heads " +
                            std::to_string(nh));
  const std::int64_t rows = T - q_begin;
  PIPETUNE_TENSOR_CHECK(out.shape == Shape({B, rows, C3 / 3}), op,
                        sh("out", out) + " must be (B, T - q_begin, C) for " + sh("qkv", qkv) +
                            " q_begin " + std::to_string(q_begin));
  PIPETUNE_TENSOR_CHECK(lse.shape == Shape({B, nh, rows}), op,
                        sh("lse", lse) + " must be (B, NH, T - q_begin) for " + sh("qkv", qkv) +
                            " q_begin " + std::to_string(q_begin));
}

}  // namespace

void Backend::attention_flash_forward_rows(ConstTensorView qkv, std::int64_t q_begin,
                                           std::int64_t num_heads, TensorView out, TensorView lse) {
  check_flash_rows("attention_flash_forward_rows", qkv, q_begin, num_heads, out, lse);
  do_attention_flash_forward_rows(qkv, q_begin, num_heads, out, lse);
}

void Backend::attention_flash_backward_input_rows(ConstTensorView dout, ConstTensorView qkv,
                                                  ConstTensorView out, ConstTensorView lse,
                                                  std::int64_t q_begin, std::int64_t num_heads,
                                                  TensorView dqkv) {
  const char* op = "attention_flash_backward_input_rows";
  check_flash_rows(op, qkv, q_begin, num_heads, out, lse);
  same_shape(op, "out", out, "dout", dout);
  same_shape(op, "qkv", qkv, "dqkv", dqkv);
  do_attention_flash_backward_input_rows(dout, qkv, out, lse, q_begin, num_heads, dqkv);
}

void Backend::do_attention_flash_forward_rows(ConstTensorView, std::int64_t, std::int64_t,
                                              TensorView, TensorView) {
  PIPETUNE_TENSOR_CHECK(false, "attention_flash_forward_rows",
                        "the " + std::string(name()) +
                            " backend has no attention over a key prefix (token slices, "
                            "terapipe): run it on the cpu backend");
}

void Backend::do_attention_flash_backward_input_rows(ConstTensorView, ConstTensorView,
                                                     ConstTensorView, ConstTensorView, std::int64_t,
                                                     std::int64_t, TensorView) {
  PIPETUNE_TENSOR_CHECK(false, "attention_flash_backward_input_rows",
                        "the " + std::string(name()) +
                            " backend has no attention over a key prefix (token slices, "
                            "terapipe): run it on the cpu backend");
}

// ---- cross-entropy --------------------------------------------------------------------------

namespace {

void check_logits(const char* op, ConstTensorView logits, std::span<const std::int32_t> targets) {
  rank_is(op, "logits", logits, 2);
  PIPETUNE_TENSOR_CHECK(
      logits.shape[0] == static_cast<std::int64_t>(targets.size()), op,
      sh("logits", logits) + " rows != " + std::to_string(targets.size()) + " targets");
}

}  // namespace

// The unsharded loss is the one-shard case of the vocabulary-parallel protocol: with a single
// shard the local statistics are already the global ones.
float Backend::cross_entropy_forward(ConstTensorView logits, std::span<const std::int32_t> targets,
                                     TensorView losses) {
  const char* op = "cross_entropy_forward";
  check_logits(op, logits, targets);
  tokens_in_range(op, "targets", targets, logits.shape[1]);
  length_n(op, "losses", losses, logits.shape[0]);
  return do_cross_entropy_forward(logits, targets, losses);
}

void Backend::cross_entropy_backward(ConstTensorView logits, std::span<const std::int32_t> targets,
                                     float grad_scale, TensorView dlogits) {
  const char* op = "cross_entropy_backward";
  check_logits(op, logits, targets);
  tokens_in_range(op, "targets", targets, logits.shape[1]);
  same_shape(op, "logits", logits, "dlogits", dlogits);
  do_cross_entropy_backward(logits, targets, grad_scale, dlogits);
}

float Backend::do_cross_entropy_forward(ConstTensorView logits,
                                        std::span<const std::int32_t> targets, TensorView losses) {
  const std::int64_t n = logits.shape[0];
  Tensor max(Shape{n}), sum(Shape{n}), target(Shape{n});
  do_vocab_ce_local_stats(logits, targets, 0, max, sum, target);
  return do_vocab_ce_loss(max, sum, target, losses);
}

void Backend::do_cross_entropy_backward(ConstTensorView logits,
                                        std::span<const std::int32_t> targets, float grad_scale,
                                        TensorView dlogits) {
  const std::int64_t n = logits.shape[0];
  Tensor max(Shape{n}), sum(Shape{n}), target(Shape{n});
  do_vocab_ce_local_stats(logits, targets, 0, max, sum, target);
  do_vocab_ce_backward(logits, targets, 0, max, sum, grad_scale, dlogits,
                       GradientWrite::accumulate);
}

void Backend::vocab_ce_local_stats(ConstTensorView logits_shard,
                                   std::span<const std::int32_t> targets, std::int64_t vocab_lo,
                                   TensorView local_max, TensorView local_sum,
                                   TensorView target_logit) {
  const char* op = "vocab_ce_local_stats";
  check_logits(op, logits_shard, targets);
  PIPETUNE_TENSOR_CHECK(vocab_lo >= 0, op, "negative vocab_lo " + std::to_string(vocab_lo));
  const std::int64_t n = logits_shard.shape[0];
  length_n(op, "local_max", local_max, n);
  length_n(op, "local_sum", local_sum, n);
  length_n(op, "target_logit", target_logit, n);
  do_vocab_ce_local_stats(logits_shard, targets, vocab_lo, local_max, local_sum, target_logit);
}

void Backend::vocab_ce_rescale_sum(ConstTensorView local_max, ConstTensorView global_max,
                                   TensorView local_sum) {
  const char* op = "vocab_ce_rescale_sum";
  length_n(op, "global_max", global_max, local_max.numel());
  length_n(op, "local_sum", local_sum, local_max.numel());
  do_vocab_ce_rescale_sum(local_max, global_max, local_sum);
}

float Backend::vocab_ce_loss(ConstTensorView global_max, ConstTensorView global_sum,
                             ConstTensorView target_logit, TensorView losses) {
  const char* op = "vocab_ce_loss";
  need(op, "global_max", global_max);
  const std::int64_t n = global_max.numel();
  length_n(op, "global_sum", global_sum, n);
  length_n(op, "target_logit", target_logit, n);
  length_n(op, "losses", losses, n);
  return do_vocab_ce_loss(global_max, global_sum, target_logit, losses);
}

void Backend::vocab_ce_backward(ConstTensorView logits_shard, std::span<const std::int32_t> targets,
                                std::int64_t vocab_lo, ConstTensorView global_max,
                                ConstTensorView global_sum, float grad_scale,
                                TensorView dlogits_shard, GradientWrite write) {
  const char* op = "vocab_ce_backward";
  check_logits(op, logits_shard, targets);
  const std::int64_t n = logits_shard.shape[0];
  length_n(op, "global_max", global_max, n);
  length_n(op, "global_sum", global_sum, n);
  same_shape(op, "logits_shard", logits_shard, "dlogits_shard", dlogits_shard);
  PIPETUNE_TENSOR_CHECK(
      write == GradientWrite::overwrite || dlogits_shard.data != logits_shard.data, op,
      "the gradient in place of the logits needs GradientWrite::overwrite");
  do_vocab_ce_backward(logits_shard, targets, vocab_lo, global_max, global_sum, grad_scale,
                       dlogits_shard, write);
}

void Backend::vocab_ce_numerators(ConstTensorView logits_shard, ConstTensorView row_max,
                                  TensorView numerators) {
  const char* op = "vocab_ce_numerators";
  rank_is(op, "logits_shard", logits_shard, 2);
  length_n(op, "row_max", row_max, logits_shard.shape[0]);
  same_shape(op, "logits_shard", logits_shard, "numerators", numerators);
  do_vocab_ce_numerators(logits_shard, row_max, numerators);
}

void Backend::vocab_ce_input_grad(ConstTensorView shard_max, ConstTensorView global_max,
                                  ConstTensorView global_sum, ConstTensorView weights,
                                  ConstTensorView target_rows, float grad_scale, TensorView dx) {
  const char* op = "vocab_ce_input_grad";
  rank_is(op, "dx", dx, 2);
  const std::int64_t n = dx.shape[0];
  length_n(op, "shard_max", shard_max, n);
  length_n(op, "global_max", global_max, n);
  length_n(op, "global_sum", global_sum, n);
  same_shape(op, "dx", dx, "weights", weights);
  same_shape(op, "dx", dx, "target_rows", target_rows);
  do_vocab_ce_input_grad(shard_max, global_max, global_sum, weights, target_rows, grad_scale, dx);
}

}  // namespace pipetune::tensor
