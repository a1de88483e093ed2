// Partial pipelining (Schedule::paths) and the skippipe generator: paths that keep both ends
// and balance the middle stages' load (SkipPipe's stage-load constraint, worked out by hand), a
// ratio of 0 that is 1f1b, the validator's refusals, and no deadlock over a range of shapes.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams skippipe(int p, int m, std::optional<double> ratio) {
  GeneratorParams g;
  g.name = "skippipe";
  g.stages = p;
  g.microbatches = m;
  g.skip_ratio = ratio;
  return g;
}

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Skippipe, PathsKeepBothEndsAndShareTheMiddleStagesEvenly) {
  // p = 6, ratio 1/3: each micro-batch skips round(2) of the 4 middle stages; 8 micro-batches
  // make 16 skips, 4 per middle stage, so each middle stage runs 4 of the 8.
  const Schedule s = generate(skippipe(6, 8, 1.0 / 3.0));
  ASSERT_EQ(s.paths.size(), 8u);
  std::vector<int> visits(6, 0);
  for (int mb = 0; mb < 8; ++mb) {
    int skipped = 0;
    for (int g = 0; g < 6; ++g) {
      if (s.visits(g, mb)) ++visits[static_cast<std::size_t>(g)];
      skipped += s.visits(g, mb) ? 0 : 1;
    }
    EXPECT_EQ(skipped, 2) << "micro-batch " << mb;
    EXPECT_TRUE(s.visits(0, mb));
    EXPECT_TRUE(s.visits(5, mb));
  }
  EXPECT_EQ(visits, (std::vector<int>{8, 4, 4, 4, 4, 8}));
  // Micro-batch 0 skips middle stages 1 and 2, micro-batch 1 stages 3 and 4: 0-3-4-5, 0-1-2-5.
  EXPECT_EQ(s.next_group(0, 0), 3);
  EXPECT_EQ(s.previous_group(5, 1), 2);
  EXPECT_EQ(s.next_group(5, 1), -1);
  // A rank runs ops of the micro-batches that visit it only, each F and BW once.
  for (int r = 0; r < 6; ++r)
    EXPECT_EQ(s.ranks[static_cast<std::size_t>(r)].size(),
              2u * static_cast<std::size_t>(visits[static_cast<std::size_t>(r)]));
}

TEST(Skippipe, RatioZeroIsTheFullPipelineIn1f1bOrder) {
  GeneratorParams g = skippipe(4, 8, 0.0);
  const Schedule s = generate(g);
  EXPECT_FALSE(s.partial());
  g.name = "1f1b";
  g.skip_ratio.reset();
  EXPECT_EQ(s.ranks, generate(g).ranks);
  // The default ratio is SkipPipe's 1/3; two stages leave nothing to skip.
  EXPECT_TRUE(generate(skippipe(6, 6, std::nullopt)).partial());
  EXPECT_FALSE(generate(skippipe(2, 4, 0.9)).partial());
}

TEST(Skippipe, EveryShapeIsFreeOfDeadlock) {
  for (int p : {3, 4, 5, 8})
    for (int m : {1, 2, 5, 8, 13})
      for (double ratio : {0.1, 0.25, 0.5, 0.75, 0.99})
        EXPECT_NO_THROW(generate(skippipe(p, m, ratio)))
            << "p=" << p << " m=" << m << " ratio=" << ratio;
}

TEST(Skippipe, TheValidatorRefusesPathsWithoutTheirEndsAndOpsOfSkippedStages) {
  const auto refuses = [](const Schedule& s, const std::string& want) {
    EXPECT_NE(error_of(s).find(want), std::string::npos) << error_of(s);
  };
  {
    Schedule s = generate(skippipe(4, 4, 0.5));  // every path 0-3
    s.paths[0] = {3};
    refuses(s,
            "micro-batch 0's path does not start with layer group 0 (the first, with the "
            "embedding): a path keeps both ends");
    s.paths[0] = {0};
    refuses(s, "micro-batch 0's path does not end with layer group 3 (the last, with the loss)");
    s.paths[0] = {0, 3, 3};
    refuses(s, "micro-batch 0's path visits layer group 3 twice");
    s.paths[0] = {0, 4};
    refuses(s, "micro-batch 0's path names layer group 4 of 4");
  }
  {
    Schedule s = generate(skippipe(4, 4, 0.5));
    s.paths[2] = {0, 1, 3};  // micro-batch 2 now visits group 1, which has no ops of it
    refuses(s, "F of micro-batch 2 chunk 0 is missing on rank 1");
  }
  {
    // One middle stage each: micro-batch 0 skips group 1, micro-batch 1 group 2, ...
    Schedule s = generate(skippipe(4, 4, 0.25));
    ASSERT_EQ(s.paths[1], (std::vector<int>{0, 1, 3}));
    s.paths[1] = {0, 3};  // micro-batch 1 skips group 1 too, whose rank still runs it
    refuses(s, "micro-batch 1 skips chunk 0 on rank 1, which still runs an op");
    s.paths.pop_back();
    refuses(s, "has 3 paths for 4 micro-batches");
  }
}

TEST(Skippipe, GenerateRefusesARatioElsewhereOrOutOfRange) {
  GeneratorParams g = skippipe(4, 4, 0.25);
  g.name = "1f1b";
  try {
    generate(g);
    ADD_FAILURE() << "a skip ratio on 1f1b";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "a skip ratio applies to skippipe and skippipe-ca only, not 1f1b"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(generate(skippipe(4, 4, 1.0)), InputError);
  EXPECT_EQ(skips_stages("skippipe"), true);
  EXPECT_EQ(skips_stages("skippipe-ca"), true);
  EXPECT_EQ(skips_stages("gpipe"), false);
}

}  // namespace
}  // namespace pipetune::schedule
