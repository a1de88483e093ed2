// What a rank holds whole under ZeRO-2 and 3 with layer-group reductions (group_holds.hpp),
// worked out by hand: the runs a chunk's values are gathered for (F, B and BW of one chunk; W, R
// and vocabulary ops pass through; an overlapped pair's ops gather for themselves), and the most
// groups whose full gradients are held at once (accumulating, or reduced and freed at the next
// R). The layered schedule's 2v - 1 runs are the paper's one gather per layer and pass.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/group_holds.hpp"
#include "support/schedule_helpers.hpp"

namespace pipetune::schedule {
namespace {

Op op(OpKind kind, int chunk, int mb = 0, bool overlaps_previous = false) {
  return {kind, static_cast<std::int16_t>(chunk), mb, overlaps_previous};
}

// "g" where a run starts, "r" where it ends, "." elsewhere: one character per op.
std::string marks(const GroupHolds& h) {
  std::string s;
  for (std::size_t i = 0; i < h.gather_before.size(); ++i)
    s += h.gather_before[i] && h.release_after[i] ? 'x'
         : h.gather_before[i]                     ? 'g'
         : h.release_after[i]                     ? 'r'
                                                  : '.';
  return s;
}

TEST(GroupHolds, LayeredGathersEachGroupOncePerPassAndTheLastGroupOnce) {
  GeneratorParams g = testing::params("layered", 1, 2);
  g.chunks = 3;
  const Schedule s = generate(g);
  // F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 BW2.0 BW2.1 R.2 BW1.0 BW1.1 R.1 BW0.0 BW0.1 R.0
  const GroupHolds h = group_holds(s.ranks[0], s.chunks);
  EXPECT_EQ(marks(h), "grgrg..r.gr.gr.");
  EXPECT_EQ(h.runs, 2 * 3 - 1);
  // BW1 accumulates while R.2 runs; R.1 frees group 2 and BW0 accumulates beside group 1's.
  EXPECT_EQ(h.peak_gradient_groups, 2);
}

TEST(GroupHolds, WeightGradientReductionAndVocabularyOpsDoNotEndARun) {
  const GroupHolds h = group_holds(
      {op(OpKind::F, 0), op(OpKind::W, 1), op(OpKind::R, 1), op(OpKind::S, 0), op(OpKind::B, 0, 1)},
      2);
  EXPECT_EQ(marks(h), "g...r");
  EXPECT_EQ(h.runs, 1);
  // W1 opened group 1's gradients; R.1 hands them on, and nothing frees them before the end.
  EXPECT_EQ(h.peak_gradient_groups, 1);
}

TEST(GroupHolds, AnOverlappedPairGathersForItselfAndSplitsRuns) {
  const GroupHolds h = group_holds(
      {op(OpKind::F, 0, 0), op(OpKind::F, 0, 1), op(OpKind::BW, 1, 0, true), op(OpKind::F, 0, 2)},
      2);
  // F0.0 runs alone (F0.1 is the pair's first op), the pair gathers per op, F0.2 starts anew.
  EXPECT_EQ(marks(h), "x..x");
  EXPECT_EQ(h.runs, 2);
}

TEST(GroupHolds, InterleavedGroupsAccumulateTogetherUntilTheirReductions) {
  // Chunk 1's backward, then chunk 0's, then both reductions: both held at once.
  const GroupHolds h = group_holds({op(OpKind::B, 1), op(OpKind::W, 1), op(OpKind::B, 0),
                                    op(OpKind::W, 0), op(OpKind::R, 1), op(OpKind::R, 0)},
                                   2);
  EXPECT_EQ(marks(h), "x.x...");
  EXPECT_EQ(h.runs, 2);
  EXPECT_EQ(h.peak_gradient_groups, 2);
}

}  // namespace
}  // namespace pipetune::schedule
