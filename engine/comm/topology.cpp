#include "engine/comm/topology.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "engine/errors.hpp"

namespace pipetune::comm {

namespace {

void check_positive(const char* name, int value) {
  if (value < 1)
    throw InputError(std::string(name) + "=" + std::to_string(value) + " must be at least 1");
}

}  // namespace

const char* group_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::tensor:
      return "tp";
    case GroupKind::pipeline:
      return "pp";
    case GroupKind::data:
      return "dp";
    case GroupKind::expert:
      return "ep";
    case GroupKind::expert_data:
      return "expert-dp";
    case GroupKind::vocabulary:
      return "vocab";
    case GroupKind::expert_node:
      return "ep-node";
    case GroupKind::expert_cross:
      return "ep-cross";
  }
  return "?";
}

Topology::Topology(const spec::ParallelPlan& plan)
    : Topology(plan.tp, plan.pp, plan.dp, plan.ep, plan.rank_order) {
  if (const int g = plan.moe_a2a_node_ranks; g != 0) {
    if (g <= 1 || g >= ep_ || ep_ % g != 0)
      throw InputError({"plan.moe_a2a_node_ranks", "plan.ep"},
                       "moe_a2a_node_ranks=" + std::to_string(g) + " must divide ep=" +
                           std::to_string(ep_) + " and lie strictly between 1 and ep");
    ep_node_ranks_ = g;
  }
  if (plan.stage_tp.empty()) return;
  if (static_cast<int>(plan.stage_tp.size()) != pp_)
    throw InputError({"plan.stage_tp", "plan.pp"},
                     "stage_tp has " + std::to_string(plan.stage_tp.size()) +
                         " entries for pp=" + std::to_string(pp_) + " stages");
  for (int t : plan.stage_tp) check_positive("stage_tp entry", t);
  if (plan.stage_tp.front() != tp_)
    throw InputError({"plan.stage_tp", "plan.tp"},
                     "stage_tp[0]=" + std::to_string(plan.stage_tp.front()) +
                         " differs from tp=" + std::to_string(tp_) + " (tp is stage 0's)");
  varies_ = spec::stage_tp_varies(plan);
  if (!varies_) return;
  if (order_ != spec::RankOrder::TpDpPp)
    throw InputError({"plan.stage_tp", "plan.rank_order"},
                     "per-stage tp degrees number ranks in the tp-dp-pp order only");
  stage_tp_ = plan.stage_tp;
  long long first = 0;
  for (int s = 0; s < pp_; ++s) {
    stage_first_[static_cast<std::size_t>(s)] = static_cast<int>(first);
    first += static_cast<long long>(stage_tp_[static_cast<std::size_t>(s)]) * dp_;
    if (first > std::numeric_limits<int>::max())
      throw InputError({"plan.stage_tp", "plan.dp"},
                       "world=dp*sum(stage_tp)=" + std::to_string(first) + " is too large");
  }
  stage_first_.back() = static_cast<int>(first);
  world_ = static_cast<int>(first);
}

Topology::Topology(int tp, int pp, int dp, int ep, spec::RankOrder order)
    : tp_(tp), pp_(pp), dp_(dp), ep_(ep), order_(order) {
  check_positive("tp", tp);
  check_positive("pp", pp);
  check_positive("dp", dp);
  check_positive("ep", ep);
  if (dp % ep != 0)
    throw InputError("ep=" + std::to_string(ep) + " does not divide dp=" + std::to_string(dp));
  const long long world = static_cast<long long>(tp) * pp * dp;
  if (world > std::numeric_limits<int>::max())
    throw InputError("world=tp*pp*dp=" + std::to_string(world) + " is too large");
  world_ = static_cast<int>(world);
  stage_tp_.assign(static_cast<std::size_t>(pp), tp);
  // Stage s's first rank in the tp-dp-pp order (what the per-stage numbering generalises).
  stage_first_.resize(static_cast<std::size_t>(pp) + 1);
  for (int s = 0; s <= pp; ++s) stage_first_[static_cast<std::size_t>(s)] = s * tp * dp;
}

void Topology::check_rank(int rank) const {
  if (rank < 0 || rank >= world())
    throw InputError("rank " + std::to_string(rank) + " is outside the world of " +
                     std::to_string(world()) + " ranks");
}

void Topology::check_stage(int pp_rank) const {
  if (pp_rank < 0 || pp_rank >= pp_)
    throw InputError("pipeline rank " + std::to_string(pp_rank) +
                     " is outside pp=" + std::to_string(pp_));
}

void Topology::require_uniform(const char* what) const {
  if (varies_)
    throw InputError({"plan.stage_tp"}, std::string(what) +
                                            " needs every stage to have the same tp degree "
                                            "(plan.stage_tp gives them different ones)");
}

int Topology::tp_of_stage(int pp_rank) const {
  check_stage(pp_rank);
  return stage_tp_[static_cast<std::size_t>(pp_rank)];
}

int Topology::rank_of(int tp_rank, int dp_rank, int pp_rank) const {
  const int stage_tp =
      pp_rank >= 0 && pp_rank < pp_ ? stage_tp_[static_cast<std::size_t>(pp_rank)] : tp_;
  if (tp_rank < 0 || tp_rank >= stage_tp || dp_rank < 0 || dp_rank >= dp_ || pp_rank < 0 ||
      pp_rank >= pp_)
    throw InputError("coordinates (tp=" + std::to_string(tp_rank) +
                     ", dp=" + std::to_string(dp_rank) + ", pp=" + std::to_string(pp_rank) +
                     ") are outside the grid tp=" + std::to_string(stage_tp) +
                     " dp=" + std::to_string(dp_) + " pp=" + std::to_string(pp_));
  if (order_ == spec::RankOrder::TpPpDp) return tp_rank + tp_ * (pp_rank + pp_ * dp_rank);
  if (varies_)
    return stage_first_[static_cast<std::size_t>(pp_rank)] + tp_rank + stage_tp * dp_rank;
  return tp_rank + tp_ * (dp_rank + dp_ * pp_rank);
}

RankCoordinates Topology::coordinates(int rank) const {
  check_rank(rank);
  RankCoordinates c;
  if (varies_) {
    // The stage whose ranks [first(s), first(s + 1)) hold `rank`.
    const auto next = std::upper_bound(stage_first_.begin(), stage_first_.end(), rank);
    c.pp_rank = static_cast<int>(next - stage_first_.begin()) - 1;
    const int stage_tp = stage_tp_[static_cast<std::size_t>(c.pp_rank)];
    const int local = rank - stage_first_[static_cast<std::size_t>(c.pp_rank)];
    c.tp_rank = local % stage_tp;
    c.dp_rank = local / stage_tp;
  } else {
    c.tp_rank = rank % tp_;
    if (order_ == spec::RankOrder::TpPpDp) {
      c.pp_rank = (rank / tp_) % pp_;
      c.dp_rank = rank / (tp_ * pp_);
    } else {
      c.dp_rank = (rank / tp_) % dp_;
      c.pp_rank = rank / (tp_ * dp_);
    }
  }
  c.ep_rank = c.dp_rank % ep_;
  c.ep_index = c.dp_rank / ep_;
  return c;
}

int Topology::default_order_rank(int rank) const {
  const RankCoordinates c = coordinates(rank);
  if (varies_) return rank;  // per-stage layouts number ranks in the default order already
  return c.tp_rank + tp_ * (c.dp_rank + dp_ * c.pp_rank);
}

ProcessGroup Topology::group(GroupKind kind, int rank) const {
  const RankCoordinates c = coordinates(rank);
  ProcessGroup g{group_name(kind), {}};
  switch (kind) {
    case GroupKind::tensor:
      for (int t = 0; t < tp_of_stage(c.pp_rank); ++t)
        g.ranks.push_back(rank_of(t, c.dp_rank, c.pp_rank));
      break;
    case GroupKind::pipeline:
    case GroupKind::vocabulary:
      require_uniform(kind == GroupKind::pipeline ? "the pipeline group" : "the vocabulary group");
      for (int p = 0; p < pp_; ++p) g.ranks.push_back(rank_of(c.tp_rank, c.dp_rank, p));
      break;
    case GroupKind::data:
      for (int d = 0; d < dp_; ++d) g.ranks.push_back(rank_of(c.tp_rank, d, c.pp_rank));
      break;
    case GroupKind::expert:
      for (int e = 0; e < ep_; ++e)
        g.ranks.push_back(rank_of(c.tp_rank, c.ep_index * ep_ + e, c.pp_rank));
      break;
    case GroupKind::expert_data:
      for (int i = 0; i < dp_ / ep_; ++i)
        g.ranks.push_back(rank_of(c.tp_rank, i * ep_ + c.ep_rank, c.pp_rank));
      break;
    case GroupKind::expert_node:
    case GroupKind::expert_cross: {
      const int n = ep_node_ranks_;
      if (n == 0)
        throw InputError({"plan.moe_a2a_node_ranks"},
                         std::string("the ") + group_name(kind) +
                             " group needs a two-phase all-to-all (moe_a2a_node_ranks)");
      const int node = c.ep_rank / n, place = c.ep_rank % n, first = c.ep_index * ep_;
      if (kind == GroupKind::expert_node)
        for (int e = 0; e < n; ++e)
          g.ranks.push_back(rank_of(c.tp_rank, first + node * n + e, c.pp_rank));
      else
        for (int m = 0; m < ep_ / n; ++m)
          g.ranks.push_back(rank_of(c.tp_rank, first + m * n + place, c.pp_rank));
      break;
    }
  }
  return g;
}

std::vector<ProcessGroup> Topology::all_groups(GroupKind kind) const {
  std::vector<ProcessGroup> groups;
  std::vector<char> covered(static_cast<std::size_t>(world()), 0);
  for (int r = 0; r < world(); ++r) {
    if (covered[static_cast<std::size_t>(r)]) continue;
    ProcessGroup g = group(kind, r);
    for (int member : g.ranks) covered[static_cast<std::size_t>(member)] = 1;
    groups.push_back(std::move(g));
  }
  return groups;
}

int Topology::pp_prev(int rank) const {
  require_uniform("the previous pipeline rank");
  const RankCoordinates c = coordinates(rank);
  return c.pp_rank == 0 ? -1 : rank_of(c.tp_rank, c.dp_rank, c.pp_rank - 1);
}

int Topology::pp_next(int rank) const {
  require_uniform("the next pipeline rank");
  const RankCoordinates c = coordinates(rank);
  return c.pp_rank == pp_ - 1 ? -1 : rank_of(c.tp_rank, c.dp_rank, c.pp_rank + 1);
}

std::vector<int> Topology::pipeline_receivers(int rank, int peer_pp_rank) const {
  const RankCoordinates c = coordinates(rank);
  const int own = tp_of_stage(c.pp_rank), peer = tp_of_stage(peer_pp_rank);
  const std::vector<int> senders = spec::reshard_senders(own, peer);
  std::vector<int> out;
  for (int j = 0; j < peer; ++j)
    if (senders[static_cast<std::size_t>(j)] == c.tp_rank)
      out.push_back(rank_of(j, c.dp_rank, peer_pp_rank));
  return out;
}

int Topology::pipeline_sender(int rank, int peer_pp_rank) const {
  const RankCoordinates c = coordinates(rank);
  const int own = tp_of_stage(c.pp_rank), peer = tp_of_stage(peer_pp_rank);
  const int sender = spec::reshard_senders(peer, own)[static_cast<std::size_t>(c.tp_rank)];
  return rank_of(sender, c.dp_rank, peer_pp_rank);
}

std::vector<ProcessGroup> every_group(const Topology& topology) {
  std::vector<ProcessGroup> out;
  for (GroupKind kind : kAllGroupKinds) {
    if (topology.stage_tp_varies() &&
        (kind == GroupKind::pipeline || kind == GroupKind::vocabulary))
      continue;
    std::vector<ProcessGroup> groups = topology.all_groups(kind);
    out.insert(out.end(), groups.begin(), groups.end());
  }
  if (topology.ep_node_ranks() > 0)
    for (GroupKind kind : {GroupKind::expert_node, GroupKind::expert_cross}) {
      std::vector<ProcessGroup> groups = topology.all_groups(kind);
      out.insert(out.end(), groups.begin(), groups.end());
    }
  return out;
}

}  // namespace pipetune::comm
