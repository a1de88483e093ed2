// The vocabulary-parallel passes of RankRuntime (Vocabulary Parallelism, Yeung et al. 2024):
// S computes this shard's logits and softmax statistics, T the logits' gradient and the output
// layer's weight gradient, IF a partial input embedding, IB the input embedding's weight
// gradient. Barriers are exchanges of buffered messages (see rank_runtime.hpp).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/model/buffers.hpp"
#include "engine/model/sequence_rows.hpp"
#include "engine/runtime/rank_runtime.hpp"
#include "engine/runtime/rank_runtime_state.hpp"
#include "profiler/analysis/embedding_rows.hpp"

namespace pipetune::runtime {

using model::release;
using model::sized;
using model::view;
using model::zeros;
using tensor::ConstTensorView;
using tensor::HostAccess;
using tensor::Shape;
using tensor::TensorView;

void RankRuntime::vocab_output_forward(int mb) {
  const std::int64_t N = rows(), C = config_.hidden, Vs = model_->vocab().rows();
  auto& m = *model_;
  auto& be = ctx_.be();
  const auto& targets = (*batches_)[static_cast<std::size_t>(mb)].targets;
  const int last = m.placement().groups - 1;
  VocabState& v = vocab_[mb];
  TensorView hidden = sized(v.hidden, Shape{N, C});
  mailbox_.take(group_rank(last), MessageKind::FinalHidden, 0, mb,
                {hidden.data, static_cast<std::size_t>(hidden.numel())});
  TensorView logits = sized(v.logits, Shape{N, Vs});  // (N, Vp/shards)
  be.linear_forward(hidden, m.dense.param(m.head()), {}, logits);
  be.fill_columns(logits, m.vocab().first_padding(config_.vocab), model::kPaddedLogit);

  model::Buffer stats(static_cast<std::size_t>(3 * N));  // [max | sum | target] (3, N)
  TensorView lmax{stats.data(), Shape{N}}, lsum{stats.data() + N, Shape{N}},
      target{stats.data() + 2 * N, Shape{N}};
  be.vocab_ce_local_stats(logits, targets, m.vocab().lo, lmax, lsum, target);
  if (ctx_.tp_size > 1) {
    model::Buffer local_max = model::copy_of(stats, 0, static_cast<std::size_t>(N));
    ctx_.tp_all_reduce(lmax, comm::ReduceOp::max);
    be.vocab_ce_rescale_sum(view(local_max, Shape{N}), lmax, lsum);
    ctx_.tp_all_reduce(lsum);
    ctx_.tp_all_reduce(target);
  }
  for (int dst : vocab_group_.ranks) mailbox_.post(dst, MessageKind::Stats, 0, mb, stats);

  if (schedule_->vocab == schedule::VocabMode::Vocab2) {
    // Algorithm 2: send what lets the last group's B form the hidden state's gradient right
    // after the one barrier: A = sum_v exp(l_v - max) W_v and the target's row W_t.
    model::Buffer weights;
    zeros(weights, Shape{2 * N * C});  // [A | W_t] (2, N, C)
    model::Buffer p_buf;
    TensorView p = sized(p_buf, Shape{N, Vs});
    be.vocab_ce_numerators(logits, lmax, p);
    TensorView a{weights.data(), Shape{N, C}}, wt{weights.data() + N * C, Shape{N, C}};
    be.linear_backward_input(p, m.dense.param(m.head()), a);
    // W_t: the head's row of each target in this shard, zero for the others: a lookup.
    be.embedding_shard_forward(targets, m.dense.param(m.head()), m.vocab().lo, m.vocab_rows(), {},
                               TensorView{wt.data, Shape{batch_, seq_, C}});
    if (ctx_.tp_size > 1) {
      TensorView both{weights.data(), Shape{2 * N, C}};
      ctx_.tp_all_reduce(both);
    }
    mailbox_.post(group_rank(last), MessageKind::SoftmaxWeights, 0, mb, weights);
  }
}

RankRuntime::VocabState& RankRuntime::collect_stats(int mb) {
  VocabState& v = vocab_[mb];
  if (v.stats_ready) return v;
  const std::int64_t N = rows();
  const auto members = static_cast<std::int64_t>(vocab_group_.ranks.size());
  model::Buffer all_buf;
  TensorView all_view = sized(all_buf, Shape{members * 3 * N});  // (members, 3, N)
  for (std::int64_t i = 0; i < members; ++i)
    mailbox_.take(vocab_group_.ranks[static_cast<std::size_t>(i)], MessageKind::Stats, 0, mb,
                  {all_buf.data() + i * 3 * N, static_cast<std::size_t>(3 * N)});
  {
    // Host loops over the statistics (on a device: over host copies, written back after).
    tensor::DeviceAllocator& storage = model::rank_storage();
    const HostAccess all(storage, all_view);
    HostAccess gmax(storage, sized(v.gmax, Shape{N}), HostAccess::Mode::write);
    HostAccess gsum(storage, sized(v.gsum, Shape{N}), HostAccess::Mode::write);
    HostAccess target(storage, sized(v.target, Shape{N}), HostAccess::Mode::write);
    HostAccess peer_max(storage, sized(v.peer_max, Shape{members * N}), HostAccess::Mode::write);
    std::fill_n(gmax.data(), N, -INFINITY);
    std::fill_n(gsum.data(), N, 0.0f);
    std::fill_n(target.data(), N, 0.0f);
    for (std::int64_t i = 0; i < members; ++i)
      for (std::int64_t n = 0; n < N; ++n) {
        peer_max[static_cast<std::size_t>(i * N + n)] =
            all[static_cast<std::size_t>(i * 3 * N + n)];
        gmax[static_cast<std::size_t>(n)] = std::max(gmax[static_cast<std::size_t>(n)],
                                                     all[static_cast<std::size_t>(i * 3 * N + n)]);
      }
    // Combined in group order, like the communicator's deterministic reductions.
    for (std::int64_t i = 0; i < members; ++i)
      for (std::int64_t n = 0; n < N; ++n) {
        const auto k = static_cast<std::size_t>(n);
        const float mi = all[static_cast<std::size_t>(i * 3 * N + n)];
        gsum[k] += all[static_cast<std::size_t>(i * 3 * N + N + n)] * std::exp(mi - gmax[k]);
        target[k] += all[static_cast<std::size_t>(i * 3 * N + 2 * N + n)];
      }
    gmax.commit();
    gsum.commit();
    target.commit();
    peer_max.commit();
  }
  v.stats_ready = true;
  const bool holds_last = rank_ == group_rank(model_->placement().groups - 1);
  v.stats_uses_left = schedule_->vocab == schedule::VocabMode::Vocab2 && holds_last ? 2 : 1;
  return v;
}

void RankRuntime::vocab_output_backward(int mb) {
  const std::int64_t N = rows(), C = config_.hidden, Vs = model_->vocab().rows();
  auto& m = *model_;
  auto& be = ctx_.be();
  const auto& targets = (*batches_)[static_cast<std::size_t>(mb)].targets;
  const int last = m.placement().groups - 1;
  VocabState& v = collect_stats(mb);
  if (rank_ == group_rank(last)) {
    model::Buffer losses_buf;
    const float loss = be.vocab_ce_loss(view(v.gmax, Shape{N}), view(v.gsum, Shape{N}),
                                        view(v.target, Shape{N}), sized(losses_buf, Shape{N}));
    if (!std::isfinite(loss))
      throw std::runtime_error("step " + std::to_string(step_) + ": loss is " +
                               (std::isnan(loss) ? "nan" : "inf") + " on rank " +
                               std::to_string(rank_) + " (micro-batch " + std::to_string(mb) + ")");
    losses_.loss_sum += loss;
    losses_.loss_microbatches += 1;
  }
  // The gradient in the logits' place (each element read before it is written): no second
  // (N, V shard) buffer and no pass zeroing one.
  TensorView dlogits = view(v.logits, Shape{N, Vs});
  be.vocab_ce_backward(dlogits, targets, m.vocab().lo, view(v.gmax, Shape{N}),
                       view(v.gsum, Shape{N}), grad_scale_ / static_cast<float>(N), dlogits,
                       tensor::GradientWrite::overwrite);
  if (schedule_->vocab != schedule::VocabMode::Vocab2) {
    // C2: this shard's part of the final hidden state's gradient, to the last group's rank,
    // and the head's weight gradient from the same dlogits (one bf16 copy of it on CUDA).
    model::Buffer dx_buf;
    TensorView dx = sized(dx_buf, Shape{N, C});
    be.linear_backward(dlogits, view(v.hidden, Shape{N, C}), m.dense.param(m.head()), dx,
                       tensor::GradientWrite::overwrite, m.dense.grad(m.head()), {});
    ctx_.tp_all_reduce(dx);
    mailbox_.post(group_rank(last), MessageKind::OutputGrad, 0, mb, dx_buf);
  } else {
    be.linear_backward_weight(dlogits, view(v.hidden, Shape{N, C}), m.dense.grad(m.head()), {});
  }
  release(v.hidden);
  release(v.logits);
  v.output_done = true;
  if (--v.stats_uses_left == 0) vocab_.erase(mb);
}

void RankRuntime::output_backward_vocab(ChunkState& s, int mb, TensorView dy_final) {
  const std::int64_t N = rows(), Nl = local_rows(), C = config_.hidden;
  auto& m = *model_;
  auto& be = ctx_.be();
  // Every row's gradient arrives whole; under sequence parallelism this rank keeps its rows.
  model::Buffer dlnf_rows;
  TensorView dlnf = zeros(ctx_.sequence_parallel ? dlnf_rows : s.dlnf, Shape{N, C});
  if (schedule_->vocab == schedule::VocabMode::Vocab2) {
    VocabState& v = collect_stats(mb);
    const float scale = grad_scale_ / static_cast<float>(N);
    model::Buffer weights;
    sized(weights, Shape{2 * N * C});
    for (std::size_t i = 0; i < vocab_group_.ranks.size(); ++i) {
      mailbox_.take(vocab_group_.ranks[i], MessageKind::SoftmaxWeights, 0, mb, weights);
      const TensorView peer_max{v.peer_max.data() + static_cast<std::int64_t>(i) * N, Shape{N}};
      be.vocab_ce_input_grad(peer_max, view(v.gmax, Shape{N}), view(v.gsum, Shape{N}),
                             TensorView{weights.data(), Shape{N, C}},
                             TensorView{weights.data() + N * C, Shape{N, C}}, scale, dlnf);
    }
    if (--v.stats_uses_left == 0) vocab_.erase(mb);
  } else {
    model::Buffer part(static_cast<std::size_t>(N * C));
    for (int src : vocab_group_.ranks) {
      mailbox_.take(src, MessageKind::OutputGrad, 0, mb, part);
      be.accumulate(dlnf, view(part, Shape{N, C}));
    }
  }
  if (ctx_.sequence_parallel) {
    model::copy_own_rows(ctx_, dlnf, sized(s.dlnf, Shape{Nl, C}));
    dlnf = view(s.dlnf, Shape{Nl, C});
  }
  model::fill_zero(dy_final);
  be.layernorm_backward_input(dlnf, view(s.out, Shape{Nl, C}), m.dense.param(m.lnf_w()),
                              view(s.lnf_mean, Shape{Nl}), view(s.lnf_rstd, Shape{Nl}), dy_final);
}

void RankRuntime::vocab_input_forward(int mb) {
  const std::int64_t N = rows(), C = config_.hidden;
  auto& m = *model_;
  const auto& tokens = (*batches_)[static_cast<std::size_t>(mb)].inputs;
  model::Buffer part(static_cast<std::size_t>(N * C));
  ConstTensorView wpe = m.wpe() >= 0 && ctx_.tp_rank == 0 ? ConstTensorView(m.dense.param(m.wpe()))
                                                          : ConstTensorView{};
  ctx_.be().embedding_shard_forward(tokens, m.dense.param(m.wte()), m.vocab().lo, m.vocab_rows(),
                                    wpe, TensorView{part.data(), Shape{batch_, seq_, C}});
  ctx_.tp_all_reduce(TensorView{part.data(), Shape{N, C}});
  mailbox_.post(group_rank(0), MessageKind::EmbeddingPart, 0, mb, part);
}

void RankRuntime::vocab_input_backward(int mb) {
  const std::int64_t C = config_.hidden;
  auto& m = *model_;
  const auto& tokens = (*batches_)[static_cast<std::size_t>(mb)].inputs;
  model::Buffer demb(static_cast<std::size_t>(rows() * C));
  mailbox_.take(group_rank(0), MessageKind::EmbeddingGrad, 0, mb, demb);
  TensorView dwpe = m.wpe() >= 0 ? m.dense.grad(m.wpe()) : TensorView{};
  ctx_.be().embedding_shard_backward_weight(tokens, view(demb, Shape{batch_, seq_, C}),
                                            m.vocab().lo, m.vocab_rows(), m.dense.grad(m.wte()),
                                            dwpe);
  note_touched_embedding_rows(tokens);
}

void RankRuntime::note_touched_embedding_rows(std::span<const std::int32_t> tokens) {
  const bool measure = recorder_ != nullptr && recorder_->enabled();
  if (!record_touched_ && !measure) return;
  const auto& m = *model_;
  const std::int64_t lo = m.vocab().lo, rows = m.vocab().rows();  // this rank's shard
  const auto n = static_cast<std::size_t>(rows);
  if (record_touched_) touched_rows_.resize(n, 0);
  if (measure) {
    step_rows_.resize(n, 0);
    step_tokens_ += static_cast<std::int64_t>(tokens.size());
  }
  for (const std::int32_t t : tokens) {
    if (t < lo || t >= lo + rows) continue;
    const auto r = static_cast<std::size_t>(t - lo);
    if (record_touched_) touched_rows_[r] = 1;
    if (measure) step_rows_[r] = 1;
  }
}

void RankRuntime::record_embedding_rows() {
  if (step_tokens_ == 0 || recorder_ == nullptr || !recorder_->enabled()) return;
  namespace an = profiler::analysis;
  const auto touched = std::count(step_rows_.begin(), step_rows_.end(), char{1});
  recorder_->counter(an::kEmbeddingRowsTouched, static_cast<double>(touched));
  recorder_->counter(an::kEmbeddingTokens, static_cast<double>(step_tokens_));
  recorder_->counter(an::kEmbeddingShardRows, static_cast<double>(model_->vocab().rows()));
  recorder_->counter(an::kEmbeddingVocab, static_cast<double>(config_.vocab));
  step_rows_.assign(step_rows_.size(), 0);
  step_tokens_ = 0;
}

std::vector<std::int32_t> RankRuntime::take_touched_embedding_rows() {
  std::vector<std::int32_t> rows;
  for (std::size_t r = 0; r < touched_rows_.size(); ++r)
    if (touched_rows_[r]) rows.push_back(static_cast<std::int32_t>(r));
  touched_rows_.assign(touched_rows_.size(), 0);
  return rows;
}

}  // namespace pipetune::runtime
