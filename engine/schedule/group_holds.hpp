// ZeRO-2 and 3 with layer-group reductions (a schedule with R ops, reduces_per_group): what a
// rank keeps whole across ops, so that each layer group's parameters are gathered once per run
// of its ops and its gradients reduce-scattered once per iteration (layered gradient
// accumulation paired with ZeRO, Lamy-Poirier arXiv 2106.02679).
//
// - Gradients: a group's full layer gradients open at its first weight-gradient op, accumulate
//   over its micro-batches, and its R op reduce-scatters them into the rank's shards. Their
//   buffers are freed once that reduction has ended: the rank waits for it at its next R op (so at
//   most one held reduction is in flight) or at the iteration's end.
// - Parameters (ZeRO-3): a run is a maximal sequence of the rank's forward and backward-input ops
//   (F, B, BW) of one chunk, not in an overlapped pair, with only ops that need no layer values
//   between them (W, R and the vocabulary ops). The group's layer values are gathered before a
//   run's first op and freed after its last, in place of a gather per layer per op.
// The engine (RankRuntime), the simulator and the memory model all read these from here, so a
// prediction and a measurement gather and free at the same ops.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/schedule/op.hpp"

namespace pipetune::schedule {

struct GroupHolds {
  std::vector<char> gather_before;  // per op of the rank: a run of op.chunk starts here
  std::vector<char> release_after;  // per op: the run ends here
  int runs = 0;                     // parameter gathers of a group (one per run)
  // The most layer groups whose full gradients the rank holds at once (accumulating, or reduced
  // and not yet freed), under the wait-at-the-next-R rule above.
  int peak_gradient_groups = 0;
};

// Whether an op uses its chunk's layer values (F, B and BW: the ops a run is made of).
bool uses_layer_values(OpKind kind);

// `ops`: one rank's op list; `chunks`: the schedule's chunks per rank.
GroupHolds group_holds(const std::vector<Op>& ops, int chunks);

}  // namespace pipetune::schedule
