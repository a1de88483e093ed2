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
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {

namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

struct GreedyResult {
  Schedule schedule;
  double makespan = 0.0;
};

GreedyResult build(const GeneratorParams& params, const CostTable& costs, double limit,
                   bool fill_with_f_first) {
  const int p = params.stages;
  const int m = params.microbatches;
  const double comm = costs.p2p_time();
  const double wf = costs.w_free_fraction;
  const auto P = static_cast<std::size_t>(p);
  const auto M = static_cast<std::size_t>(m);

  std::vector<double> fwd_end(P * M, kUnknown), bwd_end(P * M, kUnknown);
  std::vector<double> t(P, 0.0), mem(P, 0.0);
  std::vector<int> next_f(P, 0), next_b(P, 0), next_w(P, 0);
  std::vector<std::vector<Op>> ops(P);
  for (auto& o : ops) o.reserve(3 * M);

  auto f_ready = [&](int r, int mb) {
    if (r == 0) return 0.0;
    const double e = fwd_end[static_cast<std::size_t>(r - 1) * M + static_cast<std::size_t>(mb)];
    return e == kUnknown ? kUnknown : e + comm;
  };
  auto b_ready = [&](int r, int mb) {
    if (r == p - 1) return fwd_end[static_cast<std::size_t>(r) * M + static_cast<std::size_t>(mb)];
    const double e = bwd_end[static_cast<std::size_t>(r + 1) * M + static_cast<std::size_t>(mb)];
    return e == kUnknown ? kUnknown : e + comm;
  };

  std::vector<char> blocked(P, 0);
  linear::EarliestRank earliest(p);
  auto refresh = [&](int i) {
    const auto ii = static_cast<std::size_t>(i);
    earliest.set(i, next_w[ii] == m || blocked[ii] ? linear::EarliestRank::kIneligible : t[ii]);
  };
  for (int i = 0; i < p; ++i) refresh(i);
  std::size_t remaining = 3 * P * M;
  while (remaining > 0) {
    // The stage that is free earliest decides next (time order keeps arrivals known).
    const int r = earliest.top();
    if (r < 0)
      throw ScheduleError("zb-h2: no stage can make progress with a memory limit of " +
                          std::to_string(limit) + " micro-batches");
    const auto R = static_cast<std::size_t>(r);
    const double now = t[R];
    const double f_cost = costs.cost(r, OpKind::F);
    const double b_cost = costs.cost(r, OpKind::B);
    const double w_cost = costs.cost(r, OpKind::W);

    const bool has_f = next_f[R] < m;
    const bool has_b = next_b[R] < next_f[R];
    const bool has_w = next_w[R] < next_b[R];
    const double fr = has_f ? f_ready(r, next_f[R]) : kUnknown;
    const double br = has_b ? b_ready(r, next_b[R]) : kUnknown;
    const bool f_fits = mem[R] + 1.0 <= limit + 1e-9;
    const bool can_b = br <= now;
    const bool can_f = fr <= now && f_fits;

    auto run = [&](OpKind k, int mb, double cost) {
      ops[R].push_back({k, 0, mb});
      t[R] = now + cost;
      --remaining;
    };
    if (can_b && !(fill_with_f_first && can_f && next_b[R] == 0)) {
      const int mb = next_b[R]++;
      run(OpKind::B, mb, b_cost);
      bwd_end[R * M + static_cast<std::size_t>(mb)] = t[R];
      mem[R] -= 1.0 - wf;
    } else if (can_f) {
      const int mb = next_f[R]++;
      run(OpKind::F, mb, f_cost);
      fwd_end[R * M + static_cast<std::size_t>(mb)] = t[R];
      mem[R] += 1.0;
    } else if (has_w) {
      run(OpKind::W, next_w[R]++, w_cost);
      mem[R] -= wf;
    } else {
      // Idle until the next input arrives. When its time is not known yet, the stage waits
      // (blocked) until some other stage schedules an op.
      const double wake = std::min(br, f_fits ? fr : kUnknown);
      if (wake == kUnknown) {
        blocked[R] = 1;
        refresh(r);
        continue;
      }
      t[R] = wake;
      refresh(r);
      continue;
    }
    refresh(r);
    // Only this stage's neighbours can have learnt an input time from its op (F feeds r + 1, B
    // feeds r - 1): unblocking just them leaves the schedule as a full rescan would, in O(1).
    if (r > 0 && blocked[R - 1]) {
      blocked[R - 1] = 0;
      refresh(r - 1);
    }
    if (r + 1 < p && blocked[R + 1]) {
      blocked[R + 1] = 0;
      refresh(r + 1);
    }
  }

  GreedyResult out;
  out.schedule.name = params.name;
  out.schedule.stages = p;
  out.schedule.microbatches = m;
  out.schedule.chunks = 1;
  out.schedule.placement = Placement::Linear;
  out.schedule.ranks = std::move(ops);
  out.makespan = *std::max_element(t.begin(), t.end());
  return out;
}

}  // namespace

Schedule generate_zb_h2(const GeneratorParams& params) {
  if (params.chunks > 1)
    throw ScheduleError({"plan.chunks", "plan.schedule"},
                        "zb-h2 supports chunks=1 only, got " + std::to_string(params.chunks));
  const CostTable costs = planning_costs(params);
  const double limit =
      params.memory_limit > 0.0 ? params.memory_limit : 2.0 * static_cast<double>(params.stages);
  if (limit < 1.0)
    throw ScheduleError("zb-h2: memory limit must hold at least one micro-batch, got " +
                        std::to_string(limit));
  GreedyResult best = build(params, costs, limit, false);
  GreedyResult other = build(params, costs, limit, true);
  if (other.makespan < best.makespan) best = std::move(other);
  validate(best.schedule);
  return std::move(best.schedule);
}

}  // namespace pipetune::schedule
