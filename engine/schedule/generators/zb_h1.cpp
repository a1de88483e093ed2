// zb-h1: the zero-bubble H1 schedule (schedules.md a.4/a.5; Qi et al., "Zero Bubble Pipeline
// Parallelism"). The backward is split into B (input gradient, on the critical path) and W
// (weight gradient, deferrable). F and B keep the 1F1B order of rank r (p - r - 1 warm-up
// forwards); W passes are placed in simulated time with the planning costs:
//  - a W runs when the rank would otherwise wait for the next F/B's input (it fills bubbles), and
//  - a W is forced before an F that would push the rank's activations past the 1F1B peak p
//    (an F adds one micro-batch, B frees 1 - w_free_fraction of it, W the rest).
// With w_free_fraction 1 this defers up to r W passes on rank r, as in the quick variant of a.5,
// and the pipeline's peak stays p micro-batches. The last B of each rank then arrives earlier and
// the deferred W passes fill the cool-down, so with T_F = T_B = T_W and m >= p the iteration is
// 3m + p - 1 (1F1B: 3(m + p - 1)): bubble (p - 1)(T_F + T_B - T_W), a third of 1F1B's.
// Two variants are planned (a W may overrun the wait, or must fit in it) and the one with the
// shorter estimated iteration is kept. Stage 0 feeds no backward, so where its W directly follows
// its B the pair is fused into one BW when the cost table says a fused backward is cheaper (as
// the quick variant never splits on stage 0).
#include <deque>
#include <limits>
#include <vector>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"
#include "engine/schedule/planned_time.hpp"

namespace pipetune::schedule {

namespace {

constexpr std::string_view kName = "zb-h1";

// Plans the F, B and W passes; `makespan` receives the plan's estimated_makespan, or +infinity
// where the plan gave up once it could not end before `give_up_past` (Planner::give_up_past).
Schedule plan(const GeneratorParams& params, const CostTable& costs, bool w_must_fit,
              double& makespan, double give_up_past = std::numeric_limits<double>::infinity()) {
  const int p = params.stages;
  const int m = params.microbatches;
  const auto P = static_cast<std::size_t>(p);
  Schedule s = linear::empty_schedule(kName, p, m, 1, VocabMode::None);
  std::vector<std::vector<Op>> order(P);
  for (int r = 0; r < p; ++r) {
    order[static_cast<std::size_t>(r)].reserve(2 * static_cast<std::size_t>(m));
    linear::append_one_f_one_b(order[static_cast<std::size_t>(r)], m, p - r - 1, OpKind::B);
    s.ranks[static_cast<std::size_t>(r)].reserve(3 * static_cast<std::size_t>(m));
  }
  const double wf = costs.w_free_fraction;
  const double limit = static_cast<double>(p) + 1e-9;
  std::vector<std::size_t> next(P, 0);
  std::vector<std::deque<int>> pending_w(P);
  std::vector<double> memory(P, 0.0);

  linear::Planner planner(s, costs);
  planner.give_up_past(give_up_past, linear::split_backward_work(costs, p, m));
  // What each rank's next F or B waits for, worked out once per op: a rank that idles or runs
  // W passes asks again for the same op.
  std::vector<linear::Planner::Need> need(P);
  const auto look_up = [&](std::size_t R) {
    if (next[R] < order[R].size()) planner.look_up(static_cast<int>(R), order[R][next[R]], need[R]);
  };
  for (std::size_t R = 0; R < P; ++R) look_up(R);
  linear::plan_in_time_order(kName, planner, [&](int r) {
    const auto R = static_cast<std::size_t>(r);
    auto run_w = [&] {
      const int mb = pending_w[R].front();
      pending_w[R].pop_front();
      planner.run(r, {OpKind::W, 0, mb});
      memory[R] -= wf;
      return linear::StepResult::Progress;
    };
    if (next[R] == order[R].size()) {
      if (pending_w[R].empty()) return linear::StepResult::Done;
      return run_w();
    }
    const Op op = order[R][next[R]];
    if (op.kind == OpKind::F && !pending_w[R].empty() && memory[R] + 1.0 > limit) return run_w();
    const auto ready = planner.ready(r, need[R]);
    const double now = planner.clock(r);
    if (ready && *ready <= now) {
      planner.run(r, op, *ready);
      ++next[R];
      look_up(R);
      if (op.kind == OpKind::F) {
        memory[R] += 1.0;
      } else {
        memory[R] -= 1.0 - wf;
        pending_w[R].push_back(op.microbatch);
      }
      return linear::StepResult::Progress;
    }
    if (!pending_w[R].empty() &&
        (!w_must_fit || !ready || now + planner.cost(r, OpKind::W) <= *ready))
      return run_w();
    if (ready) {
      planner.idle_until(r, *ready);
      return linear::StepResult::Progress;
    }
    return linear::StepResult::Blocked;
  });
  if (planner.gave_up()) {
    makespan = std::numeric_limits<double>::infinity();
    return s;
  }
  const std::optional<double> planned = planner.makespan();
  makespan = planned ? *planned : linear::estimated_makespan(s, costs);
  return s;
}

// Stage 0: B(i) immediately followed by W(i) becomes BW(i). Nothing waits for stage 0's input
// gradient, so this only changes its own time.
void fuse_first_stage(Schedule& s) {
  auto& ops = s.ranks[0];
  std::vector<Op> fused;
  fused.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::B && i + 1 < ops.size() &&
        ops[i + 1] == Op{OpKind::W, ops[i].chunk, ops[i].microbatch}) {
      fused.push_back({OpKind::BW, ops[i].chunk, ops[i].microbatch});
      ++i;
      continue;
    }
    fused.push_back(ops[i]);
  }
  ops = std::move(fused);
}

}  // namespace

Schedule generate_zb_h1(const GeneratorParams& params) {
  linear::check_sizes(kName, params);
  linear::require_single_chunk(kName, params);
  linear::require_no_vocab(kName, params);
  const CostTable costs = linear::checked_planning_costs(kName, params);
  // The variant whose W must fit its wait wins more often: planned first, the other stops once
  // it cannot be faster (it is kept on a tie).
  double best_time = 0.0, t = 0.0;
  Schedule fit = plan(params, costs, true, t);
  Schedule best = plan(params, costs, false, best_time, t);
  if (t < best_time) {
    best = std::move(fit);
    best_time = t;
  }
  if (costs.cost(0, OpKind::BW) < costs.cost(0, OpKind::B) + costs.cost(0, OpKind::W)) {
    Schedule fused = best;
    fuse_first_stage(fused);
    const double fused_time = linear::estimated_makespan(fused, costs);
    if (fused_time < best_time) {
      best = std::move(fused);
      best_time = fused_time;
    }
  }
  // Without barriers the estimated time is the simulator's (linear::estimated_time).
  set_planned_time(best, costs, best_time);
  return linear::validated(std::move(best), params);
}

}  // namespace pipetune::schedule
