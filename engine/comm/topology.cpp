#include "engine/comm/topology.hpp"

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
  }
  return "?";
}

Topology::Topology(const spec::ParallelPlan& plan)
    : Topology(plan.tp, plan.pp, plan.dp, plan.ep, plan.rank_order) {}

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
}

void Topology::check_rank(int rank) const {
  if (rank < 0 || rank >= world())
    throw InputError("rank " + std::to_string(rank) + " is outside the world of " +
                     std::to_string(world()) + " ranks");
}

int Topology::rank_of(int tp_rank, int dp_rank, int pp_rank) const {
  if (tp_rank < 0 || tp_rank >= tp_ || dp_rank < 0 || dp_rank >= dp_ || pp_rank < 0 ||
      pp_rank >= pp_)
    throw InputError("coordinates (tp=" + std::to_string(tp_rank) +
                     ", dp=" + std::to_string(dp_rank) + ", pp=" + std::to_string(pp_rank) +
                     ") are outside the grid tp=" + std::to_string(tp_) +
                     " dp=" + std::to_string(dp_) + " pp=" + std::to_string(pp_));
  if (order_ == spec::RankOrder::TpPpDp) return tp_rank + tp_ * (pp_rank + pp_ * dp_rank);
  return tp_rank + tp_ * (dp_rank + dp_ * pp_rank);
}

RankCoordinates Topology::coordinates(int rank) const {
  check_rank(rank);
  RankCoordinates c;
  c.tp_rank = rank % tp_;
  if (order_ == spec::RankOrder::TpPpDp) {
    c.pp_rank = (rank / tp_) % pp_;
    c.dp_rank = rank / (tp_ * pp_);
  } else {
    c.dp_rank = (rank / tp_) % dp_;
    c.pp_rank = rank / (tp_ * dp_);
  }
  c.ep_rank = c.dp_rank % ep_;
  c.ep_index = c.dp_rank / ep_;
  return c;
}

int Topology::default_order_rank(int rank) const {
  const RankCoordinates c = coordinates(rank);
  return c.tp_rank + tp_ * (c.dp_rank + dp_ * c.pp_rank);
}

ProcessGroup Topology::group(GroupKind kind, int rank) const {
  const RankCoordinates c = coordinates(rank);
  ProcessGroup g{group_name(kind), {}};
  switch (kind) {
    case GroupKind::tensor:
      for (int t = 0; t < tp_; ++t) g.ranks.push_back(rank_of(t, c.dp_rank, c.pp_rank));
      break;
    case GroupKind::pipeline:
    case GroupKind::vocabulary:
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
  const RankCoordinates c = coordinates(rank);
  return c.pp_rank == 0 ? -1 : rank_of(c.tp_rank, c.dp_rank, c.pp_rank - 1);
}

int Topology::pp_next(int rank) const {
  const RankCoordinates c = coordinates(rank);
  return c.pp_rank == pp_ - 1 ? -1 : rank_of(c.tp_rank, c.dp_rank, c.pp_rank + 1);
}

std::vector<ProcessGroup> every_group(const Topology& topology) {
  std::vector<ProcessGroup> out;
  for (GroupKind kind : kAllGroupKinds) {
    std::vector<ProcessGroup> groups = topology.all_groups(kind);
    out.insert(out.end(), groups.begin(), groups.end());
  }
  return out;
}

}  // namespace pipetune::comm
