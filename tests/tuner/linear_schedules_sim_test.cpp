// The linear-placement schedules (gpipe, 1f1b and its vocabulary variants, interleaved-1f1b,
// zb-h1) run through the simulator and compared with the closed forms of schedules.md a.4 / b.6
// and with hand calculations. Costs are per chunk and per micro-batch; BW = B + W.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "engine/schedule/generators.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

using testing::params;
using testing::run;
using testing::where;

constexpr double kEps = 1e-9;

TEST(LinearSchedulesSim, OneFOneBAndGpipeBubbleIsPMinusOneOverMPlusPMinusOne) {
  // Equal costs F = B = W = 1 (BW = 2): both take (m + p - 1)(F + BW); each stage is busy
  // m(F + BW), so every stage and the pipeline idle (p - 1)/(m + p - 1) of the iteration.
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 3, p, 2 * p, 4 * p}) {
      SCOPED_TRACE(where(p, m));
      const CostTable c = CostTable::uniform(p, 1, 1, 1);
      const double bubble = static_cast<double>(p - 1) / (m + p - 1);
      for (const char* name : {"1f1b", "gpipe"}) {
        const auto r = run(params(name, p, m), c);
        EXPECT_NEAR(r.iteration_time, 3.0 * (m + p - 1), kEps) << name;
        EXPECT_NEAR(r.bubble_ratio, bubble, kEps) << name;
        for (const auto& st : r.stages) EXPECT_NEAR(st.bubble_ratio, bubble, kEps) << name;
      }
    }
}

TEST(LinearSchedulesSim, GpipeHoldsMAndOneFOneBHoldsPMinusR) {
  for (int p : {2, 4, 8})
    for (int m : {p / 2, p, 3 * p}) {
      SCOPED_TRACE(where(p, m));
      const CostTable c = CostTable::uniform(p, 1, 1, 1);
      const auto gp = run(params("gpipe", p, m), c);
      const auto one = run(params("1f1b", p, m), c);
      for (int r = 0; r < p; ++r) {
        EXPECT_NEAR(gp.stages[static_cast<std::size_t>(r)].peak_activation_microbatches, m, kEps);
        EXPECT_NEAR(one.stages[static_cast<std::size_t>(r)].peak_activation_microbatches,
                    std::min(p - r, m), kEps)
            << "rank " << r;
      }
    }
}

TEST(LinearSchedulesSim, InterleavedBubbleIsPMinusOneOverVmOfIdeal) {
  // Per chunk t_f = 1, t_b = 2. Megatron SC'21: the bubble shrinks by v, iteration
  // (m v + p - 1)(t_f + t_b) for m a multiple of p (G = p), i.e. (p - 1)/(v m) of the ideal
  // m v (t_f + t_b).
  for (int p : {2, 4, 8})
    for (int v : {2, 3, 4})
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE(where(p, m) + " v=" + std::to_string(v));
        GeneratorParams g = params("interleaved-1f1b", p, m);
        g.chunks = v;
        const auto r = run(g, CostTable::uniform(p, 1, 1, 1));
        const double ideal = 3.0 * m * v;
        EXPECT_NEAR(r.iteration_time, 3.0 * (m * v + p - 1), kEps);
        EXPECT_NEAR((r.iteration_time - ideal) / ideal, (p - 1.0) / (v * m), kEps);
      }
  // Megatron's tunable groups keep the same bubble: p=2, G=3, m=5 and p=4, G=5, m=10.
  for (auto [p, G, m] : {std::tuple{2, 3, 5}, std::tuple{4, 5, 10}}) {
    GeneratorParams g = params("interleaved-1f1b", p, m);
    g.group_size = G;
    EXPECT_NEAR(run(g, CostTable::uniform(p, 1, 1, 1)).iteration_time, 3.0 * (2 * m + p - 1), kEps)
        << where(p, m) << " G=" << G;
  }
}

TEST(LinearSchedulesSim, ZbH1BubbleIsOneThirdOfOneFOneB) {
  // T_F = T_B = T_W = 1: 1F1B takes 3(m + p - 1), ZB-H1 3m + (p - 1): its bubble
  // (p - 1)(T_F + T_B - T_W) is a third of 1F1B's 3(p - 1), with the same peak memory (p).
  for (int p : {2, 3, 4, 8})
    for (int m : {p, 2 * p, 3 * p + 1}) {
      SCOPED_TRACE(where(p, m));
      const CostTable c = CostTable::uniform(p, 1, 1, 1);
      const auto zb = run(params("zb-h1", p, m), c);
      const auto one = run(params("1f1b", p, m), c);
      EXPECT_NEAR(zb.iteration_time, 3.0 * m + (p - 1), kEps);
      EXPECT_NEAR(zb.iteration_time - 3.0 * m, (one.iteration_time - 3.0 * m) / 3.0, kEps);
      EXPECT_NEAR(zb.stages[0].peak_activation_microbatches, p, kEps);
      for (const auto& st : zb.stages) EXPECT_LE(st.peak_activation_microbatches, p + kEps);
    }
}

TEST(LinearSchedulesSim, ZbH1BubbleFollowsTheGeneralFormula) {
  // ZB README: bubble (p - 1)(T_F + T_B - T_W) whenever T_W <= T_F.
  for (auto [f, b, w] :
       {std::tuple{1.0, 1.0, 0.5}, std::tuple{2.0, 2.0, 1.0}, std::tuple{1.0, 2.0, 1.0}}) {
    for (int p : {4, 8}) {
      const int m = 2 * p;
      const auto r = run(params("zb-h1", p, m), CostTable::uniform(p, f, b, w));
      EXPECT_NEAR(r.iteration_time, m * (f + b + w) + (p - 1) * (f + b - w), kEps)
          << where(p, m) << " F=" << f << " B=" << b << " W=" << w;
    }
  }
  // Fewer micro-batches than stages: never slower than 1F1B.
  for (int p : {4, 8})
    for (int m : {1, 2, p - 1}) {
      const CostTable c = CostTable::uniform(p, 1, 1, 1);
      EXPECT_LE(run(params("zb-h1", p, m), c).iteration_time,
                run(params("1f1b", p, m), c).iteration_time + kEps)
          << where(p, m);
    }
}

TEST(LinearSchedulesSim, HeavyLastStageLengthensOneFOneBByItsExtraWork) {
  // Hand calculation. Stages 0..p-2: F = 1, BW = 2; last stage: F = 2, BW = 4.
  //  - F(0) reaches the last stage after (p - 1) * 1.
  //  - The last stage then alternates F(i), BW(i) without waiting: its next input F(i + 1)
  //    leaves stage p - 2 three time units after BW(i - 1) came back (BW then F there), while
  //    the last stage needs it six units later (F + BW).
  //  - After the last BW(m - 1) at (p - 1) + 6m, its gradient crosses p - 1 stages of BW = 2,
  //    each free by then (their earlier backwards arrived six units apart and took two).
  // Iteration = (p - 1) + 6m + 2(p - 1) = 6m + 3(p - 1): the uniform 3(m + p - 1) plus the
  // last stage's extra m (1 + 2) = 3m.
  for (int p : {2, 4, 8})
    for (int m : {1, p - 1 > 0 ? p - 1 : 1, 2 * p, 4 * p}) {
      SCOPED_TRACE(where(p, m));
      CostTable c = CostTable::uniform(p, 1, 1, 1);
      auto& last = c.stages[static_cast<std::size_t>(p - 1)];
      last[OpKind::F] = 2;
      last[OpKind::B] = 2;
      last[OpKind::W] = 2;
      last[OpKind::BW] = 4;
      const auto r = run(params("1f1b", p, m), c);
      EXPECT_NEAR(r.iteration_time, 6.0 * m + 3.0 * (p - 1), kEps);
      EXPECT_NEAR(r.iteration_time - 3.0 * (m + p - 1), 3.0 * m, kEps);
      EXPECT_NEAR(r.stages.back().bubble, 3.0 * (p - 1), kEps);
    }
}

double vocab_work(const CostTable& c, int rank) {
  double w = 0.0;
  for (OpKind k : {OpKind::S, OpKind::T, OpKind::IF, OpKind::IB}) w += c.cost(rank, k);
  return w;
}

TEST(LinearSchedulesSim, VocabularyPeaksMatchTheReadmeTable) {
  // VocabularyParallelism README: Vocab-1 p + 2, Vocab-2 p + 1, Interlaced 1.5p micro-batches.
  for (int p : {2, 4, 8}) {
    const int m = 4 * p;
    const CostTable c = CostTable::uniform(p, 1, 1, 1, 0.5, 0.5);
    SCOPED_TRACE(where(p, m));
    const auto v1 = run(params("1f1b", p, m, VocabMode::Vocab1), c);
    const auto v2 = run(params("1f1b", p, m, VocabMode::Vocab2), c);
    const auto il = run(params("1f1b", p, m, VocabMode::Interlaced), c);
    EXPECT_NEAR(v1.stages[0].peak_activation_microbatches, p + 2, kEps);
    EXPECT_NEAR(v2.stages[0].peak_activation_microbatches, p + 1, kEps);
    EXPECT_NEAR(il.stages[0].peak_activation_microbatches, 1.5 * p, kEps);
  }
}

TEST(LinearSchedulesSim, VocabularyPassesDoNotStallThePipeline) {
  // Bubble "B" in the README table: the vocabulary passes add their own work to every rank
  // but no waiting, so the iteration is at most 1F1B's plus m (S + T + IF + IB). For vocab-1 and
  // vocab-2 the S passes of a micro-batch start within one transformer op (the longest, BW) of
  // each other: each rank runs S(i) at its first op boundary after the last stage's F(i).
  struct Costs {
    const char* what;
    CostTable table;
  };
  auto heavy_last = [](int p) {
    CostTable c = CostTable::uniform(p, 1, 1, 1, 0.5, 0.5);
    auto& last = c.stages[static_cast<std::size_t>(p - 1)];
    last[OpKind::F] = 2;
    last[OpKind::BW] = 4;
    return c;
  };
  for (int p : {2, 4, 8}) {
    const int m = 4 * p;
    Costs cases[] = {{"unit", CostTable::uniform(p, 1, 1, 1, 0.5, 0.5)},
                     {"big vocabulary", CostTable::uniform(p, 1, 1, 1, 1.5, 1.0)},
                     {"heavy last stage", heavy_last(p)}};
    for (auto& cs : cases) {
      for (OpKind k : {OpKind::IF, OpKind::IB})
        for (auto& st : cs.table.stages) st[k] = 0.2;
      const double one_f_one_b = run(params("1f1b", p, m), cs.table).iteration_time;
      for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
        SCOPED_TRACE(where(p, m) + " " + cs.what + " " + std::string(vocab_mode_name(mode)));
        const auto r = run(params("1f1b", p, m, mode), cs.table);
        EXPECT_LE(r.iteration_time, one_f_one_b + m * vocab_work(cs.table, 0) + kEps);
        if (mode == VocabMode::Interlaced) continue;
        std::map<int, std::pair<std::int64_t, std::int64_t>> s_start;  // mb -> (min, max) ns
        for (const auto& sp : r.trace.spans) {
          if (sp.kind != profiler::SpanKind::S) continue;
          auto [it, fresh] = s_start.try_emplace(sp.microbatch, sp.start_ns, sp.start_ns);
          it->second.first = std::min(it->second.first, sp.start_ns);
          it->second.second = std::max(it->second.second, sp.start_ns);
        }
        const double longest_op = cs.table.cost(p - 1, OpKind::BW);
        for (const auto& [mb, span] : s_start)
          EXPECT_LE((span.second - span.first) * 1e-9, longest_op + kEps)
              << "S passes of mb " << mb;
      }
    }
  }
}

TEST(LinearSchedulesSim, VocabularyScheduleSurvivesCommunicationCosts) {
  // With p2p latency and a barrier collective: valid, same memory, and the passes' collectives
  // cost no more than one collective per barrier on the critical path of each micro-batch.
  const int p = 4, m = 16;
  CostTable c = CostTable::uniform(p, 1, 1, 1, 0.5, 0.5, 0.05);
  c.collective_time = 0.1;
  const double base = run(params("1f1b", p, m), c).iteration_time;
  for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
    const auto r = run(params("1f1b", p, m, mode), c);
    SCOPED_TRACE(std::string(vocab_mode_name(mode)));
    const int barriers = mode == VocabMode::Vocab2 ? 2 : 3;  // C1 (+ C2) and the input reduce
    EXPECT_LE(r.iteration_time, base + m * (vocab_work(c, 0) + barriers * c.collective_time));
    EXPECT_NEAR(r.stages[0].peak_activation_microbatches,
                mode == VocabMode::Vocab1   ? p + 2
                : mode == VocabMode::Vocab2 ? p + 1
                                            : 1.5 * p,
                kEps);
  }
}

}  // namespace
}  // namespace pipetune::schedule
