#include "engine/schedule/executor.hpp"

#include <algorithm>

namespace pipetune::schedule {

EventTimes::EventTimes(const Schedule& s)
    : m_(s.microbatches), groups_(s.groups()), ranks_(s.stages) {
  const auto n = static_cast<std::size_t>(m_) * static_cast<std::size_t>(groups_);
  forward_.assign(n, -1.0);
  backward_.assign(n, -1.0);
  if (s.vocab != VocabMode::None) {
    for (int i = 0; i < 3; ++i) {
      barrier_done_[i].assign(static_cast<std::size_t>(m_), -1.0);
      barrier_max_[i].assign(static_cast<std::size_t>(m_), 0.0);
      barrier_count_[i].assign(static_cast<std::size_t>(m_), 0);
    }
  }
}

bool EventTimes::arrive(const Event& e, double t) {
  const int i = barrier_index(e.kind);
  const auto mb = static_cast<std::size_t>(e.microbatch);
  barrier_max_[i][mb] = std::max(barrier_max_[i][mb], t);
  return ++barrier_count_[i][mb] == ranks_;
}

double EventTimes::last_arrival(const Event& e) const {
  return barrier_max_[barrier_index(e.kind)][static_cast<std::size_t>(e.microbatch)];
}

int EventTimes::arrivals(const Event& e) const {
  return barrier_count_[barrier_index(e.kind)][static_cast<std::size_t>(e.microbatch)];
}

std::string describe_deadlock(const Schedule& s, const std::vector<std::size_t>& position,
                              const EventTimes& events) {
  std::string msg = "deadlock in schedule '" + s.name + "':";
  int listed = 0;
  int stuck = 0;
  for (int r = 0; r < s.stages; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)];
    const std::size_t pos = position[static_cast<std::size_t>(r)];
    if (pos >= ops.size()) continue;
    ++stuck;
    if (listed >= 8) continue;
    ++listed;
    const Op& op = ops[pos];
    Requirement req = requirement_of(s, r, op);
    std::string label = op_label(op);
    if (pos + 1 < ops.size() && ops[pos + 1].overlaps_previous) {
      // An overlapped pair waits for whichever of its two inputs is missing.
      label = pair_label(op, ops[pos + 1]);
      const Requirement second = requirement_of(s, r, ops[pos + 1]);
      if (!(req.present && events.time(req.event) < 0.0)) req = second;
    }
    msg += " rank " + std::to_string(r) + " " + label + " (op " + std::to_string(pos) +
           ") waits for " + event_label(req.event);
    if (is_barrier(req.event.kind)) {
      msg += " (" + std::to_string(events.arrivals(req.event)) + "/" + std::to_string(s.stages) +
             " ranks arrived)";
    } else {
      msg += " on rank " + std::to_string(req.source_rank);
    }
    msg += ";";
  }
  if (stuck > listed) msg += " and " + std::to_string(stuck - listed) + " more ranks stuck;";
  if (stuck == 0) msg += " a rank waits for a barrier that never completes;";
  msg.pop_back();
  return msg;
}

}  // namespace pipetune::schedule
