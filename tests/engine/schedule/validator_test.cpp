#include "engine/schedule/validator.hpp"
#include "engine/errors.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/schedule/generators.hpp"

namespace pipetune::schedule {
namespace {

Schedule two_stage_gpipe(int m) {
  Schedule s;
  s.name = "hand";
  s.stages = 2;
  s.microbatches = m;
  s.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < m; ++i) s.ranks[r].push_back({OpKind::F, 0, i});
    for (int i = 0; i < m; ++i) s.ranks[r].push_back({OpKind::BW, 0, i});
  }
  return s;
}

TEST(Validator, AcceptsHandMadeGpipe) {
  EXPECT_NO_THROW(validate(two_stage_gpipe(3)));
}

TEST(Validator, CatchesDeadlockAndNamesStuckOps) {
  Schedule s = two_stage_gpipe(2);
  // Rank 0 wants the backward of micro-batch 0 before it has sent the forward.
  std::swap(s.ranks[0][0], s.ranks[0][2]);
  try {
    validate(s);
    FAIL() << "deadlock not detected";
  } catch (const DeadlockError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 BW0.0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("waits for B(g1, mb0) on rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 F0.0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("waits for F(g0, mb0) on rank 0"), std::string::npos) << msg;
  }
}

TEST(Validator, CatchesMissingAndDuplicateOps) {
  Schedule s = two_stage_gpipe(2);
  s.ranks[1].pop_back();
  EXPECT_THROW(validate(s), ScheduleError);
  s = two_stage_gpipe(2);
  s.ranks[1].push_back({OpKind::F, 0, 1});
  EXPECT_THROW(validate(s), ScheduleError);
}

// The message validate_structure refuses a schedule with ("" when it accepts it).
std::string refusal(const Schedule& s) {
  try {
    validate_structure(s);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(Validator, NamesWhatIsWrongWithAnOpsNumbers) {
  // Each count refusal on its own: where the op is, and why.
  Schedule s = two_stage_gpipe(2);
  EXPECT_EQ(refusal(s), "");
  s.ranks[1][1].microbatch = 2;
  EXPECT_NE(refusal(s).find("rank 1 op 1 (F2.0): micro-batch out of range 0..1"), std::string::npos)
      << refusal(s);
  s = two_stage_gpipe(2);
  s.ranks[0][2].chunk = 1;
  EXPECT_NE(refusal(s).find("rank 0 op 2 (BW0.1): chunk out of range 0..0"), std::string::npos)
      << refusal(s);
  s = two_stage_gpipe(2);
  s.ranks[1][3] = s.ranks[1][2];
  EXPECT_NE(refusal(s).find("rank 1 op 3 (BW0.0): appears more than once"), std::string::npos)
      << refusal(s);
  EXPECT_EQ(refusal(s).find("on this rank"), std::string::npos) << refusal(s);  // a layer's op
  s = two_stage_gpipe(2);
  s.ranks[0].push_back({OpKind::S, 0, 0});
  EXPECT_NE(refusal(s).find("vocabulary op in a schedule without vocabulary parallelism"),
            std::string::npos)
      << refusal(s);

  GeneratorParams params;
  params.name = "1f1b";
  params.stages = 2;
  params.microbatches = 4;
  params.vocab = VocabMode::Vocab2;
  const Schedule vocab = generate(params);
  EXPECT_EQ(refusal(vocab), "");
  s = vocab;
  const auto s0 = std::find(s.ranks[1].begin(), s.ranks[1].end(), Op{OpKind::S, 0, 0});
  ASSERT_NE(s0, s.ranks[1].end());
  s0->chunk = 1;
  EXPECT_NE(refusal(s).find("vocabulary ops carry chunk 0"), std::string::npos) << refusal(s);
  s = vocab;
  s.ranks[1].push_back({OpKind::IB, 0, 3});
  EXPECT_NE(refusal(s).find("(IB3): appears more than once on this rank"), std::string::npos)
      << refusal(s);
}

TEST(Validator, RequiresWAfterSplitB) {
  Schedule s = two_stage_gpipe(1);
  s.ranks[1][1] = {OpKind::B, 0, 0};
  EXPECT_THROW(validate(s), ScheduleError);
  s.ranks[1].push_back({OpKind::W, 0, 0});
  EXPECT_NO_THROW(validate(s));
  // A W before its B can never run.
  std::swap(s.ranks[1][1], s.ranks[1][2]);
  EXPECT_THROW(validate(s), DeadlockError);
}

TEST(Validator, NamesTheFirstBarrierTwoRanksIssueInADifferentOrder) {
  GeneratorParams params;
  params.name = "1f1b";
  params.stages = 2;
  params.microbatches = 4;
  params.vocab = VocabMode::Vocab1;
  Schedule s = generate(params);
  EXPECT_NO_THROW(validate_structure(s));
  // Rank 1 joins C1 of micro-batch 0 after the barrier that follows it on rank 0.
  auto& ops = s.ranks[1];
  const auto is_barrier_op = [](const Op& op) {
    return op.kind == OpKind::S || op.kind == OpKind::T || op.kind == OpKind::IF;
  };
  const auto first_s = std::find(ops.begin(), ops.end(), Op{OpKind::S, 0, 0});
  ASSERT_NE(first_s, ops.end());
  const auto next = std::find_if(first_s + 1, ops.end(), is_barrier_op);
  ASSERT_NE(next, ops.end());
  std::iter_swap(first_s, next);
  try {
    validate_structure(s);
    FAIL() << "barrier order not checked";
  } catch (const ScheduleError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("barrier order differs between ranks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0 issues C1(mb0) as barrier"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 issues"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace pipetune::schedule
