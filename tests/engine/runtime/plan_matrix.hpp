// The parallel-equivalence matrix: every parallelism axis alone, every pipeline schedule,
// vocabulary parallelism with the schedules that support it, TP, PP and DP together, uneven layer
// splits and vocabularies, experts with each axis beside them, sequence parallelism, activation
// recomputation and ZeRO-2 and 3. The CPU equivalence test runs it on threads, the device-storage
// test with emulated device storage, the GPU tests on streams of one device and as NCCL processes,
// each against the single-rank run of the same global batch.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "engine/runtime/trainer.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::testing {

struct PlanCase {
  std::string name;
  std::string model = "tiny";
  int tp = 1, pp = 1, dp = 1, ep = 1;
  std::string schedule = "1f1b";
  std::string vocab = "none";
  int chunks = 0;  // the schedule's default
  int microbatches = 4;
  int zero = 0;
  std::vector<int> split = {};
  bool sequence_parallel = false;
  spec::Recompute recompute = spec::Recompute::None;
  int slices = 0;                                       // terapipe's token slices (0: its default)
  std::vector<int> slice_tokens = {};                   // terapipe's uneven slices
  bool layered_reduction = false;                       // an R op per layer group
  int moe_chunks = 1;                                   // each MoE layer's all-to-all in chunks
  int moe_a2a_node_ranks = 0;                           // Tutel's 2DH all-to-all: EP ranks a node
  std::vector<spec::ExpertLayout> expert_layouts = {};  // experts inside the TP group
  bool sparse_embedding = false;   // EmbRace: the embedding gradient's touched rows exchanged
  std::vector<int> stage_tp = {};  // per-stage layouts: each stage's tp (tp is stage 0's)
  std::vector<spec::Recompute> stage_recompute = {};  // per-stage recomputation

  int world() const {
    if (stage_tp.empty()) return tp * pp * dp;
    int devices = 0;
    for (int t : stage_tp) devices += t * dp;
    return devices;
  }
};

inline std::ostream& operator<<(std::ostream& os, const PlanCase& c) {
  return os << c.name;
}

// Sets the case's plan on options already holding the model and micro-batch size.
inline void apply_plan(const PlanCase& c, runtime::TrainOptions& o) {
  o.plan.tp = c.tp;
  o.plan.pp = c.pp;
  o.plan.dp = c.dp;
  o.plan.ep = c.ep;
  o.plan.schedule = c.schedule;
  o.plan.vocab = schedule::parse_vocab_mode(c.vocab);
  o.plan.chunks = c.chunks;
  o.plan.zero_stage = c.zero;
  o.plan.layer_split = c.split;
  o.plan.microbatches = c.microbatches;
  o.plan.sequence_parallel = c.sequence_parallel;
  o.plan.recompute = c.recompute;
  o.plan.slices = c.slices;
  o.plan.slice_tokens = c.slice_tokens;
  o.plan.layered_reduction = c.layered_reduction;
  o.plan.moe_chunks = c.moe_chunks;
  o.plan.moe_a2a_node_ranks = c.moe_a2a_node_ranks;
  o.plan.expert_layouts = c.expert_layouts;
  o.plan.sparse_embedding_gradient = c.sparse_embedding;
  o.plan.stage_tp = c.stage_tp;
  o.plan.stage_recompute = c.stage_recompute;
}

inline std::vector<PlanCase> parallel_equivalence_plans() {
  std::vector<PlanCase> v;
  auto add = [&](PlanCase c) { v.push_back(std::move(c)); };
  // Each axis alone.
  add({.name = "tp2", .tp = 2});
  add({.name = "dp2", .dp = 2});
  add({.name = "dp2_zero1", .dp = 2, .zero = 1});
  // Pipeline with every schedule.
  add({.name = "pp2_gpipe", .pp = 2, .schedule = "gpipe"});
  add({.name = "pp2_1f1b", .pp = 2});
  add({.name = "pp4_1f1b", .pp = 4, .microbatches = 8});
  add({.name = "pp2_interleaved", .pp = 2, .schedule = "interleaved-1f1b", .chunks = 2});
  add({.name = "pp4_interleaved",
       .pp = 4,
       .schedule = "interleaved-1f1b",
       .chunks = 2,
       .microbatches = 8});
  add({.name = "pp2_zbh1", .pp = 2, .schedule = "zb-h1"});
  add({.name = "pp4_zbh2", .pp = 4, .schedule = "zb-h2", .microbatches = 8});
  add({.name = "pp2_zbv", .pp = 2, .schedule = "zb-v"});
  add({.name = "pp4_vhalf", .pp = 4, .schedule = "v-half", .microbatches = 8});
  add({.name = "pp4_vmin", .pp = 4, .schedule = "v-min", .microbatches = 8});
  // DualPipeV with its overlapped "F & B" pairs (m >= 2p), with TP inside the pairs, and with
  // experts, whose all-to-all the pairs overlap.
  add({.name = "pp2_dualpipev", .pp = 2, .schedule = "dualpipe-v"});
  add({.name = "pp4_dualpipev", .pp = 4, .schedule = "dualpipe-v", .microbatches = 8});
  add({.name = "tp2_pp2_dualpipev", .tp = 2, .pp = 2, .schedule = "dualpipe-v"});
  add({.name = "moe_ep2_dp2_pp2_dualpipev",
       .model = "tiny-moe",
       .pp = 2,
       .dp = 2,
       .ep = 2,
       .schedule = "dualpipe-v"});
  // Token slices (terapipe): equal slices by default, uneven ones, with TP and sequence
  // parallelism (each slice's rows split over TP), and with DP.
  add({.name = "pp2_terapipe", .pp = 2, .schedule = "terapipe"});
  add({.name = "pp4_terapipe_uneven",
       .pp = 4,
       .schedule = "terapipe",
       .slice_tokens = {13, 9, 6, 4}});
  add({.name = "tp2_pp2_sp_terapipe",
       .tp = 2,
       .pp = 2,
       .schedule = "terapipe",
       .sequence_parallel = true,
       .slices = 3});
  add({.name = "dp2_pp2_terapipe", .pp = 2, .dp = 2, .schedule = "terapipe", .slices = 2});
  // Layered gradient reduction: each layer group's DP all-reduce as an R op after its last
  // backward. The layered (breadth-first) schedule with modular placement (tiny's 8 layers, one
  // per group), over 4 stages, with experts (their units over the expert-DP group); R ops added
  // to 1f1b, and to zb-h1 (after each group's last W) with sequence parallelism (whose TP sum
  // then follows the DP sums).
  add({.name = "pp2_dp2_layered_modular", .pp = 2, .dp = 2, .schedule = "layered", .chunks = 4});
  add({.name = "pp4_layered", .pp = 4, .schedule = "layered", .microbatches = 8});
  add({.name = "moe_pp2_dp2_layered",
       .model = "tiny-moe",
       .pp = 2,
       .dp = 2,
       .schedule = "layered"});
  add({.name = "dp2_1f1b_layered_reduction", .dp = 2, .layered_reduction = true});
  add({.name = "tp2_pp2_dp2_sp_zbh1_layered_reduction",
       .tp = 2,
       .pp = 2,
       .dp = 2,
       .schedule = "zb-h1",
       .sequence_parallel = true,
       .layered_reduction = true});
  // Layered reduction paired with ZeRO (schedule/group_holds.hpp): each group's gradients held
  // whole over its micro-batches and reduce-scattered once at its R op, its values (ZeRO-3)
  // gathered once per run of its ops. The layered schedule with modular placement, experts
  // (their units over the expert-DP group), and R ops added to interleaved 1F1B (runs of one op).
  add({.name = "pp2_dp2_layered_modular_zero3",
       .pp = 2,
       .dp = 2,
       .schedule = "layered",
       .chunks = 4,
       .zero = 3});
  add({.name = "moe_pp2_dp2_layered_zero2",
       .model = "tiny-moe",
       .pp = 2,
       .dp = 2,
       .schedule = "layered",
       .zero = 2});
  add({.name = "pp2_dp2_interleaved_layered_reduction_zero3",
       .pp = 2,
       .dp = 2,
       .schedule = "interleaved-1f1b",
       .zero = 3,
       .layered_reduction = true});
  // Vocabulary parallelism with the schedules that support it.
  add({.name = "pp2_1f1b_vocab1", .pp = 2, .vocab = "vocab-1"});
  add({.name = "pp4_1f1b_vocab2", .pp = 4, .vocab = "vocab-2", .microbatches = 8});
  add({.name = "pp2_vhalf_vocab1", .pp = 2, .schedule = "v-half", .vocab = "vocab-1"});
  add({.name = "pp2_interleaved_vocab1",
       .pp = 2,
       .schedule = "interleaved-1f1b",
       .vocab = "vocab-1",
       .chunks = 2});
  add({.name = "pp2_interleaved_vocab2",
       .pp = 2,
       .schedule = "interleaved-1f1b",
       .vocab = "vocab-2",
       .chunks = 2});
  add({.name = "tp2_pp2_interleaved_vocab2",
       .tp = 2,
       .pp = 2,
       .schedule = "interleaved-1f1b",
       .vocab = "vocab-2",
       .chunks = 2,
       .microbatches = 6});
  add({.name = "pp4_vhalf_vocab2",
       .pp = 4,
       .schedule = "v-half",
       .vocab = "vocab-2",
       .microbatches = 8});
  // TP with vocabulary parallelism, and everything together.
  add({.name = "tp2_pp2_vocab1", .tp = 2, .pp = 2, .vocab = "vocab-1"});
  add({.name = "tp2_pp2_vocab2_vhalf", .tp = 2, .pp = 2, .schedule = "v-half", .vocab = "vocab-2"});
  add({.name = "tp2_pp2_dp2", .tp = 2, .pp = 2, .dp = 2});
  add({.name = "tp2_pp2_dp2_zero1_zbh1",
       .tp = 2,
       .pp = 2,
       .dp = 2,
       .schedule = "zb-h1",
       .zero = 1});
  // Sequence parallelism: alone, with a pipeline whose B and W are apart, with vocabulary passes,
  // and over 4 TP ranks.
  add({.name = "tp2_sp", .tp = 2, .sequence_parallel = true});
  add({.name = "tp2_pp2_sp_zbh1",
       .tp = 2,
       .pp = 2,
       .schedule = "zb-h1",
       .sequence_parallel = true});
  add({.name = "tp2_pp2_sp_vocab1",
       .tp = 2,
       .pp = 2,
       .vocab = "vocab-1",
       .sequence_parallel = true});
  add({.name = "tp4_dp2_sp", .tp = 4, .dp = 2, .sequence_parallel = true});
  // Activation recomputation (the CPU's bit-for-bit check against the run without is
  // activation_recompute_test.cpp; here, and on the GPU, against the single-rank run).
  add({.name = "tp2_pp2_zbh1_recompute_full",
       .tp = 2,
       .pp = 2,
       .schedule = "zb-h1",
       .recompute = spec::Recompute::Full});
  add({.name = "pp2_recompute_selective", .pp = 2, .recompute = spec::Recompute::Selective});
  // ZeRO-2 (gradients sharded unit by unit, reduce-scattered after each op computing them):
  // alone; over 3 ranks, which divide no unit (each padded); with B and W apart and sequence
  // parallelism; with interleaved chunks; with vocabulary passes (T and IB compute gradients);
  // experts over an expert-DP group of 2 beside a DP group of 4.
  add({.name = "dp2_zero2", .dp = 2, .zero = 2});
  add({.name = "dp3_zero2", .dp = 3, .zero = 2});
  add({.name = "tp2_pp2_dp2_zero2_sp_zbh1",
       .tp = 2,
       .pp = 2,
       .dp = 2,
       .schedule = "zb-h1",
       .zero = 2,
       .sequence_parallel = true});
  add({.name = "pp2_dp2_zero2_interleaved",
       .pp = 2,
       .dp = 2,
       .schedule = "interleaved-1f1b",
       .chunks = 2,
       .zero = 2});
  add({.name = "pp2_dp2_zero2_vocab1", .pp = 2, .dp = 2, .vocab = "vocab-1", .zero = 2});
  add({.name = "moe_ep2_dp4_zero2", .model = "tiny-moe", .dp = 4, .ep = 2, .zero = 2});
  // ZeRO-3 (the values sharded too, all-gathered for each layer that uses them): the same, with
  // full recomputation (B's forward again needs the values) and vocab-2 (S and T use the head
  // apart) with V-Half.
  add({.name = "dp3_zero3", .dp = 3, .zero = 3});
  add({.name = "tp2_pp2_dp2_zero3_sp_zbh1_recompute_full",
       .tp = 2,
       .pp = 2,
       .dp = 2,
       .schedule = "zb-h1",
       .zero = 3,
       .sequence_parallel = true,
       .recompute = spec::Recompute::Full});
  add({.name = "pp2_dp2_zero3_interleaved",
       .pp = 2,
       .dp = 2,
       .schedule = "interleaved-1f1b",
       .chunks = 2,
       .zero = 3});
  add({.name = "pp2_dp2_zero3_vocab1", .pp = 2, .dp = 2, .vocab = "vocab-1", .zero = 3});
  add({.name = "pp2_dp2_zero3_vhalf_vocab2",
       .pp = 2,
       .dp = 2,
       .schedule = "v-half",
       .vocab = "vocab-2",
       .zero = 3});
  add({.name = "moe_ep2_dp4_zero3", .model = "tiny-moe", .dp = 4, .ep = 2, .zero = 3});
  // ... and over an expert-DP group of one: the dense units sharded, the experts whole.
  add({.name = "moe_ep2_dp2_zero3", .model = "tiny-moe", .dp = 2, .ep = 2, .zero = 3});
  // The embedding gradient reduced by the rows each replica's tokens touched (EmbRace): alone,
  // with TP (each rank's vocabulary shard), after layered R ops (the tables are the rest), and
  // with the tables split over the pipeline (vocabulary parallelism).
  add({.name = "dp2_sparse_embedding", .dp = 2, .sparse_embedding = true});
  add({.name = "tp2_dp2_sparse_embedding", .tp = 2, .dp = 2, .sparse_embedding = true});
  add({.name = "pp2_dp2_interleaved_layered_sparse_embedding",
       .pp = 2,
       .dp = 2,
       .schedule = "interleaved-1f1b",
       .chunks = 2,
       .layered_reduction = true,
       .sparse_embedding = true});
  add({.name = "pp2_dp2_vocab1_sparse_embedding",
       .pp = 2,
       .dp = 2,
       .vocab = "vocab-1",
       .sparse_embedding = true});
  // ... and under ZeRO, each row sent to the members owning it (EmbRace's AlltoAll): ZeRO-1 at
  // the iteration's end (four shards of one flat buffer, some inside the table, one across its
  // end), ZeRO-2 as each op's backward ends (with TP), ZeRO-3 with the tables on the pipeline's
  // ends (the table no stage's first unit).
  add({.name = "dp4_zero1_sparse_embedding", .dp = 4, .zero = 1, .sparse_embedding = true});
  add({.name = "tp2_dp2_zero2_sparse_embedding",
       .tp = 2,
       .dp = 2,
       .zero = 2,
       .sparse_embedding = true});
  add({.name = "pp2_dp2_vocab1_zero3_sparse_embedding",
       .pp = 2,
       .dp = 2,
       .vocab = "vocab-1",
       .zero = 3,
       .sparse_embedding = true});
  add({.name = "pp2_dp2_vocab1_zero1_sparse_embedding",
       .pp = 2,
       .dp = 2,
       .vocab = "vocab-1",
       .zero = 1,
       .sparse_embedding = true});
  // Uneven layer split (8 layers over 3 stages) and a vocabulary (512) the group does not divide.
  add({.name = "pp3_uneven", .pp = 3, .microbatches = 6});
  add({.name = "pp3_vocab1_uneven_vocab", .pp = 3, .vocab = "vocab-1", .microbatches = 6});
  add({.name = "tp2_pp3_vocab2", .tp = 2, .pp = 3, .vocab = "vocab-2", .microbatches = 6});
  add({.name = "pp2_explicit_split", .pp = 2, .split = {5, 3}});
  // Experts: EP alone, with DP beside it, with TP, with PP and a zero-bubble schedule.
  add({.name = "moe_dp2", .model = "tiny-moe", .dp = 2});
  add({.name = "moe_ep2_dp2", .model = "tiny-moe", .dp = 2, .ep = 2});
  add({.name = "moe_ep2_dp4", .model = "tiny-moe", .dp = 4, .ep = 2});
  // The all-to-all in 3 chunks (on the collective stream on CPU threads, in place on a device).
  add({.name = "moe_ep2_dp2_a2a_chunks3", .model = "tiny-moe", .dp = 2, .ep = 2, .moe_chunks = 3});
  // Tutel's two-phase all-to-all, nodes of 2 EP ranks: in place, and in chunks on the stream
  // beside TP.
  add({.name = "moe_ep4_dp4_a2a_2dh",
       .model = "tiny-moe",
       .dp = 4,
       .ep = 4,
       .moe_a2a_node_ranks = 2});
  add({.name = "moe_tp2_ep4_dp4_a2a_2dh_chunks2",
       .model = "tiny-moe",
       .tp = 2,
       .dp = 4,
       .ep = 4,
       .moe_chunks = 2,
       .moe_a2a_node_ranks = 2});
  add({.name = "moe_ep2_dp2_zero1", .model = "tiny-moe", .dp = 2, .ep = 2, .zero = 1});
  add({.name = "moe_tp2_ep2_dp2", .model = "tiny-moe", .tp = 2, .dp = 2, .ep = 2});
  add({.name = "moe_tp2_ep2_dp2_sp",
       .model = "tiny-moe",
       .tp = 2,
       .dp = 2,
       .ep = 2,
       .sequence_parallel = true});
  // Whole experts inside the TP group (PPMoE): each TP rank computes its own experts' slots and
  // the layer's output is summed over TP; alone, beside EP (each TP rank exchanges its own
  // experts' rows only), under sequence parallelism with the all-to-all in chunks, and per layer
  // alternating with sharded experts (Tutel's per-layer choice).
  const auto whole = spec::ExpertLayout::Whole, sharded = spec::ExpertLayout::Sharded;
  add({.name = "moe_tp2_whole", .model = "tiny-moe", .tp = 2, .expert_layouts = {whole}});
  add({.name = "moe_tp2_ep2_dp2_whole",
       .model = "tiny-moe",
       .tp = 2,
       .dp = 2,
       .ep = 2,
       .expert_layouts = {whole}});
  add({.name = "moe_tp2_ep2_dp2_sp_whole_chunks2",
       .model = "tiny-moe",
       .tp = 2,
       .dp = 2,
       .ep = 2,
       .sequence_parallel = true,
       .moe_chunks = 2,
       .expert_layouts = {whole}});
  add({.name = "moe_tp2_pp2_layers_whole_and_sharded",
       .model = "tiny-moe",
       .tp = 2,
       .pp = 2,
       .expert_layouts = {whole, sharded, whole, sharded, sharded, whole, sharded, whole}});
  // Sharded experts deduplicated over TP (Parm): each TP rank's share of the slots through the
  // all-to-all, gathered over TP around the experts; and the three layouts per layer.
  const auto dedup = spec::ExpertLayout::Dedup;
  add({.name = "moe_tp2_ep2_dp2_sp_dedup",
       .model = "tiny-moe",
       .tp = 2,
       .dp = 2,
       .ep = 2,
       .sequence_parallel = true,
       .expert_layouts = {dedup}});
  add({.name = "moe_tp2_ep2_dp2_layers_dedup_whole_sharded",
       .model = "tiny-moe",
       .tp = 2,
       .dp = 2,
       .ep = 2,
       .expert_layouts = {dedup, whole, sharded, dedup, dedup, sharded, whole, dedup}});
  // Adaptive experts (Tutel): sharded in the first step, deduplicated in the second, then the
  // faster of the two for each layer.
  add({.name = "moe_tp2_ep2_dp2_adaptive_experts",
       .model = "tiny-moe",
       .tp = 2,
       .dp = 2,
       .ep = 2,
       .expert_layouts = {spec::ExpertLayout::Adaptive}});
  add({.name = "moe_pp2_ep2_dp2_zbh1",
       .model = "tiny-moe",
       .pp = 2,
       .dp = 2,
       .ep = 2,
       .schedule = "zb-h1"});
  // Per-stage layouts (each stage its own tp, activations resharded at the boundary) and
  // per-stage recomputation (Merak).
  add({.name = "pp2_stage_tp1_2", .pp = 2, .stage_tp = {1, 2}});
  add({.name = "tp2_pp2_dp2_stage_tp2_1", .tp = 2, .pp = 2, .dp = 2, .stage_tp = {2, 1}});
  const auto full = spec::Recompute::Full, selective = spec::Recompute::Selective,
             none = spec::Recompute::None;
  add({.name = "pp4_stage_recompute",
       .pp = 4,
       .microbatches = 8,
       .stage_recompute = {full, selective, none, none}});
  return v;
}

// The matrix with the single-rank plan in front, for the GPU tests: on a GPU, or as a process,
// that plan is a test of its own against the CPU (on the CPU's threads it is the reference).
inline std::vector<PlanCase> plans_against_the_cpu() {
  std::vector<PlanCase> v = {{.name = "single"}};
  for (PlanCase& c : parallel_equivalence_plans()) v.push_back(std::move(c));
  return v;
}

}  // namespace pipetune::testing
