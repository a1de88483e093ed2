#include "engine/schedule/dependencies.hpp"

namespace pipetune::schedule {

bool is_barrier(EventKind k) {
  return k == EventKind::InputReduce || k == EventKind::OutputBarrier1 ||
         k == EventKind::OutputBarrier2;
}

std::string event_label(const Event& e) {
  const std::string mb = "mb" + std::to_string(e.microbatch);
  switch (e.kind) {
    case EventKind::Forward:
      return "F(g" + std::to_string(e.group) + ", " + mb + ")";
    case EventKind::Backward:
      return "B(g" + std::to_string(e.group) + ", " + mb + ")";
    case EventKind::InputReduce:
      return "IF-reduce(" + mb + ")";
    case EventKind::OutputBarrier1:
      return "C1(" + mb + ")";
    case EventKind::OutputBarrier2:
      return "C2(" + mb + ")";
  }
  return "?";
}

namespace {

Requirement on_op(const Schedule& s, int rank, EventKind kind, int group, int mb) {
  Requirement r;
  r.present = true;
  r.event = Event{kind, group, mb};
  r.source_rank = s.rank_of_group(group);
  r.transfer = r.source_rank != rank;
  return r;
}

Requirement on_barrier(EventKind kind, int mb) {
  Requirement r;
  r.present = true;
  r.event = Event{kind, -1, mb};
  return r;
}

}  // namespace

Requirement requirement_of(const Schedule& s, int rank, const Op& op) {
  const int last = s.groups() - 1;
  const bool vocab = s.vocab != VocabMode::None;
  switch (op.kind) {
    case OpKind::F: {
      const int g = s.group_of(rank, op.chunk);
      if (g > 0) return on_op(s, rank, EventKind::Forward, g - 1, op.microbatch);
      if (vocab) return on_barrier(EventKind::InputReduce, op.microbatch);
      return {};
    }
    case OpKind::B:
    case OpKind::BW: {
      const int g = s.group_of(rank, op.chunk);
      if (g < last) return on_op(s, rank, EventKind::Backward, g + 1, op.microbatch);
      if (s.vocab == VocabMode::Vocab2) return on_barrier(EventKind::OutputBarrier1, op.microbatch);
      if (vocab) return on_barrier(EventKind::OutputBarrier2, op.microbatch);
      return on_op(s, rank, EventKind::Forward, g, op.microbatch);  // the loss
    }
    case OpKind::W: {
      Requirement r =
          on_op(s, rank, EventKind::Backward, s.group_of(rank, op.chunk), op.microbatch);
      r.needs_split_b = true;
      return r;
    }
    case OpKind::S:  // needs the final hidden state, broadcast from the last group's rank
      return on_op(s, rank, EventKind::Forward, last, op.microbatch);
    case OpKind::T:  // needs the reduced softmax statistics and the loss gradient
      return on_barrier(EventKind::OutputBarrier1, op.microbatch);
    case OpKind::IF:
      return {};
    case OpKind::IB:  // needs dL/dE, broadcast from the rank of group 0
      return on_op(s, rank, EventKind::Backward, 0, op.microbatch);
  }
  return {};
}

Production production_of(const Schedule& s, int rank, const Op& op) {
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
      break;
  }
  p.waits_for_barrier = p.joins_barrier && s.vocab == VocabMode::Interlaced;
  return p;
}

}  // namespace pipetune::schedule
