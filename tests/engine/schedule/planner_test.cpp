// The planner behind the cost-aware linear generators (generators/linear_common.hpp): the time it
// says a planned schedule takes (Planner::makespan, which zb-h1 and 1f1b's interlaced passes
// choose between their candidate orders by, giving up on one past the other's time) against
// executing the planned op lists with the same costs (estimated_makespan), over random per-stage
// costs, transfers and barriers, with idling, rewound, blocked and barrier-waiting ranks; and the
// rank they advance next (EarliestRank) against a scan for the first least clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators/linear_common.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule::linear {
namespace {

// Per-stage costs drawn at random (each kind its own, stages unlike each other), with a transfer
// and a barrier collective that may be zero.
CostTable random_costs(std::mt19937_64& rng, int p) {
  std::uniform_real_distribution<double> u(0.05, 2.0);
  CostTable t;
  t.stages.resize(static_cast<std::size_t>(p));
  for (StageCosts& st : t.stages)
    for (OpKind k : {OpKind::F, OpKind::B, OpKind::W, OpKind::S, OpKind::T, OpKind::IF, OpKind::IB})
      st[k] = u(rng) * (is_vocab_op(k) ? 0.2 : 1.0);
  for (StageCosts& st : t.stages) st[OpKind::BW] = st[OpKind::B] + st[OpKind::W];
  t.p2p_latency = rng() % 3 == 0 ? 0.0 : 0.02 * u(rng);
  t.collective_time = rng() % 4 == 0 ? 0.0 : 0.05 * u(rng);
  return t;
}

std::string shape(int p, int m, VocabMode mode) {
  return "p=" + std::to_string(p) + " m=" + std::to_string(m) + " " +
         std::string(vocab_mode_name(mode));
}

TEST(Planner, PlannedVocabularyPassesTakeWhatExecutingThemTakes) {
  std::mt19937_64 rng(7);
  int planned = 0;
  for (int p = 1; p <= 8; ++p)
    for (int m : {p, 2 * p + 1, 3 * p + 2})
      for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
        GeneratorParams params;
        params.stages = p;
        params.microbatches = m;
        params.vocab = mode;
        const CostTable costs = random_costs(rng, p);
        std::vector<std::vector<Op>> transformer(static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r)
          append_one_f_one_b(transformer[static_cast<std::size_t>(r)], m,
                             one_f_one_b_warmup(mode, p, r), OpKind::BW);
        const int lookahead = std::min(m, std::clamp(one_f_one_b_warmup(mode, p, 0), 0, m) + 2);
        std::optional<double> makespan;
        const Schedule s =
            plan_vocabulary_passes("1f1b", params, 1, transformer, lookahead, costs, &makespan);
        validate(s);
        // Timed by the planner, and exactly: the generators compare candidate orders by it.
        ASSERT_TRUE(makespan.has_value()) << shape(p, m, mode);
        EXPECT_EQ(*makespan, estimated_makespan(s, costs)) << shape(p, m, mode);
        // Told to give up past its own time, it plans the same order to the end; past a time a
        // little shorter, it gives up (the interlaced passes give up on the eager order where
        // the lock-step one is faster, and zb-h1 on a variant).
        std::optional<double> again;
        const Schedule same = plan_vocabulary_passes("1f1b", params, 1, transformer, lookahead,
                                                     costs, &again, *makespan);
        EXPECT_EQ(same.ranks, s.ranks) << shape(p, m, mode);
        EXPECT_EQ(again, makespan) << shape(p, m, mode);
        std::optional<double> shorter;
        plan_vocabulary_passes("1f1b", params, 1, transformer, lookahead, costs, &shorter,
                               *makespan * (1.0 - 1e-6));
        EXPECT_EQ(shorter, std::numeric_limits<double>::infinity()) << shape(p, m, mode);
        ++planned;
      }
  EXPECT_EQ(planned, 8 * 3 * 3);
}

// A planner of its own: every rank keeps 1F1B's order of F and B, and at each wait runs a deferred
// W, idles a while or waits for its input as a coin says (so ranks idle past their inputs, are
// rewound by earlier events, and block on unknown inputs in patterns zb-h1 does not make).
TEST(Planner, DeferredWeightPassesTakeWhatExecutingThemTakes) {
  std::mt19937_64 rng(11);
  int as_executed = 0, not_as_executed = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const int p = 1 + static_cast<int>(rng() % 8);
    const int m = p + static_cast<int>(rng() % (2 * static_cast<unsigned>(p) + 3));
    const auto P = static_cast<std::size_t>(p);
    const CostTable costs = random_costs(rng, p);
    Schedule s = empty_schedule("zb-h1", p, m, 1, VocabMode::None);
    std::vector<std::vector<Op>> order(P);
    for (int r = 0; r < p; ++r)
      append_one_f_one_b(order[static_cast<std::size_t>(r)], m, p - r - 1, OpKind::B);
    std::vector<std::size_t> next(P, 0);
    std::vector<std::deque<int>> pending(P);
    Planner planner(s, costs);
    plan_in_time_order("test", planner, [&](int r) {
      const auto R = static_cast<std::size_t>(r);
      const auto run_w = [&] {
        planner.run(r, {OpKind::W, 0, pending[R].front()});
        pending[R].pop_front();
        return StepResult::Progress;
      };
      if (next[R] == order[R].size()) return pending[R].empty() ? StepResult::Done : run_w();
      const Op op = order[R][next[R]];
      const auto ready = planner.ready_time(r, op);
      if (ready && *ready <= planner.clock(r)) {
        planner.run(r, op, *ready);
        ++next[R];
        if (op.kind == OpKind::B) pending[R].push_back(op.microbatch);
        return StepResult::Progress;
      }
      // At a wait a coin runs a deferred W, idles the time of one (past its input's time, or
      // until an input not planned yet is produced earlier, which rewinds the rank), or neither.
      const auto coin = rng() % 3;
      if (!pending[R].empty() && coin == 0) return run_w();
      if (coin == 1) {
        planner.idle_until(r, planner.clock(r) + planner.cost(r, OpKind::W));
        return StepResult::Progress;
      }
      if (ready) {
        planner.idle_until(r, *ready);
        return StepResult::Progress;
      }
      return pending[R].empty() ? StepResult::Blocked : run_w();
    });
    validate(s);
    const std::optional<double> makespan = planner.makespan();
    if (!makespan) {
      ++not_as_executed;
      continue;
    }
    ++as_executed;
    EXPECT_EQ(*makespan, estimated_makespan(s, costs))
        << "trial " << trial << " p=" << p << " m=" << m;
  }
  // The coin makes both: plans whose ops all start where execution starts them, and plans with an
  // op run at a clock its rank idled to, past its input, which the planner must not time.
  EXPECT_GT(as_executed, 10);
  EXPECT_GT(not_as_executed, 10);
}

// Megatron's interleaved order of rank r (v chunks, groups of G micro-batches, `warmup` forwards
// before the first backward): forwards walk each group chunk by chunk, backwards the same with the
// chunks reversed.
std::vector<Op> interleaved_order(int m, int v, int G, int warmup) {
  std::vector<Op> forward, backward, ops;
  for (int first = 0; first < m; first += G)
    for (int c = 0; c < v; ++c)
      for (int i = first; i < std::min(first + G, m); ++i) {
        forward.push_back({OpKind::F, static_cast<std::int16_t>(c), i});
        backward.push_back({OpKind::BW, static_cast<std::int16_t>(v - 1 - c), i});
      }
  const int total = m * v;
  const int w = std::min(warmup, total);
  for (int k = 0; k < w; ++k) ops.push_back(forward[static_cast<std::size_t>(k)]);
  for (int k = 0; k < total - w; ++k) {
    ops.push_back(forward[static_cast<std::size_t>(k + w)]);
    ops.push_back(backward[static_cast<std::size_t>(k)]);
  }
  for (int k = total - w; k < total; ++k) ops.push_back(backward[static_cast<std::size_t>(k)]);
  return ops;
}

// Whether the passes fit around a transformer order, decided without time, against planning them
// in time (which stalls where they do not): interleaved orders with warm-ups and input-embedding
// lookaheads from too short to long enough, so that both answers come up.
TEST(Planner, WhetherThePassesFitIsWhatPlanningThemFinds) {
  std::mt19937_64 rng(5);
  int fit = 0, stalled = 0;
  for (int p = 1; p <= 5; ++p)
    for (int v : {1, 2, 3})
      for (int m : {p, 2 * p, 3 * p})
        for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2})
          for (int extra = 0; extra <= 3; ++extra)
            for (int lookahead = 1; lookahead <= p + 2; ++lookahead) {
              GeneratorParams params;
              params.stages = p;
              params.microbatches = m;
              params.vocab = mode;
              const CostTable costs = random_costs(rng, p);
              std::vector<std::vector<Op>> transformer;
              for (int r = 0; r < p; ++r)
                transformer.push_back(
                    interleaved_order(m, v, p, 2 * (p - r - 1) + (v - 1) * p + extra));
              const int k = std::min(m, lookahead);
              bool planned = true;
              try {
                (void)plan_vocabulary_passes("interleaved-1f1b", params, v, transformer, k, costs);
              } catch (const ScheduleError&) {
                planned = false;
              }
              EXPECT_EQ(vocabulary_passes_fit(params, v, transformer, k), planned)
                  << shape(p, m, mode) << " v=" << v << " extra " << extra << " lookahead " << k;
              ++(planned ? fit : stalled);
            }
  EXPECT_GT(fit, 100);
  EXPECT_GT(stalled, 100);
}

// The rank the planners advance next: the eligible rank with the least clock, ties to the lowest
// rank, as a scan for the first minimum finds it, over random clocks drawn from a few values (so
// that ties are common), ineligible ranks, clocks set to what they were and rank counts that are
// and are not powers of two.
TEST(Planner, TheEarliestRankIsTheFirstLeastEligibleClock) {
  std::mt19937_64 rng(11);
  for (int ranks : {1, 2, 3, 5, 8, 13, 32, 33, 64}) {
    EarliestRank earliest(ranks);
    std::vector<double> clock(static_cast<std::size_t>(ranks), EarliestRank::kIneligible);
    for (int i = 0; i < ranks; ++i) earliest.set(i, EarliestRank::kIneligible);
    for (int step = 0; step < 4000; ++step) {
      const int r = static_cast<int>(rng() % static_cast<std::uint64_t>(ranks));
      const std::uint64_t draw = rng() % 8;
      // -0.0 equals 0.0 (its bits alone would order above every clock).
      const double c = draw == 0   ? EarliestRank::kIneligible
                       : draw == 1 ? clock[static_cast<std::size_t>(r)]
                       : draw == 2 ? -0.0
                                   : 0.5 * static_cast<double>(rng() % 6);
      clock[static_cast<std::size_t>(r)] = c;
      earliest.set(r, c);
      int expected = -1;
      for (int i = 0; i < ranks; ++i)
        if (clock[static_cast<std::size_t>(i)] != EarliestRank::kIneligible &&
            (expected < 0 ||
             clock[static_cast<std::size_t>(i)] < clock[static_cast<std::size_t>(expected)]))
          expected = i;
      ASSERT_EQ(earliest.top(), expected)
          << ranks << " ranks, step " << step << ": set rank " << r << " to " << c;
    }
  }
}

}  // namespace
}  // namespace pipetune::schedule::linear
