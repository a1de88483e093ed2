// One rank of a training run: its slice of the model and the pipeline op list it executes.
//
// run_schedule() executes this rank's ops of the Schedule in order for one iteration: F runs a
// layer group forward (receiving its input from the previous group's rank, sending its output
// on), B the input-gradient backward, W the deferred weight gradients, BW both; S/T/IF/IB the
// vocabulary-parallel passes. Barriers of the vocabulary passes are exchanges of buffered
// messages among the vocabulary group: a rank joins by sending its contribution and continues;
// the op that needs the result receives every member's contribution and combines them in group
// order (deterministic). That keeps the schedule's semantics (joining never blocks), so every
// schedule the validator accepts runs without deadlock.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/comm/topology.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/model/rank_model.hpp"
#include "engine/runtime/activation_offload.hpp"
#include "engine/runtime/injected_fault.hpp"
#include "engine/runtime/mailbox.hpp"
#include "engine/runtime/reduction_worker.hpp"
#include "engine/schedule/group_holds.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "profiler/recorder/rank_recorder.hpp"

namespace pipetune::runtime {

class RankDevice;

// Losses of one iteration as this rank saw them. Only the ranks that compute the loss (those
// holding the last layer group) fill `loss_sum`; aux_sum holds this rank's MoE layers.
struct IterationLosses {
  double loss_sum = 0.0;  // sum over micro-batches of the mean cross-entropy
  double aux_sum = 0.0;   // sum over micro-batches of the load-balancing losses (coefficient in)
  int loss_microbatches = 0;
};

class RankRuntime {
 public:
  RankRuntime(const model::ModelConfig& config, const spec::ParallelPlan& plan,
              const std::vector<int>& layer_split, const schedule::Schedule& schedule,
              const comm::Topology& topology, comm::Communicator& comm, tensor::Backend& backend,
              profiler::RankRecorder* recorder = nullptr);
  ~RankRuntime();
  RankRuntime(const RankRuntime&) = delete;
  RankRuntime& operator=(const RankRuntime&) = delete;

  // Runs this rank's op list for one iteration over `batches` (one per micro-batch). Gradients
  // accumulate into the model's gradient buffers (the caller zeroes them). `step` (from 1) only
  // names the iteration in errors.
  IterationLosses run_schedule(const std::vector<data::Batch>& batches, std::int64_t step);
  // Under sequence parallelism: the gradients of the parameters applied to this rank's rows only
  // (ParamEntry::sequence_parallel: the LayerNorms) summed over the TP group, in one all-reduce.
  // Call after the iteration, before the DP reduction. Nothing to do otherwise.
  void reduce_sequence_parallel_gradients();
  // ZeRO-2 and 3 (parameters allocated with allocate_sharded): around each layer and vocabulary
  // table the runtime opens its units (full values under ZeRO-3, full gradients where the layer
  // computes them) and asks the hooks to fill and reduce them.
  struct ShardingHooks {
    // All-gathers the values of `units` of `set` (opened for them) from the ranks' shards.
    std::function<void(model::ParameterSet& set, const std::vector<int>& units)> gather_parameters;
    // Reduce-scatters every open gradient unit into the ranks' shards and closes it.
    std::function<void()> reduce_gradients;
    // Under layered reduction: closes the held gradient units the R ops reduced so far (their
    // reductions have ended).
    std::function<void()> release_reduced;
  };
  void set_sharding(ShardingHooks hooks) { sharding_ = std::move(hooks); }
  // Layered gradient reduction: what an R op of the schedule runs, the data-parallel reduction of
  // the layers of local chunk `chunk` (their gradients are complete), as a job for a
  // communicator. With a worker the job runs on its thread, overlapping the ops after it; the
  // iteration's end waits for it. Without, the job runs on the rank's thread and communicator. A
  // schedule with R ops needs a reduction (logic_error otherwise).
  using GroupReduction = std::function<ReductionWorker::Job(int chunk)>;
  void set_group_reduction(GroupReduction reduce, std::unique_ptr<ReductionWorker> worker) {
    reduce_group_ = std::move(reduce);
    reductions_ = std::move(worker);
    ctx_.stream = reductions_.get();  // also the chunked MoE all-to-all's stream
  }
  bool reductions_overlap() const { return reductions_ != nullptr; }
  // EmbRace (ParallelPlan::sparse_embedding_gradient): remember the rows of this rank's input
  // embedding shard each backward adds to, for the sparse reduction; take them (sorted, each
  // once) at the iteration's end, which forgets them.
  void record_touched_embedding_rows() { record_touched_ = true; }
  std::vector<std::int32_t> take_touched_embedding_rows();
  // A fault to inject (injected_fault.hpp); null for none. Must outlive the runtime.
  void set_fault(const InjectedFault* fault) { fault_ = fault; }
  // The device that runs an overlapped pair's two ops at once (RankDevice::overlaps_pairs), or
  // null: every pair runs one op after the other. Pairs stay serial where the two ops could share
  // buffers without the schedule saying so: ops of one chunk (the same layers), ZeRO-2 and 3 (a
  // closed unit's buffer is kept for the next layer's unit, whichever stream asks) and activation
  // offload (its copies wait for one stream). Must outlive the runtime.
  void set_pair_device(RankDevice* device) { pair_device_ = device; }
  // Overlapped pairs run at once on that device so far.
  std::int64_t pairs_run_at_once() const { return pairs_run_at_once_; }

  model::RankModel& model() { return *model_; }
  const model::RankModel& model() const { return *model_; }
  const model::ParallelContext& context() const { return ctx_; }
  // Activation bytes currently held (all micro-batches in flight), on the rank's storage.
  std::size_t activation_bytes() const;
  // With offload_activations: the most bytes of activations held in host memory at once (over
  // every iteration run so far); 0 without.
  std::int64_t peak_offloaded_bytes() const { return offload_ ? offload_->peak_host_bytes() : 0; }

 private:
  struct ChunkState;
  struct VocabState;

  void run_op(const schedule::Op& op);
  // Where an MoE block of layer `layer` adds its routing: null when nothing records it.
  model::ExpertTokens* expert_tokens(std::int64_t layer);
  // The iteration's routing statistics as counters at its end.
  void record_expert_tokens();
  // The rows of the input embedding shard the iteration's tokens touched, as counters at its end
  // (profiler/analysis/embedding_rows.hpp), on a rank that embedded tokens.
  void record_embedding_rows();
  // run_schedule's pass over the rank's ops.
  void run_ops(const std::vector<schedule::Op>& ops, std::int64_t step);
  // Layered reduction (rank_runtime_reductions.cpp). submit_reduction hands R's job to the
  // reduction thread (false: there is none, run it in place with group_reduction).
  ReductionWorker::Job group_reduction(int chunk) const;
  bool submit_reduction(int chunk);
  void wait_for_reductions();
  // ZeRO-2 and 3 under layered reduction (group_holds.hpp): frees the full gradients of the R ops
  // that have ended; gathers a chunk's layer values for a run of its ops and frees them after.
  void release_reduced_units();
  void hold_parameters(int chunk);
  void release_held_parameters();
  void abandon_reductions(std::exception_ptr error);
  // Activation offload around op `i` of this rank's list: before it, the finished offloads'
  // device buffers go, the reload of the next op's backward starts (on a device: it overlaps op
  // i) and op i's own reload is waited for; after an F, its activations leave (unless the next op
  // is its own backward: nothing to gain).
  void offload_before_op(std::size_t i);
  void offload_after_op(std::size_t i);
  // The units a layer or table scope names: up to two tables ("wte", "wpe", "lnf", "head") and
  // a block's layer. Saying it allocates nothing, so a run without sharding pays nothing.
  struct Units {
    std::array<std::string_view, 2> tables{};
    std::int64_t layer = -1;  // "h.<layer>"; -1: none
  };
  // ZeRO-2 and 3: runs `compute` with the full values of the units it `uses` gathered (ZeRO-3)
  // and full gradients for those it `computes` (their weight gradients) open, then
  // reduce-scatters those gradients into the rank's shards and frees both, so a full unit lives
  // only while one layer (or table) needs it. Which units is fixed by the op and the block,
  // never by the data, so every rank of a reduction group gathers and reduces the same units in
  // the same order. Without sharding it runs `compute` alone.
  template <class Compute>
  void with_units(const Units& uses, const Units& computes, Compute&& compute) {
    if (!sharding_.reduce_gradients) {
      compute();
      return;
    }
    const OpenedUnits opened = open_units(uses, computes);
    compute();
    close_units(opened);
  }
  struct OpenedUnits {
    std::vector<std::pair<model::ParameterSet*, int>> parameters;  // gathered here
    bool gradients = false;                                        // any gradient unit opened
  };
  // Opens the units that exist here, gathers the values, and charges to the memory ledger what
  // the unit buffers grow by (a layer reusing a kept buffer adds nothing).
  OpenedUnits open_units(const Units& uses, const Units& computes);
  void close_units(const OpenedUnits& opened);
  std::int64_t layer_of(int chunk, std::size_t block) const;  // the block's layer in the model
  // Carries out fault_ before `op` when it is for this rank and step.
  void inject_fault(const schedule::Op& op, std::int64_t step);
  // Waits for the pipeline messages the op starts from (activation, gradient, final hidden
  // state, embedding parts and gradients) before its span opens. Messages exchanged inside an
  // op (the vocabulary barriers) are still taken inside it.
  void receive_inputs(const schedule::Op& op);
  void forward(int chunk, int mb);
  // B; with `weights` (a BW op) the blocks' and the LM head's weight gradients in the same pass,
  // each from its output gradient as soon as that exists (one bf16 copy of it on CUDA).
  void backward_input(int chunk, int mb, bool weights = false);
  // W; after a B with weights, only what that pass left (the final LayerNorm, the embedding).
  void backward_weight(int chunk, int mb, bool after_weights = false);
  void vocab_output_forward(int mb);   // S
  void vocab_output_backward(int mb);  // T
  void vocab_input_forward(int mb);    // IF
  void vocab_input_backward(int mb);   // IB

  void embed_plain(int mb, tensor::TensorView x);
  void reduce_embedding_parts(int mb, tensor::TensorView x);
  float output_loss_plain(ChunkState& s, int mb);
  void output_backward_plain(ChunkState& s, int mb, tensor::TensorView dy_final, bool weights);
  // C1 for micro-batch mb: global max / sum of exp / target logit, received once and cached.
  VocabState& collect_stats(int mb);
  void output_backward_vocab(ChunkState& s, int mb, tensor::TensorView dy_final);

  // Token slices: the data micro-batch of a unit (the ops' micro-batch index counts slices),
  // the op's slice made current, its rows of a (B, T) token array, and the keys its layers share.
  int data_microbatch(int unit) const { return unit / schedule_->slices; }
  void select_unit(int unit);
  // (`all` itself without slices; else the slice's rows, copied into `scratch`).
  std::span<const std::int32_t> slice_rows(const std::vector<std::int32_t>& all,
                                           std::vector<std::int32_t>& scratch) const;
  std::vector<model::SliceKeys>* slice_keys(int chunk, int unit, std::size_t blocks);
  void drop_slice_keys(int chunk, int unit);
  std::int64_t slice_keys_key(int chunk, int unit) const {
    return static_cast<std::int64_t>(chunk) * schedule_->data_microbatches() +
           data_microbatch(unit);
  }
  // A position table (wpe or its gradient, (T, C)) from the op's slice's first token on; the
  // table itself (or an empty view) for the first slice.
  template <class View>
  View slice_positions(View table) const {
    if (table.empty() || slice_begin_ == 0) return table;
    return View{table.data + slice_begin_ * table.shape[1],
                tensor::Shape{table.shape[0] - slice_begin_, table.shape[1]}};
  }
  ChunkState& chunk_state(int chunk, int mb);
  void drop_chunk_state(int chunk, int mb);
  // The rank holding layer group `group` whose messages this rank takes: with equal tp degrees
  // the one with this rank's tp and dp ranks; with per-stage layouts the sender
  // spec::reshard_senders names (Topology::pipeline_sender).
  int group_rank(int group) const;
  // The ranks holding layer group `group` that take this rank's activation or gradient whole
  // (Topology::pipeline_receivers): group_rank(group) alone with equal tp degrees.
  const std::vector<int>& group_receivers(int group) const;
  std::int64_t rows() const { return batch_ * seq_; }
  // The rows this rank holds between blocks and stages: all, or 1/tp under sequence parallelism.
  std::int64_t local_rows() const { return ctx_.local_rows(rows()); }

  model::ModelConfig config_;
  spec::ParallelPlan plan_;
  const schedule::Schedule* schedule_;
  const comm::Topology* topology_;
  comm::Communicator* comm_;
  const InjectedFault* fault_ = nullptr;
  RankDevice* pair_device_ = nullptr;
  std::int64_t pairs_run_at_once_ = 0;
  // Whether the pair of ops ops[i] and ops[i + 1] (ops[i + 1].overlaps_previous) runs at once on
  // pair_device_.
  bool pair_overlaps(const schedule::Op& first, const schedule::Op& second) const;
  // Spans of every op, send, receive and collective; activation bytes on its memory ledger.
  profiler::RankRecorder* recorder_;
  std::int64_t ledger_activations_ = 0;  // what the ledger holds for Activations
  int rank_, pp_rank_;
  std::vector<int> stage_sender_;                  // by pipeline rank: see group_rank
  std::vector<std::vector<int>> stage_receivers_;  // by pipeline rank: see group_receivers
  comm::ProcessGroup vocab_group_;                 // vocabulary parallelism only
  model::ParallelContext ctx_;
  std::unique_ptr<model::RankModel> model_;
  // The dense parameters applied to a rank's rows of the sequence (ParamEntry::sequence_parallel):
  // what reduce_sequence_parallel_gradients packs.
  std::vector<int> sequence_parallel_grads_;
  Mailbox mailbox_;
  ShardingHooks sharding_;  // ZeRO-2 and 3
  // ZeRO-2 and 3 under layered reduction: this iteration's runs of the rank's ops, and the units
  // a run holds gathered.
  schedule::GroupHolds holds_;
  bool holds_gradients_ = false;
  std::vector<std::pair<model::ParameterSet*, int>> held_parameters_;
  // EmbRace: per row of the input embedding shard, whether a backward this iteration added to it.
  bool record_touched_ = false;
  std::vector<char> touched_rows_;
  // When the recorder records: per row of the shard, whether the iteration's tokens touched it,
  // and the tokens embedded (what record_embedding_rows reports).
  std::vector<char> step_rows_;
  std::int64_t step_tokens_ = 0;
  void note_touched_embedding_rows(std::span<const std::int32_t> tokens);
  GroupReduction reduce_group_;  // layered gradient reduction
  profiler::NameId gradient_scatter_name_ = 0, parameter_gather_name_ = 0;
  bool vocab_parallel_ = false;
  std::int64_t batch_ = 0, seq_ = 0;
  // Token slices (Schedule::slices): select_unit makes seq_ the op's slice's length and
  // slice_begin_ its first token; full_seq_ is the sequence's length (seq_ without slices).
  std::int64_t full_seq_ = 0, slice_begin_ = 0;
  std::vector<std::int64_t> slice_tokens_;  // each slice's tokens
  // The keys each layer of a micro-batch's slices share, key chunk * m + data micro-batch.
  std::map<std::int64_t, std::vector<model::SliceKeys>> slice_keys_;
  float grad_scale_ = 1.0f;  // d(loss)/d(mean CE of one micro-batch) = 1 / (m * dp)
  const std::vector<data::Batch>* batches_ = nullptr;
  std::int64_t step_ = 0;
  IterationLosses losses_;
  // Routing statistics of this rank's MoE layers in the iteration, by layer (recorded at its end
  // as counters, profiler/analysis/expert_load.hpp; TP rank 0 alone, the others route alike).
  std::map<std::int64_t, model::ExpertTokens> expert_tokens_;
  std::map<std::int64_t, ChunkState> chunks_;   // key chunk * m + mb
  std::map<int, VocabState> vocab_;             // key mb
  std::unique_ptr<ActivationOffload> offload_;  // plan.offload_activations; made on the rank
  // Layered reduction on a thread of its own; last, so it stops before the gradients it reduces
  // (in model_) go.
  std::unique_ptr<ReductionWorker> reductions_;
};

}  // namespace pipetune::runtime
