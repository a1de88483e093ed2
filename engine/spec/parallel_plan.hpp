// ParallelPlan: how one training iteration is split over the devices (TP x PP x DP ranks, EP
// carved out of DP), batched into micro-batches and scheduled through the pipeline.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/expert_layout.hpp"
#include "engine/spec/model_spec.hpp"

namespace pipetune::spec {

enum class Recompute { None, Selective, Full };

std::string_view recompute_name(Recompute r);
Recompute parse_recompute(std::string_view name);  // throws SpecError listing valid names

// How the ranks' grid coordinates map to device slots (devices in node order): tp always varies
// fastest. tp-dp-pp (Megatron's default order) puts a stage's data-parallel replicas on
// neighbouring devices, so DP traffic stays inside a node or node group and the pipeline's
// point-to-point traffic crosses nodes; tp-pp-dp (Megatron's --use-tp-pp-dp-mapping) keeps a
// replica's whole pipeline on neighbouring devices and sends DP traffic across nodes.
enum class RankOrder { TpDpPp, TpPpDp };

std::string_view rank_order_name(RankOrder order);  // "tp-dp-pp", "tp-pp-dp"
RankOrder parse_rank_order(std::string_view name);  // throws SpecError listing valid names

// The most all-to-all chunks a plan may cut an MoE layer's dispatch and combine into: past a
// few, each chunk's latency outweighs what it hides.
inline constexpr int kMaxMoeChunks = 64;

struct ParallelPlan {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int ep = 1;                     // expert parallel degree, carved out of dp
  int chunks = 1;                 // v: layer groups per pipeline rank; 0 = the schedule's default
  int micro_batch_size = 1;       // sequences per micro-batch
  int microbatches = 0;           // m per iteration (per DP replica); 0 = pp, see apply_defaults
  std::int64_t global_batch = 0;  // sequences per iteration; 0 = micro_batch_size * m * dp
  std::string schedule = "1f1b";  // a name from schedule::schedule_names()
  schedule::VocabMode vocab = schedule::VocabMode::None;
  // Layers per layer group, in model order (pp * chunks entries; group g is placed as the
  // schedule's placement says). Empty = even_layer_split. Entries may be 0 (e.g. a last stage
  // that only holds the output layer).
  std::vector<int> layer_split;
  Recompute recompute = Recompute::None;
  // Recomputation per pipeline rank (all of the rank's layer groups), Merak-style stage-aware
  // recomputation: empty = every stage uses `recompute`, else exactly pp entries.
  std::vector<Recompute> stage_recompute;
  // Offload (KARMA): activations_offload moves what each F leaves for its B to host memory over
  // the host link (PCIe) once the F is done, and brings it back before the B, on copy streams
  // beside the computation (recomputation, if any, still drops what it drops: only the kept part
  // travels). optimizer_offload keeps AdamW's moments in host memory and runs the step's update
  // there (ZeRO-Offload style): the device holds parameters and gradients only.
  bool offload_activations = false;
  bool offload_optimizer = false;
  bool sequence_parallel = false;
  int zero_stage = 0;  // 0..3 (ZeRO / distributed optimizer sharding over dp)
  int group_size = 0;  // interleaved-1f1b micro-batch group size G; 0 = the schedule's default
  // Token slices (terapipe): each micro-batch cut along the sequence into `slices` pieces
  // (0 = the schedule's default), or into pieces of `slice_tokens` tokens each (summing to the
  // model's seq_len; TeraPipe's uneven slices, as the tuner's dynamic programming chooses them).
  int slices = 0;
  std::vector<int> slice_tokens;
  // Partial pipelining (skippipe): the fraction of the stages each micro-batch skips, in [0, 1);
  // unset = the schedule's default (1/3).
  std::optional<double> skip_ratio;
  // Layered gradient reduction: each layer group's data-parallel gradient all-reduce runs as an
  // op of the schedule (R) once the group's backward is complete, beside the backwards still to
  // come, instead of all of it after the pipeline. The layered schedule always does; ZeRO-0 only.
  bool layered_reduction = false;
  // Chunked all-to-all (Tutel's adaptive pipelining, FSMoE): each MoE layer's dispatch and
  // combine split into this many chunks along the experts' slots, the expert GEMMs of one chunk
  // running while the next chunk's all-to-all is in flight. 1 = one all-to-all each way.
  int moe_chunks = 1;
  // Two-phase all-to-all (Tutel's 2DH): the EP ranks a node holds. Each MoE all-to-all runs
  // among the EP ranks of one node first (a node's rows for each remote node gathered on one
  // rank), then across nodes among the ranks of the same place in their node, so each
  // inter-node message carries a node's rows and a rank has nodes - 1 remote peers instead of
  // ep - node ranks. Divides ep, between 1 and ep exclusive; 0 = one flat all-to-all.
  int moe_a2a_node_ranks = 0;
  // Where each MoE layer's experts sit inside the TP group (expert_layout.hpp): empty = every
  // MoE layer sharded over TP, one entry = every MoE layer alike, else one per MoE layer in
  // model order (Tutel's per-layer choice between expert- and tensor-style experts).
  std::vector<ExpertLayout> expert_layouts;
  // EmbRace's sparse embedding gradient: the input embedding's gradient is reduced over DP by
  // exchanging the rows of the tokens each replica embedded (without ZeRO an all-gather of those
  // rows and their indices; under ZeRO an all-to-all to the members owning them) instead of
  // reducing the whole table. Untied embeddings.
  bool sparse_embedding_gradient = false;
  // Placement (Holmes): the rank order, and the order in which the cluster's node groups
  // (ClusterSpec::node_groups, by index) take device slots: slot 0 is on the first node of
  // node_group_order[0]. Empty = the groups in the cluster's own order.
  RankOrder rank_order = RankOrder::TpDpPp;
  std::vector<int> node_group_order;
  // Per-stage layouts (cross-mesh resharding): the TP degree of each pipeline rank's stage,
  // pp entries; empty = every stage uses `tp`. The rule when they differ: dp is the same for
  // every stage, so stage s holds stage_tp[s] * dp devices (stages need not be the same size),
  // `tp` is stage 0's, and the activations crossing a boundary between stages of different tp
  // are resharded (spec::reshard_senders says who sends to whom).
  std::vector<int> stage_tp;

  // tp*pp*dp, or dp * sum(stage_tp) with per-stage layouts.
  int world_size() const;
  // Shards of the vocabulary tables: tp, or tp * pp with vocabulary parallelism.
  int vocab_shards() const { return vocab != schedule::VocabMode::None ? tp * pp : tp; }
  int layer_groups() const { return pp * chunks; }

  bool operator==(const ParallelPlan&) const = default;
};

// Rank r's device slot (0-based, devices in node order after the plan's node group order) is
// slot(tp_rank, dp_rank, pp_rank) = tp_rank * tp_stride + dp_rank * dp_stride + pp_rank *
// pp_stride. Uniform layouts only: with per-stage layouts use device_slot.
struct DeviceStrides {
  int tp_stride = 1, dp_stride = 1, pp_stride = 1;
  int slot(int tp_rank, int dp_rank, int pp_rank) const {
    return tp_rank * tp_stride + dp_rank * dp_stride + pp_rank * pp_stride;
  }
};
DeviceStrides device_strides(const ParallelPlan& plan);

// The recomputation of pipeline rank `rank`: plan.stage_recompute[rank] when given, else
// plan.recompute.
Recompute recompute_of_stage(const ParallelPlan& plan, int rank);

// The plan as pipeline rank `rank` computes: recompute = recompute_of_stage(plan, rank),
// tp = tp_of_stage(plan, rank), and no stage_recompute or stage_tp (for per-layer costs and
// bytes that read plan.recompute and plan.tp).
ParallelPlan plan_of_stage(const ParallelPlan& plan, int rank);

// True when some stage recomputes differently from another (a non-uniform stage_recompute).
bool stage_recompute_varies(const ParallelPlan& plan);

// The TP degree of pipeline rank `rank`: plan.stage_tp[rank] when given, else plan.tp.
int tp_of_stage(const ParallelPlan& plan, int rank);
// True when some stage's tp differs from another's (a non-uniform stage_tp).
bool stage_tp_varies(const ParallelPlan& plan);
// The first device slot of pipeline rank `rank`'s stage (tp-dp-pp order: stages take
// consecutive slots, stage s holding tp_of_stage(s) * dp of them).
int stage_first_slot(const ParallelPlan& plan, int rank);
// The pipeline rank (stage) of rank `rank` (0 <= rank < world_size(), else SpecError naming
// plan.pp), numbered in the plan's rank order: rank / (tp * dp) in tp-dp-pp, (rank / tp) % pp in
// tp-pp-dp, and with per-stage layouts the stage s with stage_first_slot(s) <= rank <
// stage_first_slot(s + 1). Stored runs number their ranks in tp-dp-pp whatever the plan's order
// (engine/session/sink_wiring.cpp): their readers pass the plan with rank_order = TpDpPp.
int pp_rank_of(const ParallelPlan& plan, int rank);
// The device slot of (tp_rank, dp_rank, pp_rank) in either rank order; with per-stage layouts
// (tp-dp-pp only) stage_first_slot(pp_rank) + tp_rank + tp_of_stage(pp_rank) * dp_rank.
int device_slot(const ParallelPlan& plan, int tp_rank, int dp_rank, int pp_rank);
// Resharding a stage boundary (per-stage layouts): the activation (or its gradient) is whole on
// each of the `senders` TP ranks of one side (no sequence parallelism) and each of the
// `receivers` TP ranks of the other side needs it whole. Receiver j takes its copy from sender
// j % senders, so a sender sends ceil(receivers / senders) copies; the result lists, per
// receiver, its sender.
std::vector<int> reshard_senders(int senders, int receivers);
// "4,2,2" -> {4, 2, 2}; blank text -> empty. An entry that is not a positive integer throws
// SpecError naming plan.stage_tp.
std::vector<int> parse_stage_tp(std::string_view comma_list);
// "4/2/2" for plan summaries; "4,2,2" with `separator` ','.
std::string stage_tp_text(const std::vector<int>& stage_tp, char separator = '/');

// "none,full,..." -> modes; empty text -> empty list. A bad name throws SpecError naming
// plan.stage_recompute, the entry and the valid names.
std::vector<Recompute> parse_stage_recompute(std::string_view comma_list);
// "1, 0" -> node group indices; blank text -> empty (as the cluster lists them). An entry that
// is not a non-negative integer throws SpecError naming plan.node_group_order.
std::vector<int> parse_node_group_order(std::string_view comma_list);
// The inverse of parse_stage_recompute ("full,selective,none").
std::string stage_recompute_text(const std::vector<Recompute>& modes);
// Short form for plan summaries: one letter per stage, "f/f/s/n".
std::string stage_recompute_letters(const std::vector<Recompute>& modes);

// Fills the fields whose 0 means "derived": chunks (schedule::default_chunks), microbatches
// (global_batch / (micro_batch_size * dp) when global_batch is given and divisible, else pp) and
// then global_batch.
void apply_defaults(ParallelPlan& plan);
// Modular placement (Lamy-Poirier's modular pipeline parallelism): one layer per layer group, so
// layer l sits on pipeline rank l mod pp: the chunks that gives, layers / pp. SpecError when pp
// does not divide the layers, or the plan's schedule places its groups in a V.
int modular_chunks(const ModelSpec& model, const ParallelPlan& plan);
// Whether the plan's schedule reduces each layer group's gradients as an op (OpKind::R): it asks
// for layered_reduction, or its schedule always does (layered).
bool reduces_per_group(const ParallelPlan& plan);
// Whether the plan's MoE all-to-all runs in chunks over expert parallelism (moe_chunks > 1 and
// ep > 1), which a rank overlaps with its experts' GEMMs on a collective stream of its own.
bool overlaps_moe_all_to_all(const ParallelPlan& plan);
// Whether the plan's MoE all-to-all runs in two phases, in the node then across
// (moe_a2a_node_ranks).
bool two_phase_all_to_all(const ParallelPlan& plan);

// `layers` split over `groups` as evenly as possible; the remainder goes one layer each to the
// first groups (so group sizes never differ by more than one and never increase along the model).
std::vector<int> even_layer_split(std::int64_t layers, int groups);

// Layers per layer group (pp * chunks entries, model order): plan.layer_split when given, else
// even_layer_split(model.layers, pp * chunks).
std::vector<int> layer_split(const ModelSpec& model, const ParallelPlan& plan);

}  // namespace pipetune::spec
