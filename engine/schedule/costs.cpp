#include "engine/schedule/costs.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "engine/errors.hpp"

namespace pipetune::schedule {

CostTable CostTable::uniform(int stages, double f, double b, double w, double s, double t,
                             double comm) {
  CostTable table;
  StageCosts c;
  c[OpKind::F] = f;
  c[OpKind::B] = b;
  c[OpKind::W] = w;
  c[OpKind::BW] = b + w;
  c[OpKind::S] = s;
  c[OpKind::T] = t;
  c[OpKind::IF] = 0.0;
  c[OpKind::IB] = 0.0;
  table.stages.assign(static_cast<std::size_t>(stages), c);
  table.p2p_latency = comm;
  table.collective_time = comm;
  return table;
}

void CostTable::throw_no_stage(int rank) const {
  throw InputError("cost table has " + std::to_string(stages.size()) + " stages, asked for stage " +
                   std::to_string(rank));
}

double CostTable::comm(int rank, OpKind k) const {
  const StageCosts& c = stage(rank);
  const auto at = [&](OpKind kind) { return c.comm[static_cast<std::size_t>(kind)]; };
  if (k == OpKind::BW && c[OpKind::BW] <= 0.0) return at(OpKind::B) + at(OpKind::W);
  return at(k);
}

CostTable::SliceTerms CostTable::slice_terms(int rank, OpKind k) const {
  const double c = cost(rank, k);
  const StageCosts& st = stage(rank);
  const auto part = [&](const std::array<double, kOpKindCount>& parts) {
    const auto at = [&](OpKind kind) { return parts[static_cast<std::size_t>(kind)]; };
    if (k == OpKind::BW && st[OpKind::BW] <= 0.0) return at(OpKind::B) + at(OpKind::W);
    return at(k);
  };
  const double attention = part(st.attention), fixed = part(st.fixed);
  return {fixed, c - attention - fixed, attention};
}

double CostTable::slice_cost(int rank, OpKind k, SliceShape shape) const {
  if (shape.length >= 1.0) return cost(rank, k);
  return slice_terms(rank, k).at(shape);
}

double CostTable::p2p_time() const {
  double t = p2p_latency;
  if (p2p_bandwidth > 0.0) t += p2p_bytes / p2p_bandwidth;
  return t;
}

double CostTable::transfer_time(int source, int dest) const {
  if (pair_transfer.empty()) return p2p_time();
  const std::size_t p = stages.size();
  const auto s = static_cast<std::size_t>(source), d = static_cast<std::size_t>(dest);
  if (source < 0 || dest < 0 || s >= p || d >= p || pair_transfer.size() != p * p)
    throw InputError("cost table's pair transfers do not cover ranks " + std::to_string(source) +
                     " -> " + std::to_string(dest) + " of " + std::to_string(p) + " stages");
  return pair_transfer[s * p + d];
}

void check_schedule_time(double t, const char* what) {
  if (std::fabs(t) < kMaxScheduleTime) return;  // false for inf and nan too
  char shown[32];
  std::snprintf(shown, sizeof shown, "%g", t);
  throw InputError(std::string(what) + " of " + shown +
                   " is beyond what a trace holds (9.2e9 s, about 292 years of ns): the op costs "
                   "are too large");
}

void check_costs(const CostTable& costs) {
  const auto check = [](double c, const char* what) {
    if (!(c >= 0.0)) throw InputError(std::string(what) + " must be >= 0 (and not nan)");
    check_schedule_time(c, what);
  };
  for (int r = 0; r < static_cast<int>(costs.stages.size()); ++r) {
    for (OpKind k : kAllOpKinds) {
      const double cost = costs.cost(r, k);
      check(cost, "an op cost");
      const double comm = costs.comm(r, k);
      check(comm, "an op's communication time");
      if (comm > cost)
        throw InputError("the communication part of op " + std::string(op_kind_name(k)) +
                         " on stage " + std::to_string(r) + " (" + std::to_string(comm) +
                         " s) exceeds its cost (" + std::to_string(cost) + " s)");
      const StageCosts& st = costs.stages[static_cast<std::size_t>(r)];
      const double attention = st.attention[static_cast<std::size_t>(k)],
                   fixed = st.fixed[static_cast<std::size_t>(k)];
      check(attention, "an op's attention time");
      check(fixed, "an op's fixed time");
      if (attention + fixed > st[k] && st[k] > 0.0)
        throw InputError("the attention and fixed parts of op " + std::string(op_kind_name(k)) +
                         " on stage " + std::to_string(r) + " (" +
                         std::to_string(attention + fixed) + " s) exceed its cost (" +
                         std::to_string(st[k]) + " s)");
    }
    const StageCosts& st = costs.stages[static_cast<std::size_t>(r)];
    check(st.offload, "an offload copy time");
    check(st.run_gather, "a layer group's gather time");
    if (!(st.slowdown >= 1.0) || !std::isfinite(st.slowdown))
      throw InputError("stage " + std::to_string(r) +
                       ": a slowdown is a factor of at least 1 on its ops' costs");
    if (st.slow_replicas < 1)
      throw InputError("stage " + std::to_string(r) + ": slow replicas count from 1");
    for (std::size_t i = 0; i < st.failures.size(); ++i) {
      const StageCosts::Failure& f = st.failures[i];
      check(f.at, "a failure time");
      check(f.restart_delay, "a restart delay");
      if (f.new_replicas < 0)
        throw InputError("stage " + std::to_string(r) + ": a failure's new replicas count from 0");
      if (i > 0 && f.at < st.failures[i - 1].at)
        throw InputError("stage " + std::to_string(r) + ": its failures must be in order of time");
    }
  }
  check(costs.p2p_latency, "a transfer latency");
  if (!(costs.p2p_bytes >= 0.0) || !std::isfinite(costs.p2p_bytes))
    throw InputError("transfer bytes must be finite and >= 0");
  if (!(costs.p2p_bandwidth >= 0.0) || !std::isfinite(costs.p2p_bandwidth))
    throw InputError("a link bandwidth must be finite and >= 0");
  check(costs.p2p_time(), "a transfer time");
  const std::size_t p = costs.stages.size();
  if (!costs.pair_transfer.empty() && costs.pair_transfer.size() != p * p)
    throw InputError("pair transfer times must have stages x stages entries (" +
                     std::to_string(p * p) + "), got " +
                     std::to_string(costs.pair_transfer.size()));
  for (double t : costs.pair_transfer) check(t, "a pair transfer time");
  check(costs.collective_time, "a barrier time");
  if (costs.reroute_pool < 0 || costs.reroute_pool == 1)
    throw InputError("re-routing needs a pool of at least 2 replicas of each stage, got " +
                     std::to_string(costs.reroute_pool));
}

}  // namespace pipetune::schedule
