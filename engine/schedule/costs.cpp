#include "engine/schedule/costs.hpp"

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

double CostTable::cost(int rank, OpKind k) const {
  if (rank < 0 || rank >= static_cast<int>(stages.size())) {
    throw InputError("cost table has " + std::to_string(stages.size()) +
                     " stages, asked for stage " + std::to_string(rank));
  }
  const StageCosts& c = stages[static_cast<std::size_t>(rank)];
  if (k == OpKind::BW && c[OpKind::BW] <= 0.0) return c[OpKind::B] + c[OpKind::W];
  return c[k];
}

double CostTable::p2p_time() const {
  double t = p2p_latency;
  if (p2p_bandwidth > 0.0) t += p2p_bytes / p2p_bandwidth;
  return t;
}

}  // namespace pipetune::schedule
