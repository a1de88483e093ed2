// Cross-mesh resharding (per-stage layouts, ParallelPlan::stage_tp): the time of one activation
// (forward) or gradient (backward) transfer across a pipeline boundary whose two stages have
// different TP degrees.
//
// The message is whole and identical on each of the `senders` TP ranks of the sending stage (no
// sequence parallelism) and each of the `receivers` TP ranks of the receiving stage needs it
// whole. Receiver j takes it from sender j % senders (spec::reshard_senders), so the busiest
// sender sends ceil(receivers / senders) copies one after the other:
//
//   reshard_time = ceil(receivers / senders) * (latency + bytes / link bandwidth)
//
// With senders == receivers that is one plain send (collective_time's SendRecv). A broadcast
// from one sender to the receivers (Alpa) would cost about bytes / bandwidth for any pair of
// degrees, but the engine's communicator has no sub-group broadcast across stages.
#pragma once

#include "tuner/cost/collectives.hpp"

namespace pipetune::tuner {

// The copies the busiest sender sends: ceil(receivers / senders). Both must be >= 1 (SpecError
// naming plan.stage_tp otherwise).
int reshard_copies(int senders, int receivers);

// Seconds of one boundary transfer of `bytes` from a stage of `senders` TP ranks to one of
// `receivers` over `link` (the link between the two stages' devices).
double reshard_time(int senders, int receivers, double bytes, const GroupLink& link);

}  // namespace pipetune::tuner
