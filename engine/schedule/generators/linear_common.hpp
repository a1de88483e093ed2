// Private helpers of the linear-placement generators (gpipe, 1f1b and its vocabulary variants,
// interleaved-1f1b, zb-h1): parameter checks, the 1F1B op order, a timed estimate of a
// schedule's iteration, and a planner that builds op lists in simulated time so the cost-aware
// generators can put ops where they fit instead of assuming uniform costs.
#pragma once

#include <array>
#include <bit>
#include <limits>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/executor.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule::linear {

// Throws ScheduleError "<generator>: <rule>".
[[noreturn]] void fail(std::string_view generator, const std::string& rule);
// The same about the plan's fields (errors.hpp: "plan.microbatches"), and its schedule.
[[noreturn]] void fail(std::string_view generator, std::vector<std::string> fields,
                       const std::string& rule);

// Positive stages and micro-batches (generate() checks them too; the generators are also called
// directly by tests and tools).
void check_sizes(std::string_view generator, const GeneratorParams& params);
// chunks must be 0 (default) or 1: "gpipe supports chunks=1 only".
void require_single_chunk(std::string_view generator, const GeneratorParams& params);
// Vocabulary parallelism is implemented on 1f1b and interleaved-1f1b (and v-half elsewhere)
// only.
void require_no_vocab(std::string_view generator, const GeneratorParams& params);
// The cost table the generator plans with (unit costs when params.costs is empty), checked to
// cover every stage.
CostTable checked_planning_costs(std::string_view generator, const GeneratorParams& params);

// A linear-placement schedule with empty op lists.
Schedule empty_schedule(std::string_view name, int stages, int microbatches, int chunks,
                        VocabMode vocab);

// The 1F1B order of one rank (PipeDream-flush, Megatron's non-interleaved loop): `warmup`
// forwards, then (F, backward) pairs, then the remaining backwards. warmup is clamped to
// [0, microbatches].
void append_one_f_one_b(std::vector<Op>& ops, int microbatches, int warmup, OpKind backward);

// Forwards rank r of a p-stage 1f1b runs before its first backward (not clamped to m): p - r - 1;
// with vocabulary parallelism longer, as the last stage's backward waits for the vocabulary
// barrier(s): vocab-2 p - r, vocab-1 p - r + 1, interlaced floor(3p/2) - r - 1.
int one_f_one_b_warmup(VocabMode mode, int p, int r);

// Validates (validate_generated) and returns the schedule (every generator's last step).
Schedule validated(Schedule s, const GeneratorParams& params);

// Iteration time of a schedule under the planning costs: each rank runs its list in order, an op
// starts when the rank is free and its requirement is done (plus one p2p transfer across ranks),
// a barrier completes collective_time after its last arrival. This is a deliberately small model
// (no link contention, no comm streams) used only to choose between candidate orders; the
// simulator in tuner/sim is the reference for reported times.
double estimated_makespan(const Schedule& s, const CostTable& costs);
// The same, and where the simulator's model reduces to this one for the schedule (no barrier
// waited for the one before it on the communication stream: each started at its last arrival),
// the iteration the simulator finds without offload, failures or per-pair transfers: the end of
// the last op or barrier (PlannedTime::iteration).
struct EstimatedTime {
  double makespan = 0.0;
  std::optional<double> simulated;
};
// The barriers' ends as the planner and the estimate time them: each at its last arrival plus
// the collective. They complete in the one order every rank joins them; where a last arrival
// comes before the previous barrier's end, the simulator's communication stream would start it
// later, and the two models part.
struct BarrierEnds {
  double last_end = 0.0;
  bool parted = false;
  double complete(double last_arrival, double collective) {
    if (last_arrival < last_end) parted = true;
    last_end = last_arrival + collective;
    return last_end;
  }
  // The simulator's iteration for an order whose ops end by `op_end` as timed, where it is this.
  std::optional<double> simulated(double op_end) const {
    if (parted) return std::nullopt;
    return std::max(op_end, last_end);
  }
};
EstimatedTime estimated_time(const Schedule& s, const CostTable& costs);

// Builds op lists in simulated time. A generator's step function looks at one rank at its current
// clock, asks when candidate ops could start, and either runs one, idles until a known time, or
// reports that it is blocked on something not planned yet. plan_in_time_order() always advances
// the rank with the earliest clock, so "not produced yet" means "not before this clock", and
// since an op is only run once its requirement has been produced, the resulting order cannot
// deadlock.
class Planner {
 public:
  Planner(Schedule& s, const CostTable& costs);

  int stages() const { return schedule_.stages; }
  double clock(int rank) const { return clock_[static_cast<std::size_t>(rank)]; }
  // Once every rank is done: estimated_makespan() of the planned schedule, exactly, when every op
  // started where executing the lists starts it, at max(the end of its rank's op before, its
  // input's time); nullopt when one did not (a step that ran an op at a clock its rank had
  // idled to, past both). zb-h1's and the vocabulary passes' steps run an op after idling only
  // at its input's time, so they need not execute what they planned to time it.
  std::optional<double> makespan() const;
  // Once every rank is done: estimated_time(...).simulated of the planned schedule, exactly,
  // where makespan() is known; nullopt otherwise.
  std::optional<double> simulated_iteration() const;
  double cost(int rank, OpKind kind) const { return costs_.cost(rank, kind); }

  // What an op waits for, looked up once: a step offers the same candidates again and again
  // until one runs, and ready() reads the event's time without working the requirement out.
  struct Need {
    double* time = nullptr;  // the event's time slot; null when the op waits for nothing
    double transfer = 0.0;   // added to that time: one p2p when it comes from another rank
    bool watched = false;    // the rank watches the event already: asking again adds no watch
  };
  // The op's need, written into `out` field by field: a step's slots are rewritten for every op,
  // and a whole Need copied in is read back wider than it was written (a stalled store forward).
  void look_up(int rank, const Op& op, Need& out) {
    const Requirement req = requirement_of(schedule_, rank, op);
    out.watched = false;
    if (!req.present) {
      out.time = nullptr;
      out.transfer = 0.0;
      return;
    }
    out.time = events_.slot(req.event);
    // t + 0.0 is t for every time the slot can hold (>= 0): no transfer adds nothing, exactly.
    out.transfer = req.transfer ? p2p_ : 0.0;
  }
  // When an op with that need could start on rank; nullopt while its event has not been planned
  // yet (the rank then watches it, once per need).
  std::optional<double> ready(int rank, Need& need) {
    if (need.time == nullptr) return 0.0;
    const double t = *need.time;
    if (t < 0.0) {
      if (!need.watched) watch(rank, *need.time);
      need.watched = true;
      return std::nullopt;
    }
    return t + need.transfer;
  }
  // When op could start on rank (its requirement's completion plus a transfer when it comes
  // from another rank); nullopt while the requirement has not been planned yet.
  std::optional<double> ready_time(int rank, const Op& op) {
    Need n;
    look_up(rank, op, n);
    return ready(rank, n);
  }
  // Appends op to the rank's list, starting at max(clock, ready_time); ready_time must be known.
  void run(int rank, const Op& op) { run(rank, op, ready_time(rank, op).value()); }
  // The same, given the ready_time the step just asked for.
  void run(int rank, const Op& op, double ready);
  // Nothing to do before t: the rank idles, but is woken earlier when an event its step found
  // unknown is produced before t (it may be what the rank needs). The step must therefore decide
  // on what it asked (ready(), leave_barrier()) and its own state only, as a blocked step does:
  // another production cannot change what it does at an earlier clock.
  void idle_until(int rank, double t);

  // Planning one of several orders to keep the fastest: stop (gave_up(), and plan_in_time_order
  // returns) once this one cannot end before `time`, that is when some rank's last op ends so
  // late that the ops it has left, run back to back, would end past it. `left`: each rank's
  // costs of every op it will run. Only for steps that keep makespan() known (run an op after
  // idling only at its input's time): then the planned iteration is at least that late too.
  void give_up_past(double time, std::vector<double> left);
  bool gave_up() const { return gave_up_; }

  // Interlaced vocabulary passes: after joining a barrier the rank waits for it to complete.
  bool in_barrier(int rank) const { return in_barrier_[static_cast<std::size_t>(rank)] != 0; }
  // Leaves the barrier when it is complete (clock moves to its completion); false otherwise.
  bool leave_barrier(int rank);

  // Blocked and idling ranks: a step that ends Blocked or idles depends only on events it found
  // unknown through ready_time() / leave_barrier() (its "watches"), so it is looked at again only
  // when one of those is produced. Each event keeps the ranks that watch it: a production reaches
  // those alone, not every waiting rank. A watch stays until its event is produced: one from an
  // earlier step wakes a rank whose latest step did not ask, which only makes it step again to
  // the same decision (nothing it asked has changed).
  // Ranks whose clock a production moved back (idling ranks), since clear_rewound().
  const std::vector<int>& rewound() const { return rewound_; }
  void clear_rewound() { rewound_.clear(); }
  // Ranks a production of an event they watch reached (a blocked rank may go on), since
  // clear_woken(); a rank may appear more than once.
  const std::vector<int>& woken() const { return woken_; }
  void clear_woken() { woken_.clear(); }

 private:
  // One rank watching one event, in that event's list (linked by index; -1 ends it).
  struct Watch {
    int rank = 0;
    int next = -1;
  };
  // An event not planned yet keeps its list in its own time slot, which holds -1 while nobody
  // watches and -(2 + the first watch) after: producing the event reads the slot it writes,
  // and a look-up finds the slot alone.
  static int first_watch(double slot) { return slot < -1.5 ? static_cast<int>(-slot - 2.0) : -1; }
  // Sets the event's slot to `time` and wakes its watches.
  void produced(double& slot, double time);
  void watch(int rank, double& slot);

  Schedule& schedule_;
  const CostTable& costs_;
  EventTimes events_;
  double p2p_ = 0.0;
  std::vector<double> clock_;
  std::vector<double> op_end_;  // the end of the rank's last op (or barrier wait)
  bool as_executed_ = true;     // every op started where execute() starts it
  BarrierEnds barriers_;
  std::vector<double> idle_since_;  // negative when the rank is not idling
  std::vector<Event> barrier_of_;
  std::vector<char> in_barrier_;
  std::vector<int> rewound_;  // since clear_rewound()
  std::vector<int> woken_;    // since clear_woken()
  // give_up_past: its time (+infinity: never) and each rank's costs still to run.
  double give_up_time_ = std::numeric_limits<double>::infinity();
  std::vector<double> left_;
  bool gave_up_ = false;
  // The watches (first_watch), with a free list of those whose event was produced.
  std::vector<Watch> watches_;
  int free_watch_ = -1;
};

// Giving up on a candidate order (Planner::give_up_past, zb-h2's greedy): whether an order
// whose last op cannot end before `end` surely ends past `time`. `end` is a rank's op end plus a
// running difference of its costs still to run; the margin covers that difference's rounding.
inline bool surely_past(double end, double time) {
  return end > time * (1.0 + 1e-9);
}
// Each rank's costs of m F, B and W passes: what every rank of zb-h1 and zb-h2 runs.
std::vector<double> split_backward_work(const CostTable& costs, int stages, int microbatches);

// zb-h2's activation budget in micro-batches (params.memory_limit, else 2p), and whether a
// stage holding `held` stays within it: the greedy's rule, and its first stage's bound's
// (least_peak_in_flight).
double zb_h2_memory_limit(const GeneratorParams& params);
inline bool within_zb_h2_budget(double held, double limit) {
  return held <= limit + 1e-9;
}

enum class StepResult { Progress, Blocked, Done };

// The eligible rank with the earliest clock (ties: the lowest rank) in O(1), updates in
// O(log ranks): a tournament tree over the ranks' clocks, +infinity for ineligible ranks.
class EarliestRank {
 public:
  static constexpr double kIneligible = std::numeric_limits<double>::infinity();
  explicit EarliestRank(int ranks);
  void set(int rank, double clock);  // kIneligible removes the rank; clock >= 0
  int top() const {
    return node_[1] >> 32 == std::bit_cast<std::uint64_t>(kIneligible)
               ? -1
               : static_cast<int>(static_cast<std::uint32_t>(node_[1]));
  }

 private:
  // A (clock, rank) pair as one integer that orders as the pairs do: the bits of a clock >= 0
  // (or +infinity) order as the clocks, above the rank. One integer comparison picks a winner
  // without a branch (which side wins is data, not a pattern).
  using Node = unsigned __int128;
  static Node node(double clock, int rank) {
    // + 0.0 turns a -0.0 (whose bits would order above every clock) into 0.0.
    return static_cast<Node>(std::bit_cast<std::uint64_t>(clock + 0.0)) << 32 |
           static_cast<std::uint32_t>(rank);
  }
  std::size_t leaves_ = 1;
  std::vector<Node> node_;
};

// Runs step(rank) for the rank with the earliest clock until every rank reports Done. A Blocked
// rank is retried after the next production. Throws ScheduleError naming the generator when every
// remaining rank is blocked (a bug in its step function, not a user error).
template <class Step>
void plan_in_time_order(std::string_view generator, Planner& planner, Step&& step) {
  const int p = planner.stages();
  std::vector<char> blocked(static_cast<std::size_t>(p), 0), done(static_cast<std::size_t>(p), 0);
  EarliestRank earliest(p);
  for (int i = 0; i < p; ++i) earliest.set(i, planner.clock(i));
  auto refresh = [&](int i) {
    const auto ii = static_cast<std::size_t>(i);
    earliest.set(i, done[ii] || blocked[ii] ? EarliestRank::kIneligible : planner.clock(i));
  };
  while (!planner.gave_up()) {
    const int r = earliest.top();
    if (r < 0) {
      for (int i = 0; i < p; ++i)
        if (!done[static_cast<std::size_t>(i)])
          fail(generator, "internal planner stalled with rank " + std::to_string(i) +
                              " blocked (please report this schedule's parameters)");
      return;
    }
    const auto rr = static_cast<std::size_t>(r);
    if (planner.in_barrier(r)) {
      if (!planner.leave_barrier(r)) blocked[rr] = 1;
    } else {
      const StepResult res = step(r);
      if (res == StepResult::Blocked) blocked[rr] = 1;
      if (res == StepResult::Done) done[rr] = 1;
    }
    refresh(r);
    for (int i : planner.rewound()) refresh(i);
    planner.clear_rewound();
    // A blocked rank goes on once an event it watches is produced.
    for (int i : planner.woken()) {
      if (!blocked[static_cast<std::size_t>(i)]) continue;
      blocked[static_cast<std::size_t>(i)] = 0;
      refresh(i);
    }
    planner.clear_woken();
  }
}

// 1f1b with vocabulary parallelism (one_f_one_b_vocab.cpp).
Schedule generate_1f1b_vocab(const GeneratorParams& params);
// Its transformer ops alone (vocab-1, vocab-2), as a schedule without vocabulary parallelism.
Schedule transformer_ops_of_1f1b_vocab(const GeneratorParams& params);

// Whether plan_vocabulary_passes places every pass around these transformer lists (vocab-1 or
// vocab-2) rather than stalling, worked out without time: each rank takes the next op of one of
// its sequences (barriers, T, transformer ops, IB) whose input is there, and running an op only
// ever makes more ops runnable, so what can run at all depends neither on the costs nor on which
// ran first. A closure of what can run decides it, for a fraction of a planning.
bool vocabulary_passes_fit(const GeneratorParams& params, int chunks,
                           const std::vector<std::vector<Op>>& transformer, int if_lookahead);

// Vocabulary passes (params.vocab: vocab-1 or vocab-2) placed around fixed transformer op lists,
// one per rank, by the eager planner of one_f_one_b_vocab.cpp: every rank joins the barriers in
// one order, the input embeddings of the first `if_lookahead` micro-batches first. `makespan`
// (when given) receives the planner's Planner::makespan(). With `give_up_past` finite, the planner
// stops once the order cannot end before it (Planner::give_up_past): `makespan` then receives
// +infinity and the schedule is unfinished. Throws ScheduleError when the planner stalls (the
// transformer order needs an input embedding the barrier order has not reached).
Schedule plan_vocabulary_passes(std::string_view name, const GeneratorParams& params, int chunks,
                                const std::vector<std::vector<Op>>& transformer, int if_lookahead,
                                const CostTable& costs, std::optional<double>* makespan = nullptr,
                                double give_up_past = std::numeric_limits<double>::infinity());

}  // namespace pipetune::schedule::linear
