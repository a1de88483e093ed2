// One order in which a schedule's ops can all run (a topological order of program order and the
// dependencies of dependencies.hpp), each op with where its input's time is read and where its
// product's time is written (indices into the executor's event times, EventTimes::index). Under
// a model where an op starts at the latest of its rank's stream and its input, as the
// simulator's short path, every such order gives each op the same times, to the last bit: the
// simulator replays a recorded order instead of executing the schedule again (the tuner times a
// schedule under many cost tables), and a planner records the order it planned in.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule {

struct ExecutionStep {
  enum Flag : std::uint8_t {
    kTransfer = 1,          // the input comes from another rank: a point-to-point transfer
    kJoinsBarrier = 2,      // `output` is a barrier the op arrives at
    kCompletesBarrier = 4,  // ... as its last arrival: the barrier runs
    kWait = 8,              // not an op: the rank waits for barrier `input` (interlaced passes)
  };
  std::int32_t rank = 0;
  std::int32_t input = -1;   // event index, -1: none
  std::int32_t output = -1;  // event index, -1: none
  OpKind kind = OpKind::F;
  std::uint8_t flags = 0;
};

struct ExecutionOrder {
  std::vector<ExecutionStep> steps;
  std::size_t events = 0;         // EventTimes::size() of the schedule
  std::uint64_t fingerprint = 0;  // op_fingerprint (planned_time.hpp) of the lists recorded
  bool has_pairs = false;  // overlapped pairs are recorded as two ops: not replayable as such
};

// Executes s once to record an order (throws DeadlockError as execute() does).
ExecutionOrder record_execution_order(const Schedule& s);

}  // namespace pipetune::schedule
