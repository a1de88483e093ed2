// Dependencies between ops, derived from where each layer group sits (DESIGN.md "Schedule").
// Shared by the validator, the simulator and the engine's runtime so that all three agree.
#pragma once

#include <cstdint>
#include <string>

#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule {

// Something an op waits for. Forward/Backward events are produced by one op on one rank; the
// barriers complete when every pipeline rank has reached them (a collective over the PP group).
enum class EventKind : std::uint8_t {
  Forward,         // output of F(group, mb)
  Backward,        // input gradient of group for mb (produced by B or BW)
  InputReduce,     // all-reduce of the IF partial embeddings of mb
  OutputBarrier1,  // C1: all-reduce of S statistics (max, sum of exp, target logit) of mb
  OutputBarrier2,  // C2: all-reduce of the output-layer input gradient after T of mb (Vocab1)
};

struct Event {
  EventKind kind = EventKind::Forward;
  std::int32_t group = -1;  // layer group for Forward/Backward, -1 for barriers
  std::int32_t microbatch = 0;
};

std::string event_label(const Event& e);  // "F(g3, mb5)", "C1(mb5)"...
bool is_barrier(EventKind k);

// What an op needs before it can start, besides program order on its rank.
struct Requirement {
  bool present = false;
  Event event;
  int source_rank = -1;        // rank that produces a Forward/Backward event; -1 for a barrier
  bool transfer = false;       // produced on another rank: pays a point-to-point transfer
  bool needs_split_b = false;  // W: the backward of (group, mb) must be a B, not a fused BW
};

Requirement requirement_of(const Schedule& s, int rank, const Op& op);

// The event an op produces (Forward, Backward) or the barrier it joins (S, T, IF). Ops that do
// neither (W, IB, and T under Vocab2) return present=false.
struct Production {
  bool present = false;
  Event event;
  bool joins_barrier = false;      // the op arrives at a barrier rather than producing alone
  bool waits_for_barrier = false;  // Interlaced: the rank blocks until the barrier completes
};

Production production_of(const Schedule& s, int rank, const Op& op);

}  // namespace pipetune::schedule
