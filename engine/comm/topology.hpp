// Where every rank of a virtual cluster sits in the TP x DP x PP grid, and the process groups
// that follow from it. Rank order is Megatron's default, tp fastest, then dp, then pp:
//
//   rank = tp_rank + tp * (dp_rank + dp * pp_rank)
//
// or, with spec::RankOrder::TpPpDp (Megatron's --use-tp-pp-dp-mapping), tp, then pp, then dp:
//
//   rank = tp_rank + tp * (pp_rank + pp * dp_rank)
//
// EP groups are carved out of the DP ranks: consecutive dp ranks form one EP group (ep divides
// dp). The expert-dp group joins the ranks that hold the same expert shard (same ep_rank in
// different EP groups); expert gradients are reduced over it. The vocabulary group holds all PP
// ranks of one TP/DP slice: the same members as the PP group, kept under its own name so that
// vocabulary collectives and pipeline collectives are separate streams, as they are with NCCL.
//
// A two-phase all-to-all (ParallelPlan::moe_a2a_node_ranks = g, Tutel's 2DH) splits each EP
// group into nodes of g consecutive EP ranks: the expert-node group holds the EP ranks of one
// node, the expert-cross group the EP ranks at the same place (ep_rank % g) of every node.
//
// Per-stage layouts (ParallelPlan::stage_tp, tp-dp-pp order only): stage s has its own TP degree
// tp_s and the same dp; its ranks take consecutive numbers from the sum of the earlier stages'
// tp_s' * dp, tp fastest:
//
//   rank = first(pp_rank) + tp_rank + tp_s * dp_rank
//
// (spec::device_slot). TP, DP and EP groups stay inside a stage. The PP and vocabulary groups
// ("same tp_rank and dp_rank on every stage") do not exist then, so asking for them throws;
// point-to-point between stages goes through pipeline_receivers / pipeline_sender, which follow
// spec::reshard_senders (and give the uniform grid's single peer when the tp degrees agree).
#pragma once

#include <vector>

#include "engine/comm/process_group.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::comm {

enum class GroupKind {
  tensor,
  pipeline,
  data,
  expert,
  expert_data,
  vocabulary,
  expert_node,  // two-phase all-to-all only: the EP ranks of one node
  expert_cross  // two-phase all-to-all only: one EP rank of each node, at the same place
};

struct RankCoordinates {
  int tp_rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
  int ep_rank = 0;   // position inside its EP group (dp_rank % ep)
  int ep_index = 0;  // which EP group of its DP group (dp_rank / ep)
};

class Topology {
 public:
  // Throws InputError naming the broken rule ("ep=3 does not divide dp=4").
  Topology(int tp, int pp, int dp, int ep = 1, spec::RankOrder order = spec::RankOrder::TpDpPp);
  // The plan's grid and rank order.
  explicit Topology(const spec::ParallelPlan& plan);

  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int dp() const { return dp_; }
  int ep() const { return ep_; }
  // EP ranks per node of a two-phase all-to-all; 0 = none (the expert-node and expert-cross
  // groups do not exist then, and asking for them throws).
  int ep_node_ranks() const { return ep_node_ranks_; }
  int world() const { return world_; }
  spec::RankOrder order() const { return order_; }
  // The TP degree of pipeline rank `pp_rank`'s stage (tp() unless the plan gives stage_tp).
  int tp_of_stage(int pp_rank) const;
  // True when some stage's TP degree differs from another's.
  bool stage_tp_varies() const { return varies_; }

  int rank_of(int tp_rank, int dp_rank, int pp_rank) const;
  RankCoordinates coordinates(int rank) const;
  // The rank's number in the default order (tp-dp-pp): how stored traces number ranks.
  int default_order_rank(int rank) const;

  // The group of `kind` that `rank` belongs to.
  ProcessGroup group(GroupKind kind, int rank) const;
  ProcessGroup tp_group(int rank) const { return group(GroupKind::tensor, rank); }
  ProcessGroup pp_group(int rank) const { return group(GroupKind::pipeline, rank); }
  ProcessGroup dp_group(int rank) const { return group(GroupKind::data, rank); }
  ProcessGroup ep_group(int rank) const { return group(GroupKind::expert, rank); }
  ProcessGroup expert_dp_group(int rank) const { return group(GroupKind::expert_data, rank); }
  ProcessGroup vocab_group(int rank) const { return group(GroupKind::vocabulary, rank); }
  ProcessGroup world_group() const { return make_world_group(world()); }

  // Every distinct group of one kind (they partition the world), ordered by first member.
  // With per-stage layouts the pipeline and vocabulary kinds throw, as group() does.
  std::vector<ProcessGroup> all_groups(GroupKind kind) const;

  // Global rank of the previous / next pipeline stage of `rank`, or -1 at the ends. Uniform
  // layouts only (one peer per neighbour); throws InputError naming plan.stage_tp otherwise.
  int pp_prev(int rank) const;
  int pp_next(int rank) const;

  // Point-to-point with pipeline rank `peer_pp_rank` (any stage, `rank`'s own included), in
  // `rank`'s DP replica. A tensor that is whole on each TP rank of `rank`'s stage (an
  // activation forward, its gradient backward) goes to every rank of the peer stage whose
  // sender (spec::reshard_senders: receiver j takes from sender j % senders) is `rank`'s
  // tp_rank: one rank with equal tp degrees, ceil(tp_peer / tp_own) or none otherwise.
  std::vector<int> pipeline_receivers(int rank, int peer_pp_rank) const;
  // The rank of pipeline rank `peer_pp_rank` (same DP replica) whose copy `rank` takes.
  int pipeline_sender(int rank, int peer_pp_rank) const;

 private:
  void check_rank(int rank) const;
  void check_stage(int pp_rank) const;
  // Throws InputError naming plan.stage_tp when the stages' tp degrees differ: `what` needs the
  // uniform grid.
  void require_uniform(const char* what) const;
  int tp_, pp_, dp_, ep_;
  int ep_node_ranks_ = 0;
  spec::RankOrder order_;
  std::vector<int> stage_tp_;     // pp entries
  std::vector<int> stage_first_;  // pp + 1 entries: the first rank of each stage, then world
  int world_ = 0;
  bool varies_ = false;
};

const char* group_name(GroupKind kind);

inline constexpr GroupKind kAllGroupKinds[] = {GroupKind::tensor,      GroupKind::pipeline,
                                               GroupKind::data,        GroupKind::expert,
                                               GroupKind::expert_data, GroupKind::vocabulary};

// Every group of every kind, in one fixed order (kind, then first member): what a process
// communicator that makes its groups up front (MPI) declares. With per-stage layouts the
// pipeline and vocabulary kinds are left out (they do not exist; the pipeline's messages are
// point-to-point over the world); the expert-node and expert-cross kinds come last, with a
// two-phase all-to-all only.
std::vector<ProcessGroup> every_group(const Topology& topology);

}  // namespace pipetune::comm
