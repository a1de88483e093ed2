// The links a plan's process groups cross once its ranks are placed (Holmes): device slots by the
// plan's rank order (spec::device_slot: with per-stage layouts a stage's TP groups are its own
// consecutive slots, tp_of_stage wide), nodes in the plan's node group order
// (spec::placed_cluster). On a cluster whose node groups differ, groups of one kind in one stage
// (a stage's DP group of each TP rank, its TP group of each replica, each replica's pipeline hop)
// may cross different NICs; every replica waits for the slowest at the step's end, so a stage's
// link is the slowest of its groups. On a homogeneous cluster the first group stands for all
// (the groups differ only in how they straddle node boundaries).
#pragma once

#include <optional>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/collectives.hpp"

namespace pipetune::tuner {

struct StageLinks {
  GroupLink tp, dp, ep, expert_dp;
  bool operator==(const StageLinks&) const = default;
};

class RankLinks {
 public:
  // Expects a plan that passed spec::validate with this cluster. Keeps a reference to `cluster`
  // (a copy only when the plan reorders its node groups).
  RankLinks(const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan);
  RankLinks(const RankLinks&) = delete;
  RankLinks& operator=(const RankLinks&) = delete;

  // Pipeline rank r's TP, DP, EP and expert-DP groups.
  const StageLinks& stage(int r) const { return stages_[static_cast<std::size_t>(r)]; }
  // Between pipeline ranks a and b (a hop, or the tied embedding's first and last stages).
  GroupLink pair(int a, int b) const;
  // The pipeline group (every stage of one replica): the vocabulary-parallel collectives.
  GroupLink pipeline() const;

  const spec::ClusterSpec& placed() const { return *placed_; }

 private:
  // The group of `members` devices `stride` apart from the slot of (tp_rank, dp_rank, pp_rank).
  GroupLink group(int tp_rank, int dp_rank, int pp_rank, int stride, int members) const;
  // Slot of (tp_rank, dp_rank, pp_rank) and a stage's strides: the plan's device strides for
  // uniform layouts, else (tp-dp-pp) the stage's first slot, TP ranks adjacent, DP ranks its tp
  // apart.
  int slot(int tp_rank, int dp_rank, int pp_rank) const;
  int tp_stride() const { return varies_ ? 1 : at_.tp_stride; }
  int dp_stride(int pp_rank) const;
  int tp(int pp_rank) const;

  std::optional<spec::ClusterSpec> reordered_;  // the cluster with its node groups reordered
  const spec::ClusterSpec* placed_;
  int tp_, pp_, dp_, ep_;
  spec::DeviceStrides at_;
  bool varies_;                     // per-stage layouts: slots from stage_tp_ and first_slot_
  std::vector<int> stage_tp_;       // per pipeline rank (only when varies_)
  std::vector<int> first_slot_;     // per pipeline rank (only when varies_)
  bool heterogeneous_;              // groups of one kind may cross different NICs: check them all
  std::vector<StageLinks> stages_;  // per pipeline rank

  StageLinks stage_links(int r) const;
};

// The slower of two links, by the time of one all-reduce of 1 GB (or, for two single-member
// groups, the first).
const GroupLink& slower_link(const GroupLink& a, const GroupLink& b);

}  // namespace pipetune::tuner
