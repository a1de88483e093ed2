// schedule::least_peak_in_flight is a lower bound of the simulated peak activations of every
// stage, for every schedule and vocabulary mode, with uniform and uneven costs; and for gpipe and
// 1f1b it is the closed form (m, and min(m, p - r)).
#include <gtest/gtest.h>

#include <random>

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
      for (int p : {2, 3, 4, 8}) {
        for (int m : {p, 2 * p + 1, 4 * p}) {
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

}  // namespace
}  // namespace pipetune::schedule
