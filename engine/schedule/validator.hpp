// One validator for every schedule: each (op kind, micro-batch, chunk) exactly once on its rank,
// barriers issued in the same order on every rank, dependencies satisfiable (no deadlock).
#pragma once

#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule {

// Throws ScheduleError naming the first broken rule, or DeadlockError listing the stuck ops and
// what each waits for.
void validate(const Schedule& s);

// Only the structural part (counts, ranges, barrier order); validate() also proves no deadlock.
void validate_structure(const Schedule& s);

}  // namespace pipetune::schedule
