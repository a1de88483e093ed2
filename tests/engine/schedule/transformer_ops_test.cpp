// transformer_ops_schedule (generators.hpp): for v-half, 1f1b and interleaved-1f1b under vocab-1
// and vocab-2, every rank's ops of the generated schedule without its vocabulary passes are the
// transformer-ops schedule's, in the same order, whatever costs the generator planned with (the
// tuner bounds a plan by simulating that schedule); none for the other schedules and modes.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "support/schedule_helpers.hpp"

namespace pipetune::schedule {
namespace {

// Per-stage costs drawn in [0.2, 5) for every pass, a transfer and a barrier: orders planned in
// time see stages of very different speeds.
CostTable random_costs(int p, std::mt19937& rng) {
  std::uniform_real_distribution<double> draw(0.2, 5.0);
  CostTable t;
  t.stages.resize(static_cast<std::size_t>(p));
  for (StageCosts& s : t.stages)
    for (OpKind k : kAllOpKinds) s[k] = draw(rng);
  for (StageCosts& s : t.stages) s[OpKind::BW] = s[OpKind::B] + s[OpKind::W];
  t.p2p_latency = draw(rng) / 4.0;
  t.collective_time = draw(rng) / 4.0;
  return t;
}

std::string listed(const std::vector<Op>& ops) {
  std::ostringstream out;
  for (const Op& op : ops) out << op_label(op) << ' ';
  return out.str();
}

struct Case {
  std::string name;
  int p = 0, m = 0, chunks = 0;
};

TEST(TransformerOps, AreTheScheduleWithoutItsVocabularyPassesForAnyCosts) {
  const std::vector<Case> cases = {{"1f1b", 2, 4, 0},
                                   {"1f1b", 4, 9, 0},
                                   {"1f1b", 8, 16, 0},
                                   {"v-half", 2, 4, 0},
                                   {"v-half", 4, 8, 0},
                                   {"v-half", 6, 13, 0},
                                   {"interleaved-1f1b", 2, 4, 2},
                                   {"interleaved-1f1b", 4, 8, 3},
                                   {"interleaved-1f1b", 4, 12, 2},
                                   {"interleaved-1f1b", 8, 16, 2}};
  std::mt19937 rng(7);
  int compared = 0;
  for (const Case& c : cases)
    for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2})
      for (bool layered : {false, true}) {
        GeneratorParams g = testing::params(c.name, c.p, c.m, mode);
        g.chunks = c.chunks;
        g.layered_reduction = layered;
        SCOPED_TRACE(testing::where(g) + (layered ? " layered reduction" : ""));
        const std::optional<Schedule> ops = transformer_ops_schedule(g);  // unit costs
        ASSERT_TRUE(ops.has_value());
        EXPECT_EQ(ops->vocab, VocabMode::None);
        EXPECT_NO_THROW(validate(*ops));
        for (int draw = 0; draw < 4; ++draw) {
          GeneratorParams costed = g;
          costed.costs = random_costs(c.p, rng);
          const Schedule s = generate(costed);
          ASSERT_EQ(s.ranks.size(), ops->ranks.size());
          for (std::size_t r = 0; r < s.ranks.size(); ++r) {
            std::vector<Op> without;
            for (const Op& op : s.ranks[r])
              if (!is_vocab_op(op.kind)) without.push_back(op);
            // As labels: a failure prints both orders readably (no op here is a pair).
            EXPECT_EQ(listed(without), listed(ops->ranks[r])) << "rank " << r << ", draw " << draw;
            ++compared;
          }
        }
      }
  EXPECT_GT(compared, 500);
}

TEST(TransformerOps, NoneWhereTheOrderIsNotFixedOrThereAreNoPasses) {
  GeneratorParams g = testing::params("1f1b", 4, 8, VocabMode::Interlaced);
  EXPECT_FALSE(transformer_ops_schedule(g).has_value());  // interlaced picks an order by costs
  for (const char* name : {"1f1b", "v-half", "interleaved-1f1b", "gpipe", "zb-v"}) {
    g = testing::params(name, 4, 8, VocabMode::None);
    EXPECT_FALSE(transformer_ops_schedule(g).has_value()) << name;
  }
  g = testing::params("zb-h1", 4, 8, VocabMode::Vocab1);
  EXPECT_FALSE(transformer_ops_schedule(g).has_value());
}

TEST(TransformerOps, RefusesWhatTheGeneratorRefuses) {
  GeneratorParams g = testing::params("interleaved-1f1b", 4, 6, VocabMode::Vocab2);
  g.chunks = 2;  // a last group of 2 micro-batches, under p
  EXPECT_THROW(generate(g), ScheduleError);
  EXPECT_THROW(transformer_ops_schedule(g), ScheduleError);
}

}  // namespace
}  // namespace pipetune::schedule
