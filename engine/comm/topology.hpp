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
#pragma once

#include <vector>

#include "engine/comm/process_group.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::comm {

enum class GroupKind { tensor, pipeline, data, expert, expert_data, vocabulary };

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
  int world() const { return tp_ * pp_ * dp_; }
  spec::RankOrder order() const { return order_; }

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
  std::vector<ProcessGroup> all_groups(GroupKind kind) const;

  // Global rank of the previous / next pipeline stage of `rank`, or -1 at the ends.
  int pp_prev(int rank) const;
  int pp_next(int rank) const;

 private:
  void check_rank(int rank) const;
  int tp_, pp_, dp_, ep_;
  spec::RankOrder order_;
};

const char* group_name(GroupKind kind);

inline constexpr GroupKind kAllGroupKinds[] = {GroupKind::tensor,      GroupKind::pipeline,
                                               GroupKind::data,        GroupKind::expert,
                                               GroupKind::expert_data, GroupKind::vocabulary};

// Every group of every kind, in one fixed order (kind, then first member): what a process
// communicator that makes its groups up front (MPI) declares.
std::vector<ProcessGroup> every_group(const Topology& topology);

}  // namespace pipetune::comm
