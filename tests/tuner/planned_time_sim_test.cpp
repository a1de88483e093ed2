// The time a cost-aware generator planned (schedule::PlannedTime) against executing the same
// lists: the simulator reads the planned iteration instead of executing the order only where the
// two agree to the last bit, and executes lists or runs the planned time does not describe.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/planned_time.hpp"
#include "support/sim_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::sim {
namespace {

using schedule::CostTable;
using schedule::GeneratorParams;
using schedule::OpKind;
using schedule::Schedule;
using schedule::VocabMode;
using schedule::testing::expect_same_result;
using schedule::testing::fuse_last_b_and_w;
using schedule::testing::untraced;

Schedule without_planned_time(Schedule s) {
  s.planned_time.reset();
  return s;
}

// Uneven costs, a transfer and a barrier time drawn from rng; some tables without either.
CostTable random_table(int p, int case_index, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.05, 2.0);
  CostTable c = CostTable::uniform(p, 1, 1, 1, 0.2, 0.2);
  for (auto& st : c.stages)
    for (OpKind k : schedule::kAllOpKinds) st[k] = u(rng);
  if (case_index % 3 == 0)
    for (auto& st : c.stages) st[OpKind::BW] = 0.0;  // B + W
  c.p2p_latency = case_index % 4 == 1 ? 0.0 : 0.1 * u(rng);
  c.collective_time = case_index % 5 == 2 ? 0.0 : 0.2 * u(rng);
  if (case_index % 3 == 1) {
    // Vocabulary passes short against their barriers (as in the tuner's plans): the barriers of
    // back-to-back passes queue on the communication stream.
    for (auto& st : c.stages)
      for (OpKind k : {OpKind::S, OpKind::T, OpKind::IF, OpKind::IB}) st[k] = 0.02 * u(rng);
    c.collective_time = 0.5 * u(rng);
  }
  c.w_free_fraction = case_index % 2 == 0 ? 1.0 : 0.5;
  return c;
}

TEST(PlannedTime, APlannedOrderSimulatesAsExecutingItDoes) {
  // Each cost-aware generator plans with the table it is simulated with (as the tuner asks):
  // where it keeps a planned time, the run without executing must equal the executed one.
  std::mt19937_64 rng(11);
  struct Case {
    const char* name;
    VocabMode vocab;
  };
  const Case cases[] = {{"zb-h1", VocabMode::None},
                        {"zb-h2", VocabMode::None},
                        {"1f1b", VocabMode::Vocab1},
                        {"1f1b", VocabMode::Vocab2},
                        {"1f1b", VocabMode::Interlaced},
                        {"interleaved-1f1b", VocabMode::Vocab1},
                        {"interleaved-1f1b", VocabMode::Vocab2}};
  for (const Case& k : cases) {
    int planned = 0, compared = 0;
    for (int i = 0; i < 40; ++i) {
      const int p = 2 + i % 7;
      GeneratorParams params;
      params.name = k.name;
      params.vocab = k.vocab;
      params.stages = p;
      params.microbatches = p * (1 + i % 4) + i % 3;
      params.costs = random_table(p, i, rng);
      params.prove_deadlock_free = false;
      Schedule s;
      try {
        s = schedule::generate(params);
      } catch (const InputError&) {
        continue;  // sizes this schedule refuses
      }
      const std::string at = std::string(k.name) + " vocab " +
                             std::to_string(static_cast<int>(k.vocab)) + " case " +
                             std::to_string(i) + " p=" + std::to_string(p) +
                             " m=" + std::to_string(params.microbatches);
      if (s.planned_time) ++planned;
      expect_same_result(untraced(s, params.costs), untraced(without_planned_time(s), params.costs),
                         at);
      ++compared;
    }
    EXPECT_GE(compared, 15) << k.name;
    // zb-h1 plans every order in its model; zb-h2 and interlaced 1f1b most.
    if (std::string(k.name) == "zb-h1" || k.vocab == VocabMode::Interlaced ||
        std::string(k.name) == "zb-h2") {
      EXPECT_GT(planned, compared / 2) << k.name << " vocab " << static_cast<int>(k.vocab);
    }
  }
}

// A zb-h1 order planned with `c` (its planned time kept).
Schedule planned_zb_h1(const CostTable& c, int p, int m) {
  GeneratorParams params;
  params.name = "zb-h1";
  params.stages = p;
  params.microbatches = m;
  params.costs = c;
  Schedule s = schedule::generate(params);
  EXPECT_TRUE(s.planned_time != nullptr);
  return s;
}

TEST(PlannedTime, ChangedListsAreExecuted) {
  // Stage 0's last B and the W after it fused into one slow BW: the lists are no longer the ones
  // planned, and their time is not the planned one.
  std::mt19937_64 rng(5);
  CostTable c = random_table(4, 3, rng);
  c.stages[0][OpKind::BW] = 10.0;
  Schedule s = planned_zb_h1(c, 4, 12);
  const double planned = s.planned_time->iteration;
  ASSERT_TRUE(fuse_last_b_and_w(s, 0));
  const SimResult executed = untraced(without_planned_time(s), c);
  ASSERT_NE(executed.iteration_time, planned);
  expect_same_result(untraced(s, c), executed, "fused");
}

TEST(PlannedTime, OtherCostsOrAnotherModelAreExecuted) {
  // The planned time read under costs it was not planned with, or where the simulator models
  // more than the planner did, would be wrong: each of these runs executes the order.
  std::mt19937_64 rng(7);
  const CostTable c = random_table(4, 3, rng);
  const Schedule s = planned_zb_h1(c, 4, 12);
  std::vector<std::pair<std::string, CostTable>> others;
  CostTable t = c;
  t.p2p_latency *= 3.0;
  others.emplace_back("transfer", t);
  t = c;
  t.stages[2][OpKind::W] *= 2.0;
  others.emplace_back("a W cost", t);
  t = c;
  t.stages[1].slowdown = 2.0;
  others.emplace_back("a slow stage", t);
  t = c;
  t.pair_transfer.assign(16, 0.0);
  for (std::size_t i = 0; i < t.pair_transfer.size(); ++i) t.pair_transfer[i] = 0.05 * (i % 5);
  others.emplace_back("per-pair transfers", t);
  t = c;
  t.stages[1].offload = 1.0;
  t.copies_block_compute = true;
  others.emplace_back("offload", t);
  for (const auto& [what, table] : others) {
    const SimResult executed = untraced(without_planned_time(s), table);
    EXPECT_NE(executed.iteration_time, s.planned_time->iteration) << what;
    expect_same_result(untraced(s, table), executed, what);
  }
}

}  // namespace
}  // namespace pipetune::sim
