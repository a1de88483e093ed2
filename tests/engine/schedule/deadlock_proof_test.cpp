// GeneratorParams::prove_deadlock_free: a generator asked not to prove its schedule free of
// deadlock (the simulator proves it by running it) gives the same schedule, op for op, and still
// makes the structural checks; validate_generated() leaves out exactly the deadlock proof.
#include <gtest/gtest.h>

#include <string>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "support/schedule_helpers.hpp"

namespace pipetune::schedule {
namespace {

using testing::params;
using testing::where;

// The generator's schedule, or its refusal prefixed with "refused: ".
struct Outcome {
  std::string error;
  Schedule schedule;
};

Outcome run(GeneratorParams g, bool prove) {
  g.prove_deadlock_free = prove;
  Outcome o;
  try {
    o.schedule = generate(g);
  } catch (const ScheduleError& e) {
    o.error = std::string("refused: ") + e.what();
  }
  return o;
}

TEST(DeadlockProof, EveryGeneratorGivesTheSameScheduleWithoutIt) {
  int compared = 0;
  for (std::string_view name : schedule_names()) {
    for (VocabMode vocab :
         {VocabMode::None, VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
      if (!supports_vocab(name, vocab)) continue;
      for (const auto& [p, m] : {std::pair{2, 4}, {3, 6}, {4, 8}, {4, 12}})
        for (bool layered : {false, true}) {
          GeneratorParams g = params(std::string(name), p, m, vocab);
          g.layered_reduction = layered;
          const Outcome proved = run(g, true), unproved = run(g, false);
          ASSERT_EQ(proved.error, unproved.error) << where(g);
          if (!proved.error.empty()) continue;
          ASSERT_EQ(proved.schedule.ranks.size(), unproved.schedule.ranks.size()) << where(g);
          for (std::size_t r = 0; r < proved.schedule.ranks.size(); ++r) {
            const auto& a = proved.schedule.ranks[r];
            const auto& b = unproved.schedule.ranks[r];
            ASSERT_EQ(a.size(), b.size()) << where(g) << " rank " << r;
            for (std::size_t i = 0; i < a.size(); ++i)
              ASSERT_TRUE(a[i] == b[i]) << where(g) << " rank " << r << " op " << i << ": "
                                        << op_label(a[i]) << " vs " << op_label(b[i]);
          }
          ++compared;
        }
    }
  }
  // Every generator took part, most of them at every size.
  EXPECT_GE(compared, 4 * static_cast<int>(schedule_names().size())) << compared;
}

Schedule two_stage_gpipe() {
  Schedule s;
  s.name = "hand";
  s.stages = 2;
  s.microbatches = 2;
  s.ranks.resize(2);
  for (auto& ops : s.ranks) {
    for (int i = 0; i < 2; ++i) ops.push_back({OpKind::F, 0, i});
    for (int i = 0; i < 2; ++i) ops.push_back({OpKind::BW, 0, i});
  }
  return s;
}

TEST(DeadlockProof, ValidateGeneratedLeavesOutOnlyTheDeadlockProof) {
  GeneratorParams proving, trusting;
  trusting.prove_deadlock_free = false;
  // Rank 0 wants micro-batch 0's backward before it has sent its forward: every op is there once,
  // but the schedule can never finish.
  Schedule stuck = two_stage_gpipe();
  std::swap(stuck.ranks[0][0], stuck.ranks[0][2]);
  EXPECT_THROW(validate_generated(stuck, proving), DeadlockError);
  EXPECT_NO_THROW(validate_generated(stuck, trusting));
  // A missing op is a structural fault: refused either way.
  Schedule short_one = two_stage_gpipe();
  short_one.ranks[1].pop_back();
  EXPECT_THROW(validate_generated(short_one, proving), ScheduleError);
  EXPECT_THROW(validate_generated(short_one, trusting), ScheduleError);
}

}  // namespace
}  // namespace pipetune::schedule
