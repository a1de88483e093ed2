// Token slices (Schedule::slices) and the terapipe generator: the op order written out by hand,
// the causal order the validator enforces (forwards in slice order, backwards in reverse), the
// options generate() refuses, and how a sequence is cut into slices.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {
namespace {

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string error_of(const GeneratorParams& p) {
  try {
    generate(p);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

GeneratorParams terapipe(int p, int m, int k) {
  GeneratorParams g;
  g.name = "terapipe";
  g.stages = p;
  g.microbatches = m;
  g.slices = k;
  return g;
}

std::vector<std::string> labels(const std::vector<Op>& ops) {
  std::vector<std::string> out;
  for (const Op& op : ops) out.push_back(op_label(op));
  return out;
}

TEST(Terapipe, EveryRankRunsTheSlicesForwardInOrderThenBackwardInReverse) {
  const Schedule s = generate(terapipe(3, 2, 3));
  EXPECT_EQ(s.slices, 3);
  EXPECT_EQ(s.microbatches, 6);  // units: 2 micro-batches x 3 slices
  EXPECT_EQ(s.data_microbatches(), 2);
  // Unit u = slice u % 3 of micro-batch u / 3: micro-batch 0's slices 2, 1, 0, then 1's.
  const std::vector<std::string> want = {"F0.0",  "F1.0",  "F2.0",  "F3.0",  "F4.0",  "F5.0",
                                         "BW2.0", "BW1.0", "BW0.0", "BW5.0", "BW4.0", "BW3.0"};
  for (int r = 0; r < 3; ++r) EXPECT_EQ(labels(s.ranks[static_cast<std::size_t>(r)]), want);
}

TEST(Terapipe, OneSliceIsGpipe) {
  GeneratorParams g = terapipe(4, 5, 1);
  const Schedule t = generate(g);
  g.name = "gpipe";
  g.slices = 0;
  EXPECT_EQ(t.ranks, generate(g).ranks);
  EXPECT_EQ(default_slices("terapipe"), 4);
  EXPECT_EQ(default_slices("1f1b"), 1);
  GeneratorParams d = terapipe(2, 2, 0);  // the default
  EXPECT_EQ(generate(d).slices, 4);
}

TEST(Terapipe, UnevenSlicesComeFromTheirLengths) {
  GeneratorParams g = terapipe(2, 1, 0);
  g.slice_tokens = {5, 2, 1};
  const Schedule s = generate(g);
  EXPECT_EQ(s.slices, 3);
  EXPECT_EQ(s.slice_tokens, (std::vector<int>{5, 2, 1}));
  EXPECT_DOUBLE_EQ(slice_shape(s, 0).length, 5.0 / 8.0);
  EXPECT_DOUBLE_EQ(slice_shape(s, 0).context, 0.0);
  EXPECT_DOUBLE_EQ(slice_shape(s, 2).length, 1.0 / 8.0);
  EXPECT_DOUBLE_EQ(slice_shape(s, 2).context, 7.0 / 8.0);
  EXPECT_EQ(slice_token_counts(s, 8), (std::vector<std::int64_t>{5, 2, 1}));
  EXPECT_NE(error_of(terapipe(2, 1, 2)), "");
  try {
    slice_token_counts(s, 9);
    ADD_FAILURE() << "9 tokens accepted for slices of 8";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("add up to 8 tokens, but a sequence has 9"),
              std::string::npos)
        << e.what();
  }
}

TEST(Terapipe, EqualSlicesGiveTheExtraTokensToTheFirst) {
  const Schedule s = generate(terapipe(2, 1, 3));
  EXPECT_EQ(slice_token_counts(s, 11), (std::vector<std::int64_t>{4, 4, 3}));
  EXPECT_EQ(slice_token_counts(s, 3), (std::vector<std::int64_t>{1, 1, 1}));
  EXPECT_THROW(slice_token_counts(s, 2), InputError);
  EXPECT_DOUBLE_EQ(slice_shape(s, 4).length, 1.0 / 3.0);  // unit 4: slice 1
  EXPECT_DOUBLE_EQ(slice_shape(s, 4).context, 1.0 / 3.0);
}

TEST(Terapipe, TheValidatorEnforcesTheCausalOrder) {
  {
    Schedule s = generate(terapipe(2, 1, 3));
    std::swap(s.ranks[1][0], s.ranks[1][1]);  // F1 before F0 on rank 1
    EXPECT_NE(error_of(s).find("rank 1 op 0 (F1.0): the forward of token slice 1 runs before its "
                               "micro-batch's slice 0"),
              std::string::npos)
        << error_of(s);
  }
  {
    Schedule s = generate(terapipe(2, 1, 3));
    std::swap(s.ranks[0][3], s.ranks[0][4]);  // BW1 before BW2 on rank 0
    EXPECT_NE(error_of(s).find("rank 0 op 3 (BW1.0): the backward of token slice 1 runs before its "
                               "micro-batch's slice 2"),
              std::string::npos)
        << error_of(s);
  }
  {
    Schedule s = generate(terapipe(2, 2, 2));
    s.slices = 3;  // 4 units are not whole micro-batches of 3 slices
    EXPECT_NE(error_of(s).find("4 units are not whole micro-batches of 3 token slices"),
              std::string::npos)
        << error_of(s);
  }
  {
    Schedule s = generate(terapipe(2, 1, 2));
    s.slice_tokens = {3};
    EXPECT_NE(error_of(s).find("has 1 slice lengths for 2 token slices"), std::string::npos)
        << error_of(s);
    s.slice_tokens = {3, 0};
    EXPECT_NE(error_of(s).find("at least one token"), std::string::npos) << error_of(s);
  }
}

TEST(Terapipe, GenerateRefusesSlicesElsewhereAndWhatTerapipeDoesNotRead) {
  GeneratorParams g = terapipe(2, 2, 2);
  g.name = "1f1b";
  EXPECT_NE(error_of(g).find("token slices (2 per micro-batch) apply to terapipe only, not 1f1b"),
            std::string::npos)
      << error_of(g);
  g = terapipe(2, 2, 2);
  g.chunks = 2;
  EXPECT_NE(error_of(g).find("terapipe supports chunks=1 only"), std::string::npos) << error_of(g);
  g = terapipe(2, 2, 2);
  g.vocab = VocabMode::Vocab1;
  EXPECT_NE(error_of(g).find("vocabulary mode vocab-1"), std::string::npos) << error_of(g);
  g = terapipe(2, 2, 3);
  g.slice_tokens = {1, 2};
  EXPECT_NE(error_of(g).find("2 slice lengths given for 3 token slices"), std::string::npos)
      << error_of(g);
  g = terapipe(2, 2, -1);
  EXPECT_NE(error_of(g).find("token slices must be positive, got -1"), std::string::npos)
      << error_of(g);
  g = terapipe(64, 1 << 16, 8);  // 2^25 forward passes
  EXPECT_NE(error_of(g).find("token slices; at most"), std::string::npos) << error_of(g);
}

}  // namespace
}  // namespace pipetune::schedule
