#include "engine/model/dense_mlp.hpp"

#include <cmath>

#include "engine/model/buffers.hpp"

namespace pipetune::model {

using tensor::ConstTensorView;
using tensor::Shape;
using tensor::TensorView;

std::size_t DenseMlpActivations::bytes() const {
  return bytes_of(fc) + bytes_of(gelu) + bytes_of(dout) + bytes_of(dfc);
}

void DenseMlpActivations::clear() {
  release(fc);
  release(gelu);
  release(dout);
  release(dfc);
}

DenseMlp::DenseMlp(const ModelConfig& config, const std::string& prefix, int tp_size, int tp_rank,
                   ParameterSet& params)
    : params_(&params),
      hidden_(config.hidden),
      ffn_local_(config.ffn / tp_size),
      tp_rank_(tp_rank) {
  const std::int64_t C = config.hidden, F = config.ffn, Fl = ffn_local_;
  const std::int64_t lo = tp_rank * Fl, hi = lo + Fl;
  const float proj_std = config.init_std / std::sqrt(2.0f * static_cast<float>(config.layers));
  fc_w_ = params.add({prefix + "fc.w", Shape{Fl, C}, ShardLayout::row_blocks(F, C, 1, lo, hi),
                      false, true, Init::Normal, config.init_std});
  fc_b_ = params.add({prefix + "fc.b", Shape{Fl}, ShardLayout::row_blocks(F, 1, 1, lo, hi), false,
                      false, Init::Zeros, 0.0f});
  proj_w_ = params.add({prefix + "proj.w", Shape{C, Fl}, ShardLayout::columns(C, F, lo, hi), false,
                        true, Init::Normal, proj_std});
  proj_b_ = params.add(
      {prefix + "proj.b", Shape{C}, ShardLayout::whole(C), true, false, Init::Zeros, 0.0f});
}

void DenseMlp::forward(const ParallelContext& ctx, ConstTensorView x, TensorView out,
                       DenseMlpActivations& a, bool reduce) {
  const std::int64_t N = x.shape.rows(), Fl = ffn_local_;
  auto& be = ctx.be();
  TensorView fc = sized(a.fc, Shape{N, Fl});   // (N, F/tp): pre-activation, kept for the backward
  TensorView g = sized(a.gelu, Shape{N, Fl});  // (N, F/tp)
  be.linear_gelu_forward(x, params_->param(fc_w_), params_->param(fc_b_), fc, g);
  // Row-parallel: the bias joins on TP rank 0 only, so the TP sum adds it once.
  ConstTensorView bias =
      tp_rank_ == 0 ? ConstTensorView(params_->param(proj_b_)) : ConstTensorView{};
  be.linear_forward(g, params_->param(proj_w_), bias, out);  // (N, C) partial
  if (reduce) ctx.tp_all_reduce(out);
}

void DenseMlp::backward_input(const ParallelContext& ctx, ConstTensorView dout, TensorView dx,
                              DenseMlpActivations& a, bool reduce) {
  const std::int64_t N = dout.shape.rows(), C = hidden_, Fl = ffn_local_;
  auto& be = ctx.be();
  TensorView kept = sized(a.dout, Shape{N, C});  // (N, C)
  copy_values(dout, kept);
  // dfc = gelu'(fc) (dout W), written over the fresh buffer (no memset, no dgelu temporary).
  TensorView dfc = sized(a.dfc, Shape{N, Fl});  // (N, F/tp)
  be.linear_gelu_backward_input(dout, params_->param(proj_w_), view(a.fc, Shape{N, Fl}), dfc);
  release(a.fc);
  // dx gets this rank's partial; the TP sum (in place) completes it.
  be.linear_backward_input(dfc, params_->param(fc_w_), dx, tensor::GradientWrite::overwrite);
  if (reduce && ctx.tp_size > 1) ctx.tp_all_reduce(dx);
}

void DenseMlp::backward_weight(const ParallelContext& ctx, ConstTensorView x,
                               DenseMlpActivations& a) {
  const std::int64_t N = x.shape.rows(), C = hidden_, Fl = ffn_local_;
  auto& be = ctx.be();
  be.linear_backward_weight(view(a.dout, Shape{N, C}), view(a.gelu, Shape{N, Fl}),
                            params_->grad(proj_w_), params_->grad(proj_b_));
  be.linear_backward_weight(view(a.dfc, Shape{N, Fl}), x, params_->grad(fc_w_),
                            params_->grad(fc_b_));
  a.clear();
}

void DenseMlp::backward(const ParallelContext& ctx, ConstTensorView x, ConstTensorView dout,
                        TensorView dx, DenseMlpActivations& a, bool reduce) {
  const std::int64_t N = dout.shape.rows(), Fl = ffn_local_;
  auto& be = ctx.be();
  TensorView dfc = sized(a.dfc, Shape{N, Fl});  // (N, F/tp)
  be.linear_gelu_backward(dout, view(a.gelu, Shape{N, Fl}), params_->param(proj_w_),
                          view(a.fc, Shape{N, Fl}), dfc, params_->grad(proj_w_),
                          params_->grad(proj_b_));
  release(a.fc);
  release(a.gelu);
  be.linear_backward(dfc, x, params_->param(fc_w_), dx, tensor::GradientWrite::overwrite,
                     params_->grad(fc_w_), params_->grad(fc_b_));
  if (reduce && ctx.tp_size > 1) ctx.tp_all_reduce(dx);
  a.clear();
}

}  // namespace pipetune::model
