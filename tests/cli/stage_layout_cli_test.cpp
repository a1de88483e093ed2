// Per-stage layouts (issue 46 point 5) through the binary: `--stage-tp` on predict and train
// (tp taken from its first entry, predict's dp from sum(stage_tp)), the plan they print, and the
// bad input: a count that is not pp, an entry that is not a TP degree, a --tp that is not the
// first stage's, GPUs that sum(stage_tp) does not divide; one line, exit 2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune {
namespace {

using testing::expect_input_error;
using testing::run_pipetune;

// llama3-8b (32 heads, 8 KV heads, FFN 14336, untied) on 16 H100s, 4 stages, global batch 16.
std::vector<std::string> predict_args(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "predict", "--model", "llama3-8b",      "--hardware", "h100-sxm", "--gpus", "16",
      "--pp",    "4",       "--global-batch", "16",         "--seq",    "2048",   "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// 16 GPUs over stages of 4, 2, 1 and 1 TP ranks: dp = 16 / 8 = 2, tp = 4 (the first stage's).
TEST(StageLayoutCli, PredictTakesTpAndDpFromTheLayout) {
  const testing::ProcessResult r = run_pipetune(predict_args({"--stage-tp", "4,2,1,1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plan"]["stage_tp"], nlohmann::json::parse("[4, 2, 1, 1]"));
  EXPECT_EQ(j["plan"]["tp"], 4);
  EXPECT_EQ(j["plan"]["dp"], 2);
  EXPECT_EQ(j["gpus"], 16);
  // --tp that agrees with the first entry is the same plan.
  const testing::ProcessResult same =
      run_pipetune(predict_args({"--tp", "4", "--stage-tp", "4,2,1,1"}));
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(nlohmann::json::parse(same.out)["plan"], j["plan"]);
}

TEST(StageLayoutCli, PredictRefusesBadLayouts) {
  expect_input_error(run_pipetune(predict_args({"--stage-tp", "4,2,1"})),
                     {"--stage-tp: needs pp = 4 entries, got 3"});
  expect_input_error(run_pipetune(predict_args({"--stage-tp", "4,x,1,1"})),
                     {"--stage-tp: ", "'x'"});
  expect_input_error(run_pipetune(predict_args({"--stage-tp", "4,0,1,1"})), {"--stage-tp: "});
  expect_input_error(run_pipetune(predict_args({"--tp", "2", "--stage-tp", "4,2,1,1"})),
                     {"--tp 2", "--stage-tp 4,2,1,1"});
  // 16 GPUs over 4 + 2 + 1 + 2 = 9 per replica.
  expect_input_error(run_pipetune(predict_args({"--stage-tp", "4,2,1,2"})),
                     {"sum(--stage-tp) = 9", "--gpus 16"});
  // Neither --tp nor --stage-tp.
  expect_input_error(run_pipetune(predict_args({})), {"--tp"});
  // What the resharding does not cover: validate's rule, naming stage_tp.
  expect_input_error(run_pipetune(predict_args({"--stage-tp", "4,2,1,1", "--sequence-parallel"})),
                     {"stage_tp", "sequence_parallel"});
}

// tiny-train (tp=2 pp=2 dp=2): --stage-tp 2,1 puts 2 x 2 + 1 x 2 = 6 ranks to work.
TEST(StageLayoutCli, TrainShowsTheLayout) {
  const testing::ProcessResult j = run_pipetune(
      {"train", "--stage-tp", "2,1", "--steps", "1", "--microbatches", "2", "--no-db", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json out = nlohmann::json::parse(j.out);
  EXPECT_EQ(out["plan"]["stage_tp"], nlohmann::json::parse("[2, 1]"));
  EXPECT_EQ(out["plan"]["tp"], 2);
  EXPECT_EQ(out["plan"]["world"], 6);
  EXPECT_EQ(out["ranks"].size(), 6u);
  const testing::ProcessResult text = run_pipetune(
      {"train", "--stage-tp", "2,1", "--steps", "1", "--microbatches", "2", "--no-db"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("tp per stage 2/1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("training tiny on 6 "), std::string::npos) << text.out;
}

TEST(StageLayoutCli, TrainRefusesBadLayouts) {
  expect_input_error(run_pipetune({"train", "--stage-tp", "2,1,1", "--steps", "1", "--no-db"}),
                     {"--stage-tp: needs pp = 2 entries, got 3"});
  expect_input_error(
      run_pipetune({"train", "--tp", "1", "--stage-tp", "2,1", "--steps", "1", "--no-db"}),
      {"--tp 1", "--stage-tp 2,1"});
  expect_input_error(run_pipetune({"train", "--stage-tp", "2;1", "--steps", "1", "--no-db"}),
                     {"--stage-tp: "});
}

}  // namespace
}  // namespace pipetune
