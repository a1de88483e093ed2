// Layered gradient reduction (OpKind::R) and the layered generator: the breadth-first op order
// worked out by hand, where add_gradient_reductions puts each group's R (after its last W or BW,
// never inside an overlapped pair), the validator's refusals, and every schedule with R ops added
// free of deadlock.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "support/schedule_helpers.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams params(const std::string& name, int p, int m, int chunks = 0) {
  GeneratorParams g = testing::params(name, p, m);
  g.chunks = chunks;
  return g;
}

std::string labels(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) s += (s.empty() ? "" : " ") + op_label(op);
  return s;
}

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Layered, RunsEveryMicroBatchThroughAGroupBeforeTheNextAndReducesEachGroupAfterItsBackward) {
  const Schedule s = generate(params("layered", 2, 3, 2));
  EXPECT_TRUE(reduces_per_group(s));
  ASSERT_EQ(s.ranks.size(), 2u);
  for (const auto& ops : s.ranks)
    EXPECT_EQ(labels(ops),
              "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 BW0.1 BW1.1 BW2.1 R.1 BW0.0 BW1.0 BW2.0 R.0");
}

TEST(Layered, DefaultsToTwoChunksAndRefusesVocabularyParallelism) {
  EXPECT_EQ(default_chunks("layered"), 2);
  EXPECT_EQ(generate(params("layered", 2, 2)).chunks, 2);
  GeneratorParams g = params("layered", 2, 2);
  g.vocab = VocabMode::Vocab1;
  EXPECT_THROW(generate(g), ScheduleError);
}

TEST(GradientReductions, FollowEachGroupsLastWeightGradientPass) {
  // 1f1b, p = 2, m = 3: rank 0 warms up with 1 forward; its last op is BW2.0.
  GeneratorParams g = params("1f1b", 2, 3);
  g.layered_reduction = true;
  const Schedule s = generate(g);
  EXPECT_EQ(labels(s.ranks[0]), "F0.0 F1.0 BW0.0 F2.0 BW1.0 BW2.0 R.0");
  EXPECT_EQ(labels(s.ranks[1]), "F0.0 BW0.0 F1.0 BW1.0 F2.0 BW2.0 R.0");
  // zb-h1 splits B and W: each R follows the rank's last W.
  g.name = "zb-h1";
  for (const auto& ops : generate(g).ranks) {
    ASSERT_FALSE(ops.empty());
    EXPECT_EQ(ops.back().kind, OpKind::R);
    EXPECT_EQ(ops[ops.size() - 2].kind, OpKind::W);
  }
}

TEST(GradientReductions, NeverSplitAnOverlappedPair) {
  GeneratorParams g = params("dualpipe-v", 2, 4);
  g.layered_reduction = true;
  const Schedule s = generate(g);
  for (int r = 0; r < 2; ++r) {
    const auto& ops = s.ranks[static_cast<std::size_t>(r)];
    int reductions = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != OpKind::R) continue;
      ++reductions;
      if (i + 1 < ops.size()) {
        EXPECT_FALSE(ops[i + 1].overlaps_previous) << labels(ops);
      }
    }
    EXPECT_EQ(reductions, 2) << "rank " << r;
  }
}

TEST(GradientReductions, JoinEveryScheduleWithoutDeadlock) {
  for (std::string_view name : schedule_names()) {
    GeneratorParams g = params(std::string(name), 4, 8);
    g.layered_reduction = true;
    SCOPED_TRACE(std::string(name));
    const Schedule s = generate(g);
    std::size_t reductions = 0;
    for (const auto& ops : s.ranks)
      for (const Op& op : ops) reductions += op.kind == OpKind::R ? 1u : 0u;
    EXPECT_EQ(reductions, static_cast<std::size_t>(s.stages * s.chunks)) << name;
  }
}

TEST(GradientReductions, TheValidatorRefusesMisplacedOrMissingOnes) {
  GeneratorParams g = params("1f1b", 2, 2);
  g.layered_reduction = true;
  const Schedule good = generate(g);

  Schedule early = good;  // R.0 before rank 0's last BW
  auto& ops = early.ranks[0];
  std::swap(ops[ops.size() - 1], ops[ops.size() - 2]);
  EXPECT_NE(error_of(early).find("after their reduction (R.0)"), std::string::npos)
      << error_of(early);

  Schedule missing = good;  // rank 1 reduces nothing
  missing.ranks[1].pop_back();
  EXPECT_NE(error_of(missing).find("gradient reduction of chunk 0 is missing on rank 1"),
            std::string::npos)
      << error_of(missing);

  Schedule twice = good;
  twice.ranks[0].push_back({OpKind::R, 0, 0});
  EXPECT_NE(error_of(twice).find("appears more than once"), std::string::npos) << error_of(twice);

  Schedule chunk = good;
  chunk.ranks[0].back().chunk = 1;
  EXPECT_NE(error_of(chunk).find("chunk out of range"), std::string::npos) << error_of(chunk);
}

}  // namespace
}  // namespace pipetune::schedule
