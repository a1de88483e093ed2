#include "engine/runtime/rank_runtime.hpp"

#include <chrono>

#include <thread>

#include "engine/schedule/span_kinds.hpp"

#include "engine/runtime/rank_runtime_state.hpp"
#include "engine/runtime/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/errors.hpp"
#include "engine/model/buffers.hpp"
#include "engine/model/sequence_rows.hpp"
#include "engine/schedule/dependencies.hpp"

namespace pipetune::runtime {

using model::release;
using model::sized;
using model::view;
using model::zeros;
using schedule::Op;
using schedule::OpKind;
using tensor::ConstTensorView;
using tensor::Shape;
using tensor::TensorView;

namespace {

model::RankPlacement make_placement(const model::ModelConfig& config,
                                    const spec::ParallelPlan& plan,
                                    const std::vector<int>& layer_split,
                                    const schedule::Schedule& s, const comm::RankCoordinates& at,
                                    int stage_tp) {
  model::RankPlacement p;
  // The rank's own stage's tp degree (per-stage layouts): its shards are of the same global
  // weights as every other layout's, so initialisation and captured tensors line up.
  p.tp_size = stage_tp;
  p.tp_rank = at.tp_rank;
  p.ep_size = plan.ep;
  p.ep_rank = at.ep_rank;
  p.groups = s.groups();
  std::vector<std::int64_t> first(layer_split.size() + 1, 0);
  for (std::size_t g = 0; g < layer_split.size(); ++g) first[g + 1] = first[g] + layer_split[g];
  for (int c = 0; c < s.chunks; ++c) {
    const int g = s.group_of(at.pp_rank, c);
    p.chunks.push_back(
        {g, first[static_cast<std::size_t>(g)], layer_split[static_cast<std::size_t>(g)]});
  }
  p.vocab_parallel = s.vocab != schedule::VocabMode::None;
  // Vocabulary parallelism needs equal tp degrees (spec::validate): plan.tp is every stage's.
  p.vocab_shards = p.vocab_parallel ? plan.tp * plan.pp : stage_tp;
  p.vocab_index = p.vocab_parallel ? at.pp_rank * plan.tp + at.tp_rank : at.tp_rank;
  p.holds_position_embedding = at.pp_rank == s.rank_of_group(0);
  (void)config;
  return p;
}

}  // namespace

RankRuntime::RankRuntime(const model::ModelConfig& config, const spec::ParallelPlan& plan,
                         const std::vector<int>& layer_split, const schedule::Schedule& schedule,
                         const comm::Topology& topology, comm::Communicator& comm,
                         tensor::Backend& backend, profiler::RankRecorder* recorder)
    : config_(config),
      plan_(plan),
      schedule_(&schedule),
      topology_(&topology),
      comm_(&comm),
      recorder_(recorder),
      rank_(comm.rank()),
      pp_rank_(topology.coordinates(comm.rank()).pp_rank),
      mailbox_(comm, recorder) {
  const comm::RankCoordinates at = topology.coordinates(rank_);
  const int stage_tp = topology.tp_of_stage(pp_rank_);
  // Pipeline peers per stage: whose copy this rank takes, and who takes its (more than one, or
  // none, where the stages' tp degrees differ: topology.hpp).
  for (int p = 0; p < topology.pp(); ++p) {
    stage_sender_.push_back(topology.pipeline_sender(rank_, p));
    stage_receivers_.push_back(topology.pipeline_receivers(rank_, p));
  }
  ctx_.backend = &backend;
  ctx_.comm = &comm;
  ctx_.tp_group = topology.tp_group(rank_);
  ctx_.ep_group = topology.ep_group(rank_);
  if (topology.ep_node_ranks() > 0) {
    ctx_.ep_node_group = topology.group(comm::GroupKind::expert_node, rank_);
    ctx_.ep_cross_group = topology.group(comm::GroupKind::expert_cross, rank_);
  }
  ctx_.tp_rank = at.tp_rank;
  ctx_.tp_size = stage_tp;
  ctx_.ep_rank = at.ep_rank;
  ctx_.ep_size = plan.ep;
  ctx_.sequence_parallel = plan.sequence_parallel && stage_tp > 1;
  ctx_.recorder = recorder;
  if (recorder != nullptr && recorder->enabled()) {
    ctx_.all_to_all_name = recorder->intern("all_to_all");
    ctx_.recompute_name = recorder->intern("recompute");
    gradient_scatter_name_ = recorder->intern("gradient reduce-scatter");
    parameter_gather_name_ = recorder->intern("parameter all-gather");
  }
  vocab_parallel_ = schedule.vocab != schedule::VocabMode::None;
  // Only the vocabulary passes use it (and the topology has none for per-stage layouts).
  if (vocab_parallel_) vocab_group_ = topology.vocab_group(rank_);
  // The stage's own recomputation (Merak's stage-aware recomputation): all of this pipeline
  // rank's layer groups recompute as plan.stage_recompute says for it, else as plan.recompute.
  config_.recompute = spec::recompute_of_stage(plan, pp_rank_);
  model_ = std::make_unique<model::RankModel>(
      config_, make_placement(config_, plan, layer_split, schedule, at, stage_tp));
  for (int i = 0; i < model_->dense.count(); ++i)
    if (model_->dense.entry(i).sequence_parallel) sequence_parallel_grads_.push_back(i);
}

RankRuntime::~RankRuntime() = default;

int RankRuntime::group_rank(int group) const {
  return stage_sender_[static_cast<std::size_t>(schedule_->rank_of_group(group))];
}

const std::vector<int>& RankRuntime::group_receivers(int group) const {
  return stage_receivers_[static_cast<std::size_t>(schedule_->rank_of_group(group))];
}

RankRuntime::ChunkState& RankRuntime::chunk_state(int chunk, int mb) {
  return chunks_[static_cast<std::int64_t>(chunk) * schedule_->microbatches + mb];
}

void RankRuntime::drop_chunk_state(int chunk, int mb) {
  chunks_.erase(static_cast<std::int64_t>(chunk) * schedule_->microbatches + mb);
}

std::size_t RankRuntime::activation_bytes() const {
  std::size_t b = 0;
  for (const auto& [key, s] : chunks_) b += s.bytes();
  for (const auto& [key, keys] : slice_keys_)
    for (const auto& k : keys) b += k.bytes();
  for (const auto& [key, v] : vocab_) b += v.bytes();
  return b;
}

IterationLosses RankRuntime::run_schedule(const std::vector<data::Batch>& batches,
                                          std::int64_t step) {
  if (static_cast<int>(batches.size()) != schedule_->data_microbatches())
    throw std::logic_error("run_schedule: " + std::to_string(batches.size()) + " batches for " +
                           std::to_string(schedule_->data_microbatches()) + " micro-batches");
  batches_ = &batches;
  step_ = step;
  batch_ = batches.front().batch_size;
  seq_ = full_seq_ = batches.front().seq_len;
  slice_begin_ = 0;
  if (schedule_->slices > 1) slice_tokens_ = schedule::slice_token_counts(*schedule_, full_seq_);
  grad_scale_ = 1.0f / static_cast<float>(schedule_->data_microbatches() * plan_.dp);
  losses_ = {};
  expert_tokens_.clear();
  step_rows_.assign(step_rows_.size(), 0);  // an iteration abandoned before its end counts none
  step_tokens_ = 0;
  if (plan_.offload_activations && !offload_)
    offload_ = std::make_unique<ActivationOffload>(model::rank_storage(), recorder_);
  const std::vector<Op>& ops = schedule_->ranks[static_cast<std::size_t>(pp_rank_)];
  holds_gradients_ = sharding_.reduce_gradients && schedule::reduces_per_group(*schedule_);
  holds_ =
      holds_gradients_ ? schedule::group_holds(ops, schedule_->chunks) : schedule::GroupHolds{};
  try {
    run_ops(ops, step);
  } catch (...) {
    abandon_reductions(std::current_exception());
    throw;
  }
  wait_for_reductions();
  record_expert_tokens();
  record_embedding_rows();
  if (offload_) offload_->drain();
  if (!chunks_.empty() || !vocab_.empty() || !slice_keys_.empty())
    throw std::logic_error("run_schedule: activations left after the iteration on rank " +
                           std::to_string(rank_));
  return losses_;
}

bool RankRuntime::pair_overlaps(const Op& first, const Op& second) const {
  return pair_device_ != nullptr && pair_device_->overlaps_pairs() && first.chunk != second.chunk &&
         plan_.zero_stage < 2 && !offload_;
}

void RankRuntime::run_ops(const std::vector<Op>& ops, std::int64_t step) {
  // A pair that runs at once and has not ended; a failure inside it ends it on the way out, so
  // the device is back on one stream and the held blocks are reusable for whatever runs next.
  bool pair_open = false;
  struct PairGuard {
    RankDevice* device;
    bool& open;
    ~PairGuard() {
      if (!open) return;
      try {
        device->end_pair();
      } catch (...) {  // a failed device: the op's own error is already on its way
      }
      if (model::BufferCache* cache = model::BufferCache::current()) cache->end_hold();
    }
  } pair_guard{pair_device_, pair_open};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    comm_->note_progress(step, profiler::span_kind_name(schedule::span_kind_of(op.kind)),
                         op.microbatch);
    // On the reduction thread, timed there (no inputs to receive, no activations change).
    if (schedule::is_reduction(op.kind) && submit_reduction(op.chunk)) continue;
    if (i == 0 && fault_ != nullptr) inject_fault(op, step);
    select_unit(op.microbatch);  // token slices: this op's slice's rows
    // An overlapped pair (DualPipeV's "F & B") starts once both inputs are there, as the
    // simulator times it: the second op's input is received with the first's. On a device that
    // runs two ops at once (a GPU rank's second stream) the second op is issued beside the first
    // and the rank waits for both after it; elsewhere the two compute back to back, each sending
    // its output as it ends.
    const bool pair_first = i + 1 < ops.size() && ops[i + 1].overlaps_previous;
    if (!op.overlaps_previous) receive_inputs(op);
    if (pair_first) receive_inputs(ops[i + 1]);
    if (pair_first && pair_overlaps(op, ops[i + 1])) {
      pair_device_->begin_pair();
      ++pairs_run_at_once_;
      // Blocks freed during the pair wait for its end (BufferCache::hold_releases).
      if (model::BufferCache* cache = model::BufferCache::current()) cache->hold_releases();
      pair_open = true;
    } else if (op.overlaps_previous && pair_open) {
      pair_device_->second_of_pair();
    }
    if (offload_) offload_before_op(i);
    {
      // The ops of an overlapped pair are named after it ("F3.0&BW1.1"), as the simulator names
      // them.
      profiler::NameId name = 0;
      if (recorder_ != nullptr && (pair_first || op.overlaps_previous))
        name = recorder_->intern(pair_first ? schedule::pair_label(op, ops[i + 1])
                                            : schedule::pair_label(ops[i - 1], op));
      // A layer group's gradient reduction is communication: on the rank's comm stream.
      const bool reduction = schedule::is_reduction(op.kind);
      profiler::ScopedSpan span(recorder_, schedule::span_kind_of(op.kind),
                                reduction ? profiler::Stream::Comm : profiler::Stream::Compute,
                                reduction ? -1 : op.microbatch,
                                schedule::is_vocab_op(op.kind) ? -1 : op.chunk, -1, name);
      const bool holds = holds_gradients_ && !reduction;
      if (holds && holds_.gather_before[i]) hold_parameters(op.chunk);
      run_op(op);
      if (holds && holds_.release_after[i]) release_held_parameters();
      // A device computes asynchronously: the op's span ends when its kernels have run, so a
      // GPU rank's spans time its ops as the simulator does (other ranks' streams still overlap).
      // The first op of a pair that runs at once with the second ends when it is issued; the
      // second's span then ends when both have run, so the pair's two spans cover its time.
      if (pair_open && op.overlaps_previous) pair_device_->end_pair();
      if (tensor::DeviceAllocator* device = model::device_storage();
          device != nullptr && !(pair_open && pair_first))
        device->synchronize();
      if (pair_open && op.overlaps_previous) {
        pair_open = false;
        if (model::BufferCache* cache = model::BufferCache::current()) cache->end_hold();
      }
    }
    if (offload_) offload_after_op(i);
    if (recorder_ != nullptr) {
      const auto now = static_cast<std::int64_t>(activation_bytes());
      if (now > ledger_activations_)
        recorder_->memory().allocate(profiler::MemoryCategory::Activations,
                                     now - ledger_activations_);
      else if (now < ledger_activations_)
        recorder_->memory().release(profiler::MemoryCategory::Activations,
                                    ledger_activations_ - now);
      ledger_activations_ = now;
    }
  }
}

std::int64_t RankRuntime::layer_of(int chunk, std::size_t block) const {
  return model_->placement().chunks[static_cast<std::size_t>(chunk)].first_layer +
         static_cast<std::int64_t>(block);
}

void RankRuntime::inject_fault(const Op& op, std::int64_t step) {
  if (fault_->rank != rank_ || fault_->step != step) return;
  const std::string where = "rank " + std::to_string(rank_) + ", step " + std::to_string(step) +
                            ", before " +
                            std::string(profiler::span_kind_name(schedule::span_kind_of(op.kind))) +
                            " of micro-batch " + std::to_string(op.microbatch);
  switch (fault_->kind) {
    case InjectedFault::Kind::Throw:
      throw InjectedFaultError(where);
    case InjectedFault::Kind::Hang:
      // Stops taking part, as a stuck rank does, until the run is ended around it (the others'
      // watchdog; with processes, the launcher ends this one).
      for (;;) {
        comm_->throw_if_aborted();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    case InjectedFault::Kind::Slow:
      std::this_thread::sleep_for(std::chrono::duration<double>(fault_->slow_seconds));
      return;
  }
}

void RankRuntime::receive_inputs(const Op& op) {
  // Between stages a rank sends its rows; the vocabulary passes exchange every row.
  const auto count = static_cast<std::size_t>(rows() * config_.hidden);
  const auto local = static_cast<std::size_t>(local_rows() * config_.hidden);
  const auto& placement = model_->placement();
  const int last = placement.groups - 1;
  const auto group_of = [&](int chunk) {
    return placement.chunks[static_cast<std::size_t>(chunk)].group;
  };
  switch (op.kind) {
    case OpKind::F: {
      const int group = group_of(op.chunk);
      if (group > 0)
        mailbox_.receive_ahead(group_rank(schedule_->previous_group(group, op.microbatch)),
                               MessageKind::Activation, group, op.microbatch, local);
      else if (vocab_parallel_)
        for (int src : vocab_group_.ranks)
          mailbox_.receive_ahead(src, MessageKind::EmbeddingPart, 0, op.microbatch, count);
      break;
    }
    case OpKind::B:
    case OpKind::BW: {
      const int group = group_of(op.chunk);
      if (group < last)
        mailbox_.receive_ahead(group_rank(schedule_->next_group(group, op.microbatch)),
                               MessageKind::Gradient, group, op.microbatch, local);
      break;
    }
    case OpKind::S:
      mailbox_.receive_ahead(group_rank(last), MessageKind::FinalHidden, 0, op.microbatch, count);
      break;
    case OpKind::IB:
      mailbox_.receive_ahead(group_rank(0), MessageKind::EmbeddingGrad, 0, op.microbatch, count);
      break;
    case OpKind::W:
    case OpKind::T:
    case OpKind::IF:
    case OpKind::R:
      break;
  }
}

void RankRuntime::run_op(const Op& op) {
  switch (op.kind) {
    case OpKind::F:
      forward(op.chunk, op.microbatch);
      break;
    case OpKind::B:
      backward_input(op.chunk, op.microbatch);
      break;
    case OpKind::W:
      backward_weight(op.chunk, op.microbatch);
      break;
    case OpKind::BW:
      backward_input(op.chunk, op.microbatch, true);
      backward_weight(op.chunk, op.microbatch, true);
      break;
    case OpKind::S:
      with_units({{"head"}}, {}, [&] { vocab_output_forward(op.microbatch); });
      break;
    case OpKind::T:
      // Vocab-2's T needs the head's weight gradient only; vocab-1's the input gradient too.
      with_units(schedule_->vocab == schedule::VocabMode::Vocab2 ? Units{} : Units{{"head"}},
                 {{"head"}}, [&] { vocab_output_backward(op.microbatch); });
      break;
    case OpKind::IF:
      with_units({{"wte", "wpe"}}, {}, [&] { vocab_input_forward(op.microbatch); });
      break;
    case OpKind::IB:
      with_units({}, {{"wte", "wpe"}}, [&] { vocab_input_backward(op.microbatch); });
      break;
    case OpKind::R:  // on this thread: no reduction worker
      group_reduction(op.chunk)(*comm_);
      release_reduced_units();
      break;
  }
}

// ---- forward ------------------------------------------------------------------------------------

void RankRuntime::embed_plain(int mb, TensorView x) {
  auto& m = *model_;
  auto& be = ctx_.be();
  model::Buffer all_rows;  // (N, C) this rank's part under sequence parallelism
  TensorView all = ctx_.sequence_parallel ? sized(all_rows, Shape{rows(), config_.hidden}) : x;
  std::vector<std::int32_t> tokens_slice;  // the op's token slice's, when there are slices
  const std::span<const std::int32_t> tokens =
      slice_rows((*batches_)[static_cast<std::size_t>(data_microbatch(mb))].inputs, tokens_slice);
  // Vocabulary rows split over TP: each rank embeds the tokens of its rows, the TP sum completes
  // it; the position term joins on TP rank 0 only (a token slice's positions from its first).
  const ConstTensorView wpe = slice_positions(
      ctx_.tp_rank == 0 ? ConstTensorView(m.dense.param(m.wpe())) : ConstTensorView{});
  be.embedding_shard_forward(tokens, m.dense.param(m.wte()), m.vocab().lo, m.vocab_rows(), wpe,
                             TensorView{all.data, Shape{batch_, seq_, config_.hidden}});
  model::reduce_rows(ctx_, all, x);
}

void RankRuntime::reduce_embedding_parts(int mb, TensorView x) {
  // Input reduce: every vocabulary-group member's partial embedding, summed in group order.
  const std::int64_t N = rows(), C = config_.hidden;
  model::Buffer part(static_cast<std::size_t>(N * C)), all_rows;
  TensorView all = ctx_.sequence_parallel ? sized(all_rows, Shape{N, C}) : x;
  model::fill_zero(all);
  for (int src : vocab_group_.ranks) {
    mailbox_.take(src, MessageKind::EmbeddingPart, 0, mb, part);
    ctx_.be().accumulate(all, view(part, Shape{N, C}));
  }
  if (ctx_.sequence_parallel) model::copy_own_rows(ctx_, all, x);
}

void RankRuntime::forward(int chunk, int mb) {
  const std::int64_t N = local_rows(), C = config_.hidden;  // this rank's rows
  auto& m = *model_;
  auto& be = ctx_.be();
  const int group = m.placement().chunks[static_cast<std::size_t>(chunk)].group;
  ChunkState& s = chunk_state(chunk, mb);
  auto& blocks = m.blocks(chunk);
  s.blocks.resize(blocks.size());
  if (std::vector<model::SliceKeys>* keys = slice_keys(chunk, mb, blocks.size()))
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      s.blocks[i].keys = &(*keys)[i];
      s.blocks[i].slice_begin = slice_begin_;
    }

  model::Buffer x_buf, y_buf;
  TensorView x = sized(x_buf, Shape{N, C});  // (N, C)
  if (group > 0)
    mailbox_.take(group_rank(schedule_->previous_group(group, mb)), MessageKind::Activation, group,
                  mb, {x.data, static_cast<std::size_t>(x.numel())});
  else if (vocab_parallel_)
    reduce_embedding_parts(mb, x);
  else
    with_units({{"wte", "wpe"}}, {}, [&] { embed_plain(mb, x); });

  for (std::size_t i = 0; i < blocks.size(); ++i) {
    TensorView y = sized(y_buf, Shape{N, C});
    with_units({.layer = layer_of(chunk, i)}, {}, [&] {
      losses_.aux_sum +=
          blocks[i].forward(ctx_, x, y, batch_, seq_, s.blocks[i],
                            blocks[i].is_moe() ? expert_tokens(layer_of(chunk, i)) : nullptr);
    });
    std::swap(x_buf, y_buf);
    x = view(x_buf, Shape{N, C});
  }

  if (group < m.placement().groups - 1) {
    // The whole activation to each rank of the next stage that takes it from this one.
    // The next group on the micro-batch's path (partial pipelining skips some).
    const int next = schedule_->next_group(group, mb);
    for (int dst : group_receivers(next))
      mailbox_.post(dst, MessageKind::Activation, next, mb, x_buf);
    return;
  }
  // Last group: final LayerNorm, then the loss (plain) or the hand-off to the S passes, on every
  // row (s.lnf is (B*T, C), gathered under sequence parallelism).
  s.out = std::move(x_buf);
  with_units(vocab_parallel_ ? Units{{"lnf"}} : Units{{"lnf", "head"}}, {}, [&] {
    model::Buffer lnf_rows;
    TensorView lnf = sized(ctx_.sequence_parallel ? lnf_rows : s.lnf, Shape{N, C});
    be.layernorm_forward(view(s.out, Shape{N, C}), m.dense.param(m.lnf_w()),
                         m.dense.param(m.lnf_b()), lnf, sized(s.lnf_mean, Shape{N}),
                         sized(s.lnf_rstd, Shape{N}));
    if (ctx_.sequence_parallel) ctx_.tp_all_gather(lnf, sized(s.lnf, Shape{rows(), C}));
    if (vocab_parallel_) {
      for (int dst : vocab_group_.ranks) mailbox_.post(dst, MessageKind::FinalHidden, 0, mb, s.lnf);
      return;
    }
    const float loss = output_loss_plain(s, mb);
    // A token slice's mean loss weighs by its share of the sequence: the slices' add up to the
    // micro-batch's mean, counted once (at its last slice).
    const double share = static_cast<double>(seq_) / static_cast<double>(full_seq_);
    losses_.loss_sum += loss * share;
    if (schedule_->slice_of(mb) == schedule_->slices - 1) losses_.loss_microbatches += 1;
  });
}

float RankRuntime::output_loss_plain(ChunkState& s, int mb) {
  const std::int64_t N = rows(), C = config_.hidden, Vs = model_->vocab().rows();
  auto& m = *model_;
  auto& be = ctx_.be();
  std::vector<std::int32_t> targets_slice;  // the op's token slice's, when there are slices
  const std::span<const std::int32_t> targets =
      slice_rows((*batches_)[static_cast<std::size_t>(data_microbatch(mb))].targets, targets_slice);
  TensorView logits = sized(s.logits, Shape{N, Vs});  // (N, Vp/tp)
  be.linear_forward(view(s.lnf, Shape{N, C}), m.dense.param(m.head()), {}, logits);
  be.fill_columns(logits, m.vocab().first_padding(config_.vocab), model::kPaddedLogit);
  TensorView gmax = sized(s.gmax, Shape{N}), gsum = sized(s.gsum, Shape{N});
  model::Buffer target_buf, losses_buf;
  TensorView target = sized(target_buf, Shape{N});
  be.vocab_ce_local_stats(logits, targets, m.vocab().lo, gmax, gsum, target);
  if (ctx_.tp_size > 1) {
    // Megatron's vocab-parallel cross-entropy: max, then rescaled sums, over the TP group.
    model::Buffer local_max = model::copy_of(s.gmax);
    ctx_.tp_all_reduce(gmax, comm::ReduceOp::max);
    be.vocab_ce_rescale_sum(view(local_max, Shape{N}), gmax, gsum);
    ctx_.tp_all_reduce(gsum);
    ctx_.tp_all_reduce(target);
  }
  const float loss = be.vocab_ce_loss(gmax, gsum, target, sized(losses_buf, Shape{N}));
  if (!std::isfinite(loss))
    throw std::runtime_error("step " + std::to_string(step_) + ": loss is " +
                             (std::isnan(loss) ? "nan" : "inf") + " on rank " +
                             std::to_string(rank_) + " (micro-batch " + std::to_string(mb) + ")");
  return loss;
}

// ---- backward -----------------------------------------------------------------------------------

void RankRuntime::output_backward_plain(ChunkState& s, int mb, TensorView dy_final, bool weights) {
  const std::int64_t N = rows(), C = config_.hidden, Vs = model_->vocab().rows();
  auto& m = *model_;
  auto& be = ctx_.be();
  std::vector<std::int32_t> targets_slice;  // the op's token slice's, when there are slices
  const std::span<const std::int32_t> targets =
      slice_rows((*batches_)[static_cast<std::size_t>(data_microbatch(mb))].targets, targets_slice);
  // The gradient takes the logits' place (each element is read before it is written): no second
  // (N, V) buffer, the largest activation, and no pass zeroing one.
  TensorView logits = view(s.logits, Shape{N, Vs});
  be.vocab_ce_backward(logits, targets, m.vocab().lo, view(s.gmax, Shape{N}),
                       view(s.gsum, Shape{N}), grad_scale_ / static_cast<float>(batch_ * full_seq_),
                       logits, tensor::GradientWrite::overwrite);
  s.dlogits.swap(s.logits);  // the gradient, kept for W
  release(s.logits);         // what dlogits held before, if anything
  TensorView dlogits = view(s.dlogits, Shape{N, Vs});
  // dlnf: the TP sum of every rank's part, this rank's rows of it under sequence parallelism.
  model::Buffer dlnf_part;
  TensorView dlnf =
      ctx_.sequence_parallel ? sized(dlnf_part, Shape{N, C}) : sized(s.dlnf, Shape{N, C});
  if (weights) {
    be.linear_backward(dlogits, view(s.lnf, Shape{N, C}), m.dense.param(m.head()), dlnf,
                       tensor::GradientWrite::overwrite, m.dense.grad(m.head()), {});
    release(s.dlogits);  // the largest activation, needed by no W now
  } else {
    be.linear_backward_input(dlogits, m.dense.param(m.head()), dlnf,
                             tensor::GradientWrite::overwrite);
  }
  const std::int64_t Nl = local_rows();
  TensorView dlnf_own = ctx_.sequence_parallel ? sized(s.dlnf, Shape{Nl, C}) : dlnf;
  model::reduce_rows(ctx_, dlnf, dlnf_own);
  model::fill_zero(dy_final);
  be.layernorm_backward_input(dlnf_own, view(s.out, Shape{Nl, C}), m.dense.param(m.lnf_w()),
                              view(s.lnf_mean, Shape{Nl}), view(s.lnf_rstd, Shape{Nl}), dy_final);
}

void RankRuntime::backward_input(int chunk, int mb, bool weights) {
  const std::int64_t N = local_rows(), C = config_.hidden;  // this rank's rows
  auto& m = *model_;
  const int group = m.placement().chunks[static_cast<std::size_t>(chunk)].group;
  ChunkState& s = chunk_state(chunk, mb);
  auto& blocks = m.blocks(chunk);

  model::Buffer dy_buf, dx_buf;
  TensorView dy = sized(dy_buf, Shape{N, C});
  if (group < m.placement().groups - 1)
    mailbox_.take(group_rank(schedule_->next_group(group, mb)), MessageKind::Gradient, group, mb,
                  {dy.data, static_cast<std::size_t>(dy.numel())});
  else if (vocab_parallel_)
    with_units({{"lnf"}}, {}, [&] { output_backward_vocab(s, mb, dy); });
  else
    with_units({{"head", "lnf"}}, weights ? Units{{"head"}} : Units{},
               [&] { output_backward_plain(s, mb, dy, weights); });

  for (std::size_t i = blocks.size(); i-- > 0;) {
    TensorView dx = sized(dx_buf, Shape{N, C});
    const Units layer{.layer = layer_of(chunk, i)};
    if (weights)
      with_units(layer, layer, [&] { blocks[i].backward(ctx_, dy, dx, grad_scale_, s.blocks[i]); });
    else
      with_units(layer, {},
                 [&] { blocks[i].backward_input(ctx_, dy, dx, grad_scale_, s.blocks[i]); });
    std::swap(dy_buf, dx_buf);
    dy = view(dy_buf, Shape{N, C});
  }
  s.backward_done = true;
  if (schedule_->slices > 1 && schedule_->slice_of(mb) == 0)  // every slice's keys are used up
    drop_slice_keys(chunk, mb);
  if (group > 0) {
    const int previous = schedule_->previous_group(group, mb);
    for (int dst : group_receivers(previous))
      mailbox_.post(dst, MessageKind::Gradient, previous, mb, dy_buf);
  } else {
    // The embedding's gradient needs every row.
    if (ctx_.sequence_parallel) {
      model::Buffer all;
      ctx_.tp_all_gather(dy, sized(all, Shape{rows(), C}));
      dy_buf = std::move(all);
    }
    if (vocab_parallel_)
      for (int dst : vocab_group_.ranks)
        mailbox_.post(dst, MessageKind::EmbeddingGrad, 0, mb, dy_buf);
    else
      s.demb = std::move(dy_buf);  // the embedding's weight gradient waits for W
  }
}

void RankRuntime::backward_weight(int chunk, int mb, bool after_weights) {
  const std::int64_t N = rows(), Nl = local_rows(), C = config_.hidden;
  auto& m = *model_;
  auto& be = ctx_.be();
  const int group = m.placement().chunks[static_cast<std::size_t>(chunk)].group;
  ChunkState& s = chunk_state(chunk, mb);
  if (!s.backward_done)
    throw std::logic_error("W before B for chunk " + std::to_string(chunk) + " micro-batch " +
                           std::to_string(mb));
  auto& blocks = m.blocks(chunk);
  if (group == m.placement().groups - 1) {
    const bool head = !vocab_parallel_ && !after_weights;
    with_units({}, head ? Units{{"head", "lnf"}} : Units{{"lnf"}}, [&] {
      if (head)
        be.linear_backward_weight(view(s.dlogits, Shape{N, model_->vocab().rows()}),
                                  view(s.lnf, Shape{N, C}), m.dense.grad(m.head()), {});
      be.layernorm_backward_weight(view(s.dlnf, Shape{Nl, C}), view(s.out, Shape{Nl, C}),
                                   view(s.lnf_mean, Shape{Nl}), view(s.lnf_rstd, Shape{Nl}),
                                   m.dense.grad(m.lnf_w()), m.dense.grad(m.lnf_b()));
    });
  }
  if (!after_weights)
    for (std::size_t i = blocks.size(); i-- > 0;)
      with_units({}, {.layer = layer_of(chunk, i)},
                 [&] { blocks[i].backward_weight(ctx_, s.blocks[i]); });
  if (group == 0 && !vocab_parallel_) {
    std::vector<std::int32_t> tokens_slice;  // the op's token slice's, when there are slices
    const std::span<const std::int32_t> tokens =
        slice_rows((*batches_)[static_cast<std::size_t>(data_microbatch(mb))].inputs, tokens_slice);
    with_units({}, {{"wte", "wpe"}}, [&] {
      const TensorView dwpe = slice_positions(m.wpe() >= 0 ? m.dense.grad(m.wpe()) : TensorView{});
      be.embedding_shard_backward_weight(tokens, view(s.demb, Shape{batch_, seq_, C}), m.vocab().lo,
                                         m.vocab_rows(), m.dense.grad(m.wte()), dwpe);
      // Before the units close: under ZeRO-2 and 3 that is where the sparse rows go out.
      note_touched_embedding_rows(tokens);
    });
  }
  drop_chunk_state(chunk, mb);
}

}  // namespace pipetune::runtime
