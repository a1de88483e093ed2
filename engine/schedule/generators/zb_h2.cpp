// zb-h2: memory-bounded greedy zero-bubble schedule (after the zero-bubble repo's ZB2P greedy,
// schedules.md a.6). Each stage runs a time-stepped list scheduler with the real per-stage costs:
// when it becomes free it runs, in order of preference, the next B whose gradient has arrived,
// the next F whose input has arrived if the activation budget allows it, or a pending W to fill
// the wait. The budget defaults to 2p micro-batches (ZB-H2's memory); a budget of p gives a
// ZB-H1-like schedule. Two variants (prefer B over F, or F over B while warming up) are built and
// the one with the shorter simulated iteration is kept.
#include <algorithm>
#include <limits>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"
#include "engine/schedule/planned_time.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {

namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

struct GreedyResult {
  Schedule schedule;
  double makespan = 0.0;
  // Every op started where executing the lists starts it (at the latest of its stage's op
  // before and its input): makespan is then the simulator's iteration too.
  bool as_executed = true;
};

// One greedy list-scheduling run: per stage its clock, its activations held (in micro-batches)
// and its next F, B and W; per (stage, micro-batch) when its F and B end (kUnknown until
// scheduled). A stage whose next input's time is not known yet is blocked until a neighbour
// schedules an op.
class GreedyScheduler {
 public:
  // give_up_past: stop once this variant cannot end before it (GreedyResult::gave_up).
  GreedyScheduler(const GeneratorParams& params, const CostTable& costs, double limit,
                  bool fill_with_f_first, double give_up_past)
      : params_(params),
        costs_(costs),
        limit_(limit),
        fill_with_f_first_(fill_with_f_first),
        p_(params.stages),
        m_(params.microbatches),
        comm_(costs.p2p_time()),
        wf_(costs.w_free_fraction),
        P_(static_cast<std::size_t>(p_)),
        M_(static_cast<std::size_t>(m_)),
        fwd_end_(P_ * M_, kUnknown),
        bwd_end_(P_ * M_, kUnknown),
        t_(P_, 0.0),
        op_end_(P_, 0.0),
        mem_(P_, 0.0),
        next_f_(P_, 0),
        next_b_(P_, 0),
        next_w_(P_, 0),
        ops_(P_),
        blocked_(P_, 0),
        earliest_(p_),
        remaining_(3 * P_ * M_),
        give_up_past_(give_up_past) {
    for (auto& o : ops_) o.reserve(3 * M_);
    if (give_up_past < std::numeric_limits<double>::infinity())
      left_ = linear::split_backward_work(costs, p_, m_);
  }

  GreedyResult run() {
    for (int i = 0; i < p_; ++i) refresh(i);
    while (remaining_ > 0 && !gave_up_) {
      // The stage that is free earliest decides next (time order keeps arrivals known).
      const int r = earliest_.top();
      if (r < 0)
        throw ScheduleError("zb-h2: no stage can make progress with a memory limit of " +
                            std::to_string(limit_) + " micro-batches");
      if (!step(r)) continue;
      refresh(r);
      unblock_neighbours(r);
    }
    GreedyResult out;
    if (gave_up_) {
      out.makespan = std::numeric_limits<double>::infinity();
      return out;
    }
    out.schedule.name = params_.name;
    out.schedule.stages = p_;
    out.schedule.microbatches = m_;
    out.schedule.chunks = 1;
    out.schedule.placement = Placement::Linear;
    out.schedule.ranks = std::move(ops_);
    out.makespan = *std::max_element(t_.begin(), t_.end());
    out.as_executed = as_executed_;
    return out;
  }

 private:
  std::size_t at(int r, int mb) const {
    return static_cast<std::size_t>(r) * M_ + static_cast<std::size_t>(mb);
  }
  // When stage r's F (B) of micro-batch mb can start: its input's arrival.
  double f_ready(int r, int mb) const {
    if (r == 0) return 0.0;
    const double e = fwd_end_[at(r - 1, mb)];
    return e == kUnknown ? kUnknown : e + comm_;
  }
  double b_ready(int r, int mb) const {
    if (r == p_ - 1) return fwd_end_[at(r, mb)];
    const double e = bwd_end_[at(r + 1, mb)];
    return e == kUnknown ? kUnknown : e + comm_;
  }

  void refresh(int i) {
    const auto ii = static_cast<std::size_t>(i);
    earliest_.set(i,
                  next_w_[ii] == m_ || blocked_[ii] ? linear::EarliestRank::kIneligible : t_[ii]);
  }

  // Stage r, free now, runs the next B whose gradient has arrived, else the next F whose input
  // has arrived if the budget allows, else a pending W; else it idles until its next input
  // arrives (or blocks). Returns whether it ran an op.
  bool step(int r) {
    const auto R = static_cast<std::size_t>(r);
    const double now = t_[R];
    const bool has_f = next_f_[R] < m_;
    const bool has_b = next_b_[R] < next_f_[R];
    const bool has_w = next_w_[R] < next_b_[R];
    const double fr = has_f ? f_ready(r, next_f_[R]) : kUnknown;
    const double br = has_b ? b_ready(r, next_b_[R]) : kUnknown;
    const bool f_fits = linear::within_zb_h2_budget(mem_[R] + 1.0, limit_);
    const bool can_b = br <= now;
    const bool can_f = fr <= now && f_fits;

    // `ready`: the op's input's time (a W's, its own B, has ended before now).
    auto run_op = [&](OpKind k, int mb, double ready) __attribute__((always_inline)) {
      ops_[R].push_back({k, 0, mb});
      if (now != std::max(op_end_[R], ready)) as_executed_ = false;
      t_[R] = now + costs_.cost(r, k);
      op_end_[R] = t_[R];
      --remaining_;
      // Its stage's passes still to come run one after another from this one's end at best.
      if (!left_.empty()) {
        left_[R] -= costs_.cost(r, k);
        if (linear::surely_past(t_[R] + left_[R], give_up_past_)) gave_up_ = true;
      }
    };
    if (can_b && !(fill_with_f_first_ && can_f && next_b_[R] == 0)) {
      const int mb = next_b_[R]++;
      run_op(OpKind::B, mb, br);
      bwd_end_[at(r, mb)] = t_[R];
      mem_[R] -= 1.0 - wf_;
    } else if (can_f) {
      const int mb = next_f_[R]++;
      run_op(OpKind::F, mb, fr);
      fwd_end_[at(r, mb)] = t_[R];
      mem_[R] += 1.0;
    } else if (has_w) {
      run_op(OpKind::W, next_w_[R]++, 0.0);
      mem_[R] -= wf_;
    } else {
      // Idle until the next input arrives. When its time is not known yet, the stage waits
      // (blocked) until some other stage schedules an op.
      const double wake = std::min(br, f_fits ? fr : kUnknown);
      if (wake == kUnknown)
        blocked_[R] = 1;
      else
        t_[R] = wake;
      refresh(r);
      return false;
    }
    return true;
  }

  // Only stage r's neighbours can have learnt an input time from its op (F feeds r + 1, B
  // feeds r - 1): unblocking just them leaves the schedule as a full rescan would, in O(1).
  void unblock_neighbours(int r) {
    const auto R = static_cast<std::size_t>(r);
    if (r > 0 && blocked_[R - 1]) {
      blocked_[R - 1] = 0;
      refresh(r - 1);
    }
    if (r + 1 < p_ && blocked_[R + 1]) {
      blocked_[R + 1] = 0;
      refresh(r + 1);
    }
  }

  const GeneratorParams& params_;
  const CostTable& costs_;
  const double limit_;
  const bool fill_with_f_first_;
  const int p_, m_;
  const double comm_, wf_;
  const std::size_t P_, M_;
  std::vector<double> fwd_end_, bwd_end_;
  std::vector<double> t_, op_end_, mem_;  // op_end_: the end of the stage's last op
  std::vector<int> next_f_, next_b_, next_w_;
  std::vector<std::vector<Op>> ops_;
  std::vector<char> blocked_;
  linear::EarliestRank earliest_;
  std::size_t remaining_;
  const double give_up_past_;
  std::vector<double> left_;  // per stage, the costs of its passes still to run (give_up_past)
  bool gave_up_ = false;
  bool as_executed_ = true;
};

// One variant; makespan +infinity (and no schedule) where it gave up past `give_up_past`.
GreedyResult build(const GeneratorParams& params, const CostTable& costs, double limit,
                   bool fill_with_f_first,
                   double give_up_past = std::numeric_limits<double>::infinity()) {
  return GreedyScheduler(params, costs, limit, fill_with_f_first, give_up_past).run();
}

}  // namespace

double linear::zb_h2_memory_limit(const GeneratorParams& params) {
  return params.memory_limit > 0.0 ? params.memory_limit : 2.0 * static_cast<double>(params.stages);
}

Schedule generate_zb_h2(const GeneratorParams& params) {
  if (params.chunks > 1)
    throw ScheduleError({"plan.chunks", "plan.schedule"},
                        "zb-h2 supports chunks=1 only, got " + std::to_string(params.chunks));
  const CostTable costs = planning_costs(params);
  const double limit = linear::zb_h2_memory_limit(params);
  if (limit < 1.0)
    throw ScheduleError("zb-h2: memory limit must hold at least one micro-batch, got " +
                        std::to_string(limit));
  // The second variant stops once it cannot be faster (the first is kept on a tie).
  GreedyResult best = build(params, costs, limit, false);
  GreedyResult other = build(params, costs, limit, true, best.makespan);
  if (other.makespan < best.makespan) best = std::move(other);
  if (best.as_executed) set_planned_time(best.schedule, costs, best.makespan);
  validate_generated(best.schedule, params);
  return std::move(best.schedule);
}

}  // namespace pipetune::schedule
