// The flags of a plan's counts, declared once for every command that takes a plan as flags
// (train, predict, import-trace and import-nsys): --tp --pp --dp --ep --chunks --microbatches
// --micro-batch-size --zero --slices. A count given is at least 1, never silently replaced by a
// default (count_flags.hpp); a count not given is the command's default. --zero's range is the
// plan's own rule (spec::validate).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/spec/parallel_plan.hpp"

namespace pipetune::cli {

struct PlanFlags {
  std::optional<int> tp, pp, dp, ep, chunks, microbatches, micro_batch_size, zero, slices,
      moe_chunks, moe_a2a_node_ranks;
  // --expert-layout whole | sharded | one per MoE layer ("whole,sharded,...").
  std::optional<std::string> expert_layout;
  bool sparse_embedding_gradient = false;  // --sparse-embedding-grad (EmbRace)

  bool any_given() const;
  // InputError "FLAG must be at least 1, not N" for the first count given below 1, or
  // "--expert-layout: ..." naming a bad layout.
  void check_counts() const;
  // The counts given, set on `plan` (checked first); those not given left as they are.
  void apply_to(spec::ParallelPlan& plan) const;
};

// What each flag says in a command's help; a flag without one is not declared by the command.
struct PlanFlagHelp {
  const char* tp = nullptr;
  const char* pp = nullptr;
  const char* dp = nullptr;
  const char* ep = nullptr;
  const char* chunks = nullptr;
  const char* microbatches = nullptr;
  const char* micro_batch_size = nullptr;
  const char* zero = nullptr;
  const char* slices = nullptr;
  const char* moe_chunks = nullptr;
  const char* moe_a2a_node_ranks = nullptr;
  const char* expert_layout = nullptr;
  const char* sparse_embedding_gradient = nullptr;
};

void add_plan_flags(CLI::App* cmd, PlanFlags& flags, const PlanFlagHelp& help);

// Help texts train and predict share.
inline constexpr const char* kMoeChunksHelp =
    "MoE: each layer's all-to-all in this many chunks, overlapped with the experts' GEMMs "
    "(default 1)";
inline constexpr const char* kMoeA2aNodeRanksHelp =
    "MoE: Tutel's two-phase (2DH) all-to-all with this many EP ranks per node: among a node's "
    "ranks first, then across nodes (divides --ep; default: one flat all-to-all)";
inline constexpr const char* kExpertLayoutHelp =
    "MoE: experts inside the TP group, sharded (each expert split over TP, default), whole "
    "(PPMoE: whole experts divided among the TP ranks), dedup (Parm: sharded, each TP rank "
    "sending its share of the tokens) or adaptive (Tutel: sharded's parameters, computed as "
    "sharded or dedup, whichever a trial of the first two steps finds faster); one for every MoE "
    "layer or a comma list of one per MoE layer";
inline constexpr const char* kSparseEmbeddingHelp =
    "EmbRace: reduce the input embedding's gradient over DP by exchanging the rows of the tokens "
    "each replica embedded, not the whole table (under ZeRO each row sent to its owner)";

// `--stage-recompute full,selective,none,none`: one recomputation per pipeline rank, `pp` of them
// (empty text: none given). InputError "--stage-recompute: ..." naming the entry or the count.
std::vector<spec::Recompute> parse_stage_recompute_flag(const std::string& text, int pp);

// `--stage-tp 4,2,2`: one tensor-parallel degree per pipeline rank, `pp` of them (empty text:
// none given). InputError "--stage-tp: ..." naming the entry or the count.
std::vector<int> parse_stage_tp_flag(const std::string& text, int pp);

// Sets `plan.stage_tp` from --stage-tp's text: tp becomes its first entry, and a --tp that
// differs (`tp_flag`) is refused naming both flags. Blank text: nothing changes.
void apply_stage_tp_flag(const std::string& text, const std::optional<int>& tp_flag,
                         spec::ParallelPlan& plan);

}  // namespace pipetune::cli
