// Runs every rank's op list in an order that respects program order and the dependencies of
// dependencies.hpp (list scheduling, as the zero-bubble runtime's add_time pass). The executor
// decides only the order in which ops become runnable; a Hooks object assigns times:
//
//   double op(int rank, std::size_t index, const Op& op, const Requirement& req, double req_time)
//       Runs one op; req_time is when its requirement became available at the source (0 when it
//       has none). Returns the time its product (if any) is available on this rank.
//   double barrier(const Event& barrier, double last_arrival)
//       A barrier every rank has reached; returns its completion time.
//   void wait(int rank, double until)
//       Interlaced vocabulary passes: the rank's compute stream blocks until the barrier is done.
//   std::array<double, 2> pair(int rank, std::size_t index, const Op& first,
//                              const Requirement& first_req, double first_time,
//                              const Op& second, const Requirement& second_req,
//                              double second_time)          (optional)
//       Runs an overlapped pair (ops[index] and ops[index + 1], the second marked
//       overlaps_previous) once both requirements are met; returns when each product is
//       available. Hooks without it run the pair as op(first) then op(second).
//
// The validator runs it with timeless hooks to prove a schedule is free of deadlock; the
// simulator runs it with costs. A deadlock throws DeadlockError naming the stuck ops.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/dependencies.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule {

class EventTimes {
 public:
  explicit EventTimes(const Schedule& s);

  // Events numbered in one sequence (forward events, backward events, then the barriers'), for
  // a caller that keeps them in one array (execution_order.hpp): an event's number, and how many.
  std::size_t index(const Event& e) const {
    const auto m = static_cast<std::size_t>(m_);
    const auto mb = static_cast<std::size_t>(e.microbatch);
    const std::size_t per_kind = m * static_cast<std::size_t>(groups_);
    switch (e.kind) {
      case EventKind::Forward:
        return static_cast<std::size_t>(e.group) * m + mb;
      case EventKind::Backward:
        return per_kind + static_cast<std::size_t>(e.group) * m + mb;
      default:
        return 2 * per_kind + static_cast<std::size_t>(barrier_index(e.kind)) * m + mb;
    }
  }
  std::size_t size() const {
    return forward_.size() + backward_.size() + barrier_done_[0].size() * 3;
  }

  // Time at which the event is complete, or a negative value while it is not.
  double time(const Event& e) const { return const_cast<EventTimes*>(this)->slot_ref(e); }
  // Where that time is kept, for a caller that reads it again and again (it stays put).
  const double* slot(const Event& e) const { return &const_cast<EventTimes*>(this)->slot_ref(e); }
  // The same, to write: a caller may keep its own negative marks there until the event is set.
  double* slot(const Event& e) { return &slot_ref(e); }
  void set(const Event& e, double t) { slot_ref(e) = t; }
  // Barrier bookkeeping: returns true when this arrival was the last one.
  bool arrive(const Event& e, double t);
  double last_arrival(const Event& e) const;
  int arrivals(const Event& e) const;

 private:
  // The barriers' tables: C0 (input reduce), C1, C2.
  static int barrier_index(EventKind k) {
    return k == EventKind::InputReduce ? 0 : k == EventKind::OutputBarrier1 ? 1 : 2;
  }
  // Inline, one indexing rule for reads and writes: every executed op looks events up.
  double& slot_ref(const Event& e) {
    const auto mb = static_cast<std::size_t>(e.microbatch);
    const std::size_t at = static_cast<std::size_t>(e.group) * static_cast<std::size_t>(m_) + mb;
    switch (e.kind) {
      case EventKind::Forward:
        return forward_[at];
      case EventKind::Backward:
        return backward_[at];
      default:
        return barrier_done_[barrier_index(e.kind)][mb];
    }
  }
  int m_, groups_, ranks_;
  std::vector<double> forward_, backward_;
  std::vector<double> barrier_done_[3];
  std::vector<double> barrier_max_[3];
  std::vector<std::int32_t> barrier_count_[3];
};

// Builds the one-line deadlock report; exposed for tests and for the engine.
std::string describe_deadlock(const Schedule& s, const std::vector<std::size_t>& position,
                              const EventTimes& events);

namespace detail {

// Wakes the ranks that consume rank r's point-to-point event: forward output goes to the next
// group's rank (or every rank for S); backward to the previous group's rank (or every rank for
// IB). Waking everyone is cheap only for small p, so wake exactly the consumers.
template <class Wake, class WakeAll>
void wake_consumers(const Schedule& s, int r, const Event& e, Wake& wake, WakeAll& wake_all) {
  const int g = e.group;
  if (e.kind == EventKind::Forward) {
    if (g + 1 < s.groups()) wake(s.rank_of_group(s.next_group(g, e.microbatch)));
    if (g + 1 == s.groups()) {
      if (s.vocab == VocabMode::None)
        wake(r);
      else
        wake_all();
    }
  } else {
    if (g > 0) wake(s.rank_of_group(s.previous_group(g, e.microbatch)));
    if (g == 0 && s.vocab != VocabMode::None) wake_all();
  }
}

}  // namespace detail

template <class Hooks>
void execute(const Schedule& s, Hooks& hooks) {
  const int p = s.stages;
  EventTimes events(s);
  std::vector<std::size_t> position(static_cast<std::size_t>(p), 0);
  std::vector<Event> blocked_on_barrier(static_cast<std::size_t>(p));
  std::vector<char> waiting(static_cast<std::size_t>(p), 0);  // Interlaced barrier wait
  std::vector<char> queued(static_cast<std::size_t>(p), 1);
  std::vector<int> worklist;
  worklist.reserve(static_cast<std::size_t>(p) * 2);
  for (int r = p - 1; r >= 0; --r) worklist.push_back(r);

  auto wake = [&](int r) {
    if (!queued[static_cast<std::size_t>(r)]) {
      queued[static_cast<std::size_t>(r)] = 1;
      worklist.push_back(r);
    }
  };
  auto wake_all = [&] {
    for (int r = 0; r < p; ++r) wake(r);
  };
  // What an op of rank r that finished at `done` produces: its event (waking the consumers), or
  // its arrival at a barrier.
  auto publish = [&](int r, const Op& op, double done) {
    const Production prod = production_of(s, r, op);
    if (!prod.present) return;
    if (!prod.joins_barrier) {
      events.set(prod.event, done);
      detail::wake_consumers(s, r, prod.event, wake, wake_all);
      return;
    }
    if (events.arrive(prod.event, done)) {
      events.set(prod.event, hooks.barrier(prod.event, events.last_arrival(prod.event)));
      wake_all();
    }
    if (prod.waits_for_barrier) {
      blocked_on_barrier[static_cast<std::size_t>(r)] = prod.event;
      waiting[static_cast<std::size_t>(r)] = 1;
    }
  };

  while (!worklist.empty()) {
    const int r = worklist.back();
    worklist.pop_back();
    queued[static_cast<std::size_t>(r)] = 0;
    const auto& ops = s.ranks[static_cast<std::size_t>(r)];
    std::size_t& pos = position[static_cast<std::size_t>(r)];
    while (true) {
      if (waiting[static_cast<std::size_t>(r)]) {
        const double t = events.time(blocked_on_barrier[static_cast<std::size_t>(r)]);
        if (t < 0.0) break;
        hooks.wait(r, t);
        waiting[static_cast<std::size_t>(r)] = 0;
      }
      if (pos >= ops.size()) break;
      const Op& op = ops[pos];
      const Requirement req = requirement_of(s, r, op);
      double req_time = 0.0;
      if (req.present) {
        req_time = events.time(req.event);
        if (req_time < 0.0) break;  // not yet produced: another rank will wake us
      }
      if (pos + 1 < ops.size() && ops[pos + 1].overlaps_previous) {
        // An overlapped pair starts once both inputs are there.
        const Op& second = ops[pos + 1];
        const Requirement second_req = requirement_of(s, r, second);
        double second_time = 0.0;
        if (second_req.present) {
          second_time = events.time(second_req.event);
          if (second_time < 0.0) break;
        }
        std::array<double, 2> done{};
        if constexpr (requires {
                        hooks.pair(r, pos, op, req, req_time, second, second_req, second_time);
                      }) {
          done = hooks.pair(r, pos, op, req, req_time, second, second_req, second_time);
        } else {
          done[0] = hooks.op(r, pos, op, req, req_time);
          done[1] = hooks.op(r, pos + 1, second, second_req, second_time);
        }
        pos += 2;
        publish(r, op, done[0]);
        publish(r, second, done[1]);
        continue;
      }
      const double done = hooks.op(r, pos, op, req, req_time);
      ++pos;
      publish(r, op, done);
    }
  }
  for (int r = 0; r < p; ++r) {
    if (position[static_cast<std::size_t>(r)] < s.ranks[static_cast<std::size_t>(r)].size() ||
        waiting[static_cast<std::size_t>(r)]) {
      throw DeadlockError(describe_deadlock(s, position, events));
    }
  }
}

}  // namespace pipetune::schedule
