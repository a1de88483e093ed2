// 1f1b with vocabulary parallelism (schedules.md b.1-b.4, b.6; Yeung et al., "Balancing Pipeline
// Parallelism with Vocabulary Parallelism"). The output layer and the input embedding are sharded
// over all p ranks, so every rank runs S, T, IF and IB for every micro-batch, joined by barriers
// (all-reduces over the pipeline group) that all ranks must issue in the same order.
//
// Transformer ops keep the 1F1B order with a longer warm-up, because the last stage's backward of
// micro-batch i now waits for the vocabulary barrier(s) of i rather than for its own forward:
//   vocab-2 (one barrier C1):              p - r warm-up forwards, stage 0 peaks at p + 1;
//   vocab-1 (C1 after S, C2 after T):      p - r + 1,              stage 0 peaks at p + 2;
//   interlaced (passes run synchronously): floor(3p/2) - r - 1,    stage 0 peaks at 1.5p.
//
// Vocabulary ops are placed by planning in simulated time with the per-stage costs: a rank runs
// the next vocabulary barrier op (S, T under vocab-1, IF) as soon as its input is there, at its
// next op boundary. S(i) becomes runnable on every rank when the last stage's F(i) is broadcast,
// so the S passes of a micro-batch land within one transformer op of each other and C1(i)
// completes while the last stage runs its next forward; the pipeline does not stall on it. The
// global barrier order is fixed up front: IF for the first k micro-batches, then per micro-batch
// S(i), [T(i) interlaced], IF(i + k), [T(i) vocab-1], with k = stage 0's warm-up + 2 so stage 0
// never waits for an input embedding. T under vocab-2 (no barrier) runs as soon as C1 is done;
// IB fills waits, but is brought forward when more than p of them are pending (each holds an
// embedding gradient).
//
// Interlaced: the passes block every rank (no overlap of the all-reduces), so ranks must reach
// each barrier at the same time. Besides the planned order we build the interlaced schedule's
// own lock-step order (VocabularyParallelism interlaced_schedule.py: 3p/2 - r warm-up forwards,
// a burst of p - r vocabulary passes, then one pass per 1F1B step) and keep whichever the
// planning costs say is faster; the lock-step order needs enough micro-batches to be valid.
#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/executor.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"
#include "engine/schedule/planned_time.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule::linear {

namespace {

constexpr std::string_view kName = "1f1b";

// The order in which every rank joins the vocabulary barriers (see the file comment).
std::vector<Op> barrier_sequence(VocabMode mode, int m, int if_lookahead) {
  std::vector<Op> seq;
  seq.reserve(3 * static_cast<std::size_t>(m));
  for (int i = 0; i < if_lookahead; ++i) seq.push_back({OpKind::IF, 0, i});
  for (int i = 0; i < m; ++i) {
    seq.push_back({OpKind::S, 0, i});
    if (mode == VocabMode::Interlaced) seq.push_back({OpKind::T, 0, i});
    if (i + if_lookahead < m) seq.push_back({OpKind::IF, 0, i + if_lookahead});
    if (mode == VocabMode::Vocab1) seq.push_back({OpKind::T, 0, i});
  }
  return seq;
}

// One planning step of the eager placement for a rank: of its next barrier op, IB when the
// backlog is over p, free T, transformer op and IB (in that preference), run the first whose input
// is there; else idle until the earliest known input, or block.
class EagerStep {
  static constexpr double kNoInput = std::numeric_limits<double>::infinity();

 public:
  EagerStep(Planner& planner, const std::vector<std::vector<Op>>& transformer,
            const std::vector<Op>& barriers, int p, int m, bool free_t)
      : planner_(planner),
        transformer_(transformer),
        barriers_(barriers),
        p_(p),
        m_(m),
        next_tr_(static_cast<std::size_t>(p), 0),
        next_bar_(static_cast<std::size_t>(p), 0),
        next_t_(static_cast<std::size_t>(p), free_t ? 0 : m),
        next_ib_(static_cast<std::size_t>(p), 0),
        needs_(static_cast<std::size_t>(p)) {
    for (std::size_t R = 0; R < needs_.size(); ++R)
      for (int slot = 0; slot < kSlots; ++slot) look_up(R, slot);
  }

  StepResult operator()(int r) {
    const double now = planner_.clock(r);
    const auto R = static_cast<std::size_t>(r);
    // The earliest known input of the candidates looked at; +infinity while none is known (a
    // plain double: an optional copied whole through memory stalls the store forwarding).
    double earliest = kNoInput;
    // The candidates in order of preference: the first ready now runs, and those after it need
    // not be looked at (their unknown inputs matter only to a step that ends blocked).
    const auto offer = [&](int slot) __attribute__((always_inline)) {
      const std::optional<double> ready = planner_.ready(r, needs_[R][slot]);
      if (ready && *ready <= now) {
        planner_.run(r, next_op(R, slot), *ready);
        advance(R, slot);
        return true;
      }
      if (ready && *ready < earliest) earliest = *ready;
      return false;
    };
    bool any = false;
    if (left(R, kBarrier)) {
      any = true;
      if (offer(kBarrier)) return StepResult::Progress;
    }
    if (left(R, kBacklog)) {
      // More than p embedding gradients waiting: run IB before transformer work.
      const auto backlog = planner_.ready(r, needs_[R][kBacklog]);
      if (backlog && *backlog <= now && offer(kInputBackward)) return StepResult::Progress;
    }
    if (left(R, kFreeT)) {
      any = true;
      if (offer(kFreeT)) return StepResult::Progress;
    }
    if (left(R, kTransformer)) {
      any = true;
      if (offer(kTransformer)) return StepResult::Progress;
    }
    if (left(R, kInputBackward)) {
      any = true;
      if (offer(kInputBackward)) return StepResult::Progress;
    }
    if (!any) return StepResult::Done;
    if (earliest != kNoInput) {
      planner_.idle_until(r, earliest);
      return StepResult::Progress;
    }
    return StepResult::Blocked;
  }

 private:
  // Where a rank's candidates come from. The backlog slot is the IB p micro-batches after the
  // next one: while its input is there, more than p embedding gradients are waiting.
  enum Slot { kBarrier, kFreeT, kTransformer, kInputBackward, kBacklog, kSlots };

  bool left(std::size_t R, int slot) const {
    switch (slot) {
      case kBarrier:
        return next_bar_[R] < barriers_.size();
      case kFreeT:
        return next_t_[R] < m_;
      case kTransformer:
        return next_tr_[R] < transformer_[R].size();
      case kInputBackward:
        return next_ib_[R] < m_;
      default:
        return next_ib_[R] + p_ < m_;
    }
  }
  Op next_op(std::size_t R, int slot) const {
    switch (slot) {
      case kBarrier:
        return barriers_[next_bar_[R]];
      case kFreeT:
        return {OpKind::T, 0, next_t_[R]};
      case kTransformer:
        return transformer_[R][next_tr_[R]];
      case kInputBackward:
        return {OpKind::IB, 0, next_ib_[R]};
      default:
        return {OpKind::IB, 0, next_ib_[R] + p_};
    }
  }
  // The slot's next op's need, worked out once per op (the steps offer it until it runs).
  void look_up(std::size_t R, int slot) {
    if (left(R, slot)) planner_.look_up(static_cast<int>(R), next_op(R, slot), needs_[R][slot]);
  }
  void advance(std::size_t R, int slot) {
    switch (slot) {
      case kBarrier:
        ++next_bar_[R];
        break;
      case kFreeT:
        ++next_t_[R];
        break;
      case kTransformer:
        ++next_tr_[R];
        break;
      default:
        ++next_ib_[R];
        look_up(R, kBacklog);
        break;
    }
    look_up(R, slot);
  }

  Planner& planner_;
  const std::vector<std::vector<Op>>& transformer_;
  const std::vector<Op>& barriers_;
  const int p_, m_;
  std::vector<std::size_t> next_tr_, next_bar_;
  std::vector<int> next_t_, next_ib_;
  std::vector<std::array<Planner::Need, kSlots>> needs_;
};

// Every rank's transformer ops: 1F1B with the mode's longer warm-up.
std::vector<std::vector<Op>> transformer_order(const GeneratorParams& params) {
  const int p = params.stages;
  const int m = params.microbatches;
  std::vector<std::vector<Op>> transformer(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& ops = transformer[static_cast<std::size_t>(r)];
    ops.reserve(2 * static_cast<std::size_t>(m));
    append_one_f_one_b(ops, m, one_f_one_b_warmup(params.vocab, p, r), OpKind::BW);
  }
  return transformer;
}

// The eager placement; `makespan` receives the planner's Planner::makespan(), +infinity where it
// gave up past `give_up_past` (plan_vocabulary_passes).
Schedule plan_eager(const GeneratorParams& params, const CostTable& costs,
                    std::optional<double>& makespan,
                    double give_up_past = std::numeric_limits<double>::infinity()) {
  const int p = params.stages;
  const int m = params.microbatches;
  const VocabMode mode = params.vocab;
  const std::vector<std::vector<Op>> transformer = transformer_order(params);
  const int stage0_warmup = std::clamp(one_f_one_b_warmup(mode, p, 0), 0, m);
  return plan_vocabulary_passes(kName, params, 1, transformer, std::min(m, stage0_warmup + 2),
                                costs, &makespan, give_up_past);
}

// The interlaced schedule's lock-step order (see the file comment), built for rank r.
// Flattened: its pushes, one per op, inline (a call each otherwise).
[[gnu::flatten]] std::vector<Op> lockstep_rank(int p, int m, int r) {
  const int warmup = std::min((3 * p) / 2 - r, m);
  const int warmup0 = std::min((3 * p) / 2, m);
  const int burst = std::min(p - r, m);  // vocabulary passes right after the warm-up
  const int burst0 = std::min(p, m);
  const int hold = std::max(0, warmup - burst - (p - r - 1) / 2);  // (B, pass) steps
  const int steady = m - warmup;
  const bool forward_first = (r % 2) == (p % 2);
  const bool stage0_forward_first = p % 2 == 0;
  std::vector<Op> ops;
  ops.reserve(6 * static_cast<std::size_t>(m));
  int next_if = 0, next_ib = 0;
  auto input_forward = [&] {
    if (next_if < m) ops.push_back({OpKind::IF, 0, next_if++});
  };
  auto input_backward = [&] {
    if (next_ib < m) ops.push_back({OpKind::IB, 0, next_ib++});
  };
  auto vocab_pass = [&](int i) {
    ops.push_back({OpKind::S, 0, i});
    ops.push_back({OpKind::T, 0, i});
  };
  // Input passes ride along with output pass x once stage 0 is in its steady state.
  auto input_passes_after = [&](int x) {
    if (x >= burst0 - 1) input_forward();
    if (x >= burst0 + 1 || (!stage0_forward_first && x == burst0)) input_backward();
  };
  for (int k = 0; k <= warmup0 - warmup; ++k) input_forward();
  for (int i = 0; i < warmup; ++i) {
    input_forward();
    ops.push_back({OpKind::F, 0, i});
  }
  for (int i = 0; i < burst; ++i) {
    vocab_pass(i);
    if (i >= burst0 - 1) input_forward();
  }
  for (int i = 0; i < hold; ++i) {
    ops.push_back({OpKind::BW, 0, i});
    vocab_pass(burst + i);
    input_passes_after(burst + i);
  }
  for (int i = 0; i < steady; ++i) {
    const Op f{OpKind::F, 0, warmup + i};
    const Op b{OpKind::BW, 0, hold + i};
    ops.push_back(forward_first ? f : b);
    ops.push_back(forward_first ? b : f);
    vocab_pass(burst + hold + i);
    input_passes_after(burst + hold + i);
  }
  for (int i = 0; i < warmup - burst - hold; ++i) {
    ops.push_back({OpKind::BW, 0, hold + steady + i});
    vocab_pass(burst + hold + steady + i);
    input_backward();
  }
  for (int i = 0; i < burst; ++i) {
    ops.push_back({OpKind::BW, 0, m - burst + i});
    input_backward();
  }
  while (next_ib < m) input_backward();
  return ops;
}

// The lock-step order and its estimated_makespan under `costs`; nullopt where it is not valid
// (too few micro-batches for the pattern). Timing it executes it, which throws DeadlockError on
// exactly the orders validate() would refuse for a deadlock: it need not be executed twice.
std::optional<std::pair<Schedule, double>> lockstep_interlaced(const GeneratorParams& params,
                                                               const CostTable& costs) {
  const int p = params.stages;
  const int m = params.microbatches;
  Schedule s = empty_schedule(kName, p, m, 1, VocabMode::Interlaced);
  for (int r = 0; r < p; ++r) s.ranks[static_cast<std::size_t>(r)] = lockstep_rank(p, m, r);
  EstimatedTime time;
  try {
    validate_structure(s);
    time = estimated_time(s, costs);
  } catch (const ScheduleError&) {
    return std::nullopt;
  }
  if (time.simulated) set_planned_time(s, costs, *time.simulated);
  return std::pair{std::move(s), time.makespan};
}

}  // namespace

bool vocabulary_passes_fit(const GeneratorParams& params, int chunks,
                           const std::vector<std::vector<Op>>& transformer, int if_lookahead) {
  const int p = params.stages;
  const int m = params.microbatches;
  const VocabMode mode = params.vocab;
  if (mode != VocabMode::Vocab1 && mode != VocabMode::Vocab2)
    fail("vocabulary passes", "whether they fit is decided for vocab-1 and vocab-2 only");
  // The shape the dependencies read (placement, groups, vocabulary mode); its lists stay empty.
  const Schedule s = empty_schedule("vocabulary passes", p, m, chunks, mode);
  const std::vector<Op> barriers = barrier_sequence(mode, m, if_lookahead);
  const auto P = static_cast<std::size_t>(p);
  std::vector<std::size_t> next_bar(P, 0), next_tr(P, 0);
  std::vector<int> next_t(P, mode == VocabMode::Vocab2 ? 0 : m), next_ib(P, 0);
  EventTimes events(s);  // 0 once produced, negative before
  std::vector<char> queued(P, 1);
  std::vector<int> work;
  work.reserve(2 * P);
  for (int r = p - 1; r >= 0; --r) work.push_back(r);
  const auto wake = [&](int r) {
    if (!queued[static_cast<std::size_t>(r)]) {
      queued[static_cast<std::size_t>(r)] = 1;
      work.push_back(r);
    }
  };
  const auto wake_all = [&] {
    for (int r = 0; r < p; ++r) wake(r);
  };
  // Runs op on rank r when its input is there; its product wakes the ranks that consume it.
  const auto try_run = [&](int r, const Op& op) {
    const Requirement req = requirement_of(s, r, op);
    if (req.present && events.time(req.event) < 0.0) return false;
    const Production prod = production_of(s, r, op);
    if (prod.present && !prod.joins_barrier) {
      events.set(prod.event, 0.0);
      detail::wake_consumers(s, r, prod.event, wake, wake_all);
    } else if (prod.present && events.arrive(prod.event, 0.0)) {
      events.set(prod.event, 0.0);
      wake_all();
    }
    return true;
  };
  while (!work.empty()) {
    const int r = work.back();
    work.pop_back();
    const auto R = static_cast<std::size_t>(r);
    queued[R] = 0;
    // Whatever the rank can run, from any of its sequences, until none can go on.
    for (bool ran = true; ran;) {
      ran = false;
      if (next_bar[R] < barriers.size() && try_run(r, barriers[next_bar[R]])) {
        ++next_bar[R];
        ran = true;
      }
      if (next_t[R] < m && try_run(r, {OpKind::T, 0, next_t[R]})) {
        ++next_t[R];
        ran = true;
      }
      if (next_tr[R] < transformer[R].size() && try_run(r, transformer[R][next_tr[R]])) {
        ++next_tr[R];
        ran = true;
      }
      if (next_ib[R] < m && try_run(r, {OpKind::IB, 0, next_ib[R]})) {
        ++next_ib[R];
        ran = true;
      }
    }
  }
  for (std::size_t R = 0; R < P; ++R)
    if (next_bar[R] < barriers.size() || next_t[R] < m || next_tr[R] < transformer[R].size() ||
        next_ib[R] < m)
      return false;
  return true;
}

Schedule plan_vocabulary_passes(std::string_view name, const GeneratorParams& params, int chunks,
                                const std::vector<std::vector<Op>>& transformer, int if_lookahead,
                                const CostTable& costs, std::optional<double>* makespan,
                                double give_up_past) {
  const int p = params.stages;
  const int m = params.microbatches;
  const VocabMode mode = params.vocab;
  Schedule s = empty_schedule(name, p, m, chunks, mode);
  for (int r = 0; r < p; ++r)
    s.ranks[static_cast<std::size_t>(r)].reserve(transformer[static_cast<std::size_t>(r)].size() +
                                                 4 * static_cast<std::size_t>(m));
  const std::vector<Op> barriers = barrier_sequence(mode, m, if_lookahead);
  const bool free_t = mode == VocabMode::Vocab2;  // T joins no barrier: place it freely
  Planner planner(s, costs);
  if (give_up_past < std::numeric_limits<double>::infinity()) {
    // What EagerStep runs on each rank: the barrier ops, free T, its transformer ops and IB.
    std::vector<double> left(static_cast<std::size_t>(p), 0.0);
    for (int r = 0; r < p; ++r) {
      double& l = left[static_cast<std::size_t>(r)];
      for (const Op& op : transformer[static_cast<std::size_t>(r)]) l += costs.cost(r, op.kind);
      for (const Op& op : barriers) l += costs.cost(r, op.kind);
      l += m * ((free_t ? costs.cost(r, OpKind::T) : 0.0) + costs.cost(r, OpKind::IB));
    }
    planner.give_up_past(give_up_past, std::move(left));
  }
  EagerStep step(planner, transformer, barriers, p, m, free_t);
  plan_in_time_order(name, planner, [&](int r) { return step(r); });
  if (const std::optional<double> simulated = planner.simulated_iteration();
      simulated && !planner.gave_up())
    set_planned_time(s, costs, *simulated);
  if (makespan != nullptr)
    *makespan = planner.gave_up() ? std::optional<double>(std::numeric_limits<double>::infinity())
                                  : planner.makespan();
  return s;
}

Schedule transformer_ops_of_1f1b_vocab(const GeneratorParams& params) {
  if (params.vocab != VocabMode::Vocab1 && params.vocab != VocabMode::Vocab2)
    fail(kName, {"plan.vocab"},
         "the transformer order alone is fixed under vocab-1 and vocab-2 only");
  Schedule s = empty_schedule(kName, params.stages, params.microbatches, 1, VocabMode::None);
  s.ranks = transformer_order(params);
  return s;
}

Schedule generate_1f1b_vocab(const GeneratorParams& params) {
  const CostTable costs = checked_planning_costs(kName, params);
  std::optional<double> eager_time;
  if (params.vocab != VocabMode::Interlaced)
    return validated(plan_eager(params, costs, eager_time), params);
  // Interlaced: the lock-step order first, so that planning the eager one stops once it cannot
  // be faster (the eager order is kept on a tie). The lock-step order's timing executed it after
  // its structural checks: it is validate()'s whole check already.
  std::optional<std::pair<Schedule, double>> lockstep = lockstep_interlaced(params, costs);
  Schedule eager =
      plan_eager(params, costs, eager_time,
                 lockstep ? lockstep->second : std::numeric_limits<double>::infinity());
  if (!eager_time) {
    const EstimatedTime t = estimated_time(eager, costs);
    eager_time = t.makespan;
    if (t.simulated) set_planned_time(eager, costs, *t.simulated);
  }
  if (lockstep && lockstep->second < *eager_time) return std::move(lockstep->first);
  return validated(std::move(eager), params);
}

}  // namespace pipetune::schedule::linear
