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
  friend bool operator==(const Event&, const Event&) = default;
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

// The event an op produces (Forward, Backward) or the barrier it joins (S, T, IF). Ops that do
// neither (W, IB, R, and T under Vocab2) return present=false.
struct Production {
  bool present = false;
  Event event;
  bool joins_barrier = false;      // the op arrives at a barrier rather than producing alone
  bool waits_for_barrier = false;  // Interlaced: the rank blocks until the barrier completes
};

// Defined inline below: the executor calls both for every op.
namespace detail {

inline Requirement on_op(const Schedule& s, int rank, EventKind kind, int group, int mb) {
  Requirement r;
  r.present = true;
  r.event = Event{kind, group, mb};
  r.source_rank = s.rank_of_group(group);
  r.transfer = r.source_rank != rank;
  return r;
}

inline Requirement on_barrier(EventKind kind, int mb) {
  Requirement r;
  r.present = true;
  r.event = Event{kind, -1, mb};
  return r;
}

}  // namespace detail

inline Requirement requirement_of(const Schedule& s, int rank, const Op& op) {
  const int last = s.groups() - 1;
  const bool vocab = s.vocab != VocabMode::None;
  switch (op.kind) {
    case OpKind::F: {
      const int g = s.group_of(rank, op.chunk);
      // The group before on the micro-batch's path (partial pipelining skips some).
      if (g > 0)
        return detail::on_op(s, rank, EventKind::Forward, s.previous_group(g, op.microbatch),
                             op.microbatch);
      if (vocab) return detail::on_barrier(EventKind::InputReduce, op.microbatch);
      return {};
    }
    case OpKind::B:
    case OpKind::BW: {
      const int g = s.group_of(rank, op.chunk);
      if (g < last)
        return detail::on_op(s, rank, EventKind::Backward, s.next_group(g, op.microbatch),
                             op.microbatch);
      if (s.vocab == VocabMode::Vocab2)
        return detail::on_barrier(EventKind::OutputBarrier1, op.microbatch);
      if (vocab) return detail::on_barrier(EventKind::OutputBarrier2, op.microbatch);
      return detail::on_op(s, rank, EventKind::Forward, g, op.microbatch);  // the loss
    }
    case OpKind::W: {
      Requirement r =
          detail::on_op(s, rank, EventKind::Backward, s.group_of(rank, op.chunk), op.microbatch);
      r.needs_split_b = true;
      return r;
    }
    case OpKind::S:  // needs the final hidden state, broadcast from the last group's rank
      return detail::on_op(s, rank, EventKind::Forward, last, op.microbatch);
    case OpKind::T:  // needs the reduced softmax statistics and the loss gradient
      return detail::on_barrier(EventKind::OutputBarrier1, op.microbatch);
    case OpKind::IF:
    case OpKind::R:  // the group's weight gradients: earlier ops of its own rank
      return {};
    case OpKind::IB:  // needs dL/dE, broadcast from the rank of group 0
      return detail::on_op(s, rank, EventKind::Backward, 0, op.microbatch);
  }
  return {};
}

inline Production production_of(const Schedule& s, int rank, const Op& op) {
  Production p;
  switch (op.kind) {
    case OpKind::F:
      p.present = true;
      p.event = Event{EventKind::Forward, s.group_of(rank, op.chunk), op.microbatch};
      break;
    case OpKind::B:
    case OpKind::BW:
      p.present = true;
      p.event = Event{EventKind::Backward, s.group_of(rank, op.chunk), op.microbatch};
      break;
    case OpKind::S:
      p.present = true;
      p.joins_barrier = true;
      p.event = Event{EventKind::OutputBarrier1, -1, op.microbatch};
      break;
    case OpKind::T:
      if (s.vocab == VocabMode::Vocab1 || s.vocab == VocabMode::Interlaced) {
        p.present = true;
        p.joins_barrier = true;
        p.event = Event{EventKind::OutputBarrier2, -1, op.microbatch};
      }
      break;
    case OpKind::IF:
      p.present = true;
      p.joins_barrier = true;
      p.event = Event{EventKind::InputReduce, -1, op.microbatch};
      break;
    case OpKind::W:
    case OpKind::IB:
    case OpKind::R:
      break;
  }
  p.waits_for_barrier = p.joins_barrier && s.vocab == VocabMode::Interlaced;
  return p;
}

}  // namespace pipetune::schedule
