// The iteration time a cost-aware generator found for its order while planning it, kept with the
// schedule: the simulator reads it instead of executing the order again where its own model, for
// that run, is the one the order was planned in (sim::simulate says when).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule {

struct PlannedTime {
  // What it was planned with: cost(r, k) at [r * kOpKindCount + k], one point-to-point transfer
  // (CostTable::p2p_time) and one barrier (collective_time).
  std::vector<double> costs;
  double p2p = 0.0;
  double collective = 0.0;
  // The end of the last op or barrier, where every op started at the latest of the end of its
  // rank's op before (or barrier wait) and its input's time (plus p2p when produced on another
  // rank), and every barrier at its last arrival, which no earlier barrier's end was past.
  double iteration = 0.0;
  // op_fingerprint of the lists it was planned for: changed lists are not read as planned.
  std::uint64_t fingerprint = 0;
};

// A hash of every rank's op list (kind, chunk, micro-batch, pairing; the ranks kept apart).
std::uint64_t op_fingerprint(const Schedule& s);

// Keeps with s the iteration planned for its lists (as they are now) under `costs`; lists with
// gradient reductions or overlapped pairs keep none.
void set_planned_time(Schedule& s, const CostTable& costs, double iteration);

}  // namespace pipetune::schedule
