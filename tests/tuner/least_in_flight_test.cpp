// schedule::least_peak_in_flight is a lower bound of the simulated peak activations of every
// stage, for every schedule and vocabulary mode, with uniform and uneven costs; for gpipe and 1f1b
// it is the closed form (m, and min(m, p - r)), for interleaved-1f1b Megatron's warm-up, and for
// V-Half and V-Min the least loaded rank's simulated peak.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

CostTable uneven_costs(int p, std::mt19937& rng) {
  CostTable c = CostTable::uniform(p, 1, 1, 1, 0.2, 0.2);
  for (auto& st : c.stages) {
    st[OpKind::F] = 0.5 + (rng() % 100) / 50.0;
    st[OpKind::B] = 0.5 + (rng() % 100) / 50.0;
    st[OpKind::W] = 0.3 + (rng() % 100) / 80.0;
    st[OpKind::IF] = 0.05;
    st[OpKind::IB] = 0.07;
  }
  c.p2p_latency = 0.1;
  c.collective_time = 0.3;
  return c;
}

TEST(LeastPeakInFlight, NeverAboveTheSimulatedPeak) {
  std::mt19937 rng(9);
  int checked = 0;
  for (const std::string_view name : schedule_names()) {
    for (const VocabMode vocab :
         {VocabMode::None, VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
      if (vocab != VocabMode::None && !supports_vocab(name, vocab)) continue;
      for (int p : {2, 3, 4, 5, 8, 9}) {
        for (int m : {1, p, 2 * p + 1, 4 * p}) {
          for (bool uneven : {false, true}) {
            GeneratorParams params;
            params.name = std::string(name);
            params.stages = p;
            params.microbatches = m;
            params.vocab = vocab;
            if (uneven) params.costs = uneven_costs(p, rng);
            Schedule s;
            try {
              s = generate(params);
            } catch (const InputError&) {
              continue;  // too few micro-batches for this schedule
            }
            const CostTable costs =
                uneven ? params.costs : CostTable::uniform(p, 1, 1, 1, 0.2, 0.2);
            sim::SimOptions options;
            options.record_trace = false;
            const sim::SimResult r = sim::simulate(s, costs, options);
            params.chunks = s.chunks;
            for (int k = 0; k < p; ++k) {
              const double bound = least_peak_in_flight(params, k);
              EXPECT_LE(bound,
                        r.stages[static_cast<std::size_t>(k)].peak_activation_microbatches + 1e-9)
                  << name << " vocab " << static_cast<int>(vocab) << " p=" << p << " m=" << m
                  << (uneven ? " uneven" : "") << " stage " << k;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// The simulated peak of each stage, and the schedule's chunks.
std::pair<std::vector<double>, int> simulated_peaks(const GeneratorParams& params,
                                                    const CostTable& costs) {
  const Schedule s = generate(params);
  sim::SimOptions options;
  options.record_trace = false;
  const sim::SimResult r = sim::simulate(s, costs, options);
  std::vector<double> peaks;
  for (const auto& st : r.stages) peaks.push_back(st.peak_activation_microbatches);
  return {peaks, s.chunks};
}

TEST(LeastPeakInFlight, InterleavedChunksAndGroupsNeverAboveTheSimulatedPeak) {
  // Every chunk count and group size the search enumerates, vocabulary modes included: the bound
  // follows Megatron's warm-up, which both change.
  std::mt19937 rng(17);
  int checked = 0;
  for (int p : {2, 3, 4, 6, 8}) {
    for (int v : {2, 3, 4}) {
      for (int group : {0, p + 1, 2 * p}) {
        for (int m : {p, 2 * p, 3 * p + 1, 4 * p}) {
          for (const VocabMode vocab : {VocabMode::None, VocabMode::Vocab1, VocabMode::Vocab2}) {
            for (bool uneven : {false, true}) {
              GeneratorParams params;
              params.name = "interleaved-1f1b";
              params.stages = p;
              params.microbatches = m;
              params.chunks = v;
              params.group_size = group;
              params.vocab = vocab;
              if (uneven) params.costs = uneven_costs(p, rng);
              const CostTable costs =
                  uneven ? params.costs : CostTable::uniform(p, 1, 1, 1, 0.2, 0.2);
              std::vector<double> peaks;
              try {
                peaks = simulated_peaks(params, costs).first;
              } catch (const InputError&) {
                continue;  // a group size or micro-batch count this schedule refuses
              }
              for (int k = 0; k < p; ++k) {
                EXPECT_LE(least_peak_in_flight(params, k),
                          peaks[static_cast<std::size_t>(k)] + 1e-9)
                    << "p=" << p << " v=" << v << " G=" << group << " m=" << m << " vocab "
                    << static_cast<int>(vocab) << (uneven ? " uneven" : "") << " stage " << k;
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(LeastPeakInFlight, InterleavedIsMegatronsWarmUp) {
  // Rank r runs min(2 (p - r - 1) + (v - 1) p + 1, m v) chunk forwards before its first backward,
  // each 1 / v of a micro-batch: p = 4, v = 2, m = 8 holds 5.5, 4.5, 3.5, 2.5.
  GeneratorParams params;
  params.name = "interleaved-1f1b";
  params.stages = 4;
  params.microbatches = 8;
  params.chunks = 2;
  std::vector<double> bounds;
  for (int r = 0; r < 4; ++r) bounds.push_back(least_peak_in_flight(params, r));
  EXPECT_EQ(bounds, (std::vector<double>{5.5, 4.5, 3.5, 2.5}));
  for (int p : {2, 4, 8})
    for (int v : {2, 3, 4})
      for (int m : {p, 2 * p, 4 * p}) {
        params.stages = p;
        params.microbatches = m;
        params.chunks = v;
        const auto [peaks, chunks] =
            simulated_peaks(params, CostTable::uniform(p, 1, 1, 1, 0.2, 0.2));
        for (int k = 0; k < p; ++k)
          EXPECT_DOUBLE_EQ(least_peak_in_flight(params, k), peaks[static_cast<std::size_t>(k)])
              << "p=" << p << " v=" << v << " m=" << m << " stage " << k;
      }
}

TEST(LeastPeakInFlight, VBlocksAtLongPipelines) {
  // The V-Half and V-Min bounds are closed forms of the blocks' offsets after the squeeze: checked
  // on every stage of pipelines up to 64 stages, and equal to the least loaded stage's peak.
  for (const std::string_view name : {"v-half", "v-min", "dualpipe-v"}) {
    for (int p : {5, 12, 16, 17, 24, 31, 32, 48, 64}) {
      for (int m : {p / 2, p, 2 * p + 1, 4 * p}) {
        GeneratorParams params;
        params.name = std::string(name);
        params.stages = p;
        params.microbatches = m;
        std::vector<double> peaks;
        try {
          peaks = simulated_peaks(params, CostTable::uniform(p, 1, 1, 1, 0.2, 0.2)).first;
        } catch (const InputError&) {
          continue;  // dualpipe-v needs m >= 2p
        }
        params.chunks = 2;
        double least = peaks.front();
        for (int k = 0; k < p; ++k) {
          const double peak = peaks[static_cast<std::size_t>(k)];
          EXPECT_LE(least_peak_in_flight(params, k), peak + 1e-9)
              << name << " p=" << p << " m=" << m << " stage " << k;
          least = std::min(least, peak);
        }
        if (name != "dualpipe-v") {  // dualpipe-v's bound is its warm-up, half a micro-batch under
          EXPECT_DOUBLE_EQ(least_peak_in_flight(params, 0), least)
              << name << " p=" << p << " m=" << m;
        }
      }
    }
  }
}

TEST(LeastPeakInFlight, ClosedFormsOfGPipeAndOneFOneB) {
  for (int p : {2, 4, 8}) {
    for (int m : {1, p - 1, p, 3 * p}) {
      if (m < 1) continue;
      GeneratorParams params;
      params.stages = p;
      params.microbatches = m;
      params.name = "gpipe";
      for (int r = 0; r < p; ++r) EXPECT_EQ(least_peak_in_flight(params, r), m);
      params.name = "1f1b";
      for (int r = 0; r < p; ++r) EXPECT_EQ(least_peak_in_flight(params, r), std::min(m, p - r));
    }
  }
}

TEST(LeastPeakInFlight, ZbH2sFirstStageRunsForwardsUntilABackwardCanComeBack) {
  // With its planning costs, zb-h2's first stage holds every forward that starts before micro-batch
  // 0 can have gone through the pipeline and back: with F = B = 1 and free hops, 2p - 1 (one short
  // of the greedy's 2p budget), whatever the variant. The bound never tops the forwards the first
  // stage runs before its first backward (which its peak holds), for uneven costs, transfers and
  // budgets from one micro-batch up; without costs it is one.
  for (int p : {1, 2, 4, 8, 16}) {
    for (int m : {1, p, 2 * p, 4 * p}) {
      GeneratorParams params;
      params.name = "zb-h2";
      params.stages = p;
      params.microbatches = m;
      EXPECT_EQ(least_peak_in_flight(params, 0), 1.0) << "no costs, p=" << p << " m=" << m;
      params.costs = CostTable::uniform(p, 1, 1, 1);
      const double bound = least_peak_in_flight(params, 0);
      EXPECT_EQ(bound, std::min(m, 2 * p - 1)) << "p=" << p << " m=" << m;
      EXPECT_LE(bound, simulated_peaks(params, params.costs).first.front()) << "p=" << p;
    }
  }
  std::mt19937 rng(23);
  int checked = 0, above_one = 0;
  for (int p : {2, 3, 4, 6, 8, 12}) {
    for (int m : {1, p / 2 + 1, p, 2 * p + 1, 4 * p}) {
      for (double limit : {0.0, 1.0, 2.5, static_cast<double>(p), 3.0 * p}) {
        for (int trial = 0; trial < 4; ++trial) {
          GeneratorParams params;
          params.name = "zb-h2";
          params.stages = p;
          params.microbatches = m;
          params.memory_limit = limit;
          params.costs = uneven_costs(p, rng);
          params.costs.p2p_latency = (trial % 2) * 0.4;
          const double bound = least_peaks_in_flight(params).front();
          // What the rule counts: the forwards stage 0 runs before its first backward.
          const Schedule s = generate(params);
          const auto& ops = s.ranks.front();
          const auto first_backward = std::find_if(
              ops.begin(), ops.end(), [](const Op& op) { return op.kind != OpKind::F; });
          const auto leading = static_cast<double>(first_backward - ops.begin());
          EXPECT_LE(bound, leading)
              << "p=" << p << " m=" << m << " limit " << limit << " trial " << trial;
          ++checked;
          above_one += bound > 1.0;
        }
      }
    }
  }
  EXPECT_GT(above_one, checked / 2);  // the rule bounds most of them above the old one
}

TEST(LeastPeakInFlight, EveryRankAtOnceIsEachRanksOwn) {
  // least_peaks_in_flight works out the schedule's rule once for all ranks: the same values.
  for (const std::string_view name : schedule_names())
    for (const VocabMode vocab : {VocabMode::None, VocabMode::Vocab1, VocabMode::Vocab2})
      for (int p : {1, 2, 5, 8}) {
        GeneratorParams params;
        params.name = std::string(name);
        params.stages = p;
        params.microbatches = 3 * p;
        params.chunks = default_chunks(name);
        params.vocab = vocab;
        const std::vector<double> all = least_peaks_in_flight(params);
        ASSERT_EQ(all.size(), static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(all[static_cast<std::size_t>(r)], least_peak_in_flight(params, r))
              << name << " p=" << p << " rank " << r;
      }
}

TEST(MostOverlappedPairs, DualPipeVsPhasesCountItsPairs) {
  // The tuner's bound credits each pair with the communication it may hide: dualpipe-v pairs
  // only in its phases 4 and 5, so counting every forward credited it with up to 2p pairs more
  // than it runs on each rank.
  for (int p : {2, 3, 4, 8, 16})
    for (int m : {2 * p, 2 * p + 3, 6 * p}) {
      GeneratorParams params;
      params.name = "dualpipe-v";
      params.stages = p;
      params.microbatches = m;
      const Schedule s = generate(params);
      for (int r = 0; r < p; ++r) {
        int pairs = 0;
        for (const Op& op : s.ranks[static_cast<std::size_t>(r)]) pairs += op.overlaps_previous;
        EXPECT_EQ(most_overlapped_pairs(params, r), pairs)
            << "p=" << p << " m=" << m << " rank " << r;
      }
    }
  GeneratorParams plain;
  plain.name = "1f1b";
  plain.stages = 4;
  plain.microbatches = 8;
  EXPECT_EQ(most_overlapped_pairs(plain, 0), 0);
}

}  // namespace
}  // namespace pipetune::schedule
