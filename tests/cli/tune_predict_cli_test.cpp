// `pipetune predict` and `pipetune tune` through the binary: the JSON fields scripts rely on, with
// closed-form checks (tokens/s x iteration time = tokens per iteration; full recomputation
// executes 4/3 of the model FLOPs), and the bad-input rules: unknown presets
// list the valid ones, a GPU count with no factorisation, no feasible plan naming the binding
// constraint, contradictory options; one line, exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune {
namespace {

using testing::expect_input_error;

using testing::run_pipetune;

nlohmann::json predict(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "predict", "--model",        "gpt3-1.7b", "--hardware", "a100-80gb", "--gpus",
      "8",       "--tp",           "1",         "--pp",       "2",         "--dp",
      "4",       "--global-batch", "64",        "--seq",      "2048",      "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::ProcessResult r = run_pipetune(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(PredictCli, JsonFieldsAndClosedForms) {
  const nlohmann::json j = predict({});
  for (const char* key : {"iteration_time", "tokens_per_s", "mfu", "peak_memory_bytes", "feasible",
                          "tflops_per_gpu", "hfu_tflops_per_gpu"})
    EXPECT_TRUE(j.contains(key)) << key << " missing: " << j.dump(2);
  EXPECT_NEAR(j["tokens_per_s"].get<double>() * j["iteration_time"].get<double>(), 64.0 * 2048,
              1e-6 * 64 * 2048);
  // Without recomputation every executed FLOP is a model FLOP.
  EXPECT_NEAR(j["hfu_tflops_per_gpu"].get<double>(), j["tflops_per_gpu"].get<double>(), 1e-9);
  EXPECT_TRUE(j["feasible"].get<bool>());
  // Full recomputation runs each transformer layer's forward twice, the output layer's once:
  // per token, layers L = l (24h^2 + 2sh) (causal attention halved) and output O = 2hV, so the
  // executed FLOPs are (3(L + O) + L) / (3(L + O)) of the model's (gpt3-1.7b: l 24, h 2304,
  // V 51200, s 2048).
  const double h = 2304, s = 2048, l = 24, v = 51200;
  const double layers = l * (24 * h * h + 2 * s * h), output = 2 * h * v;
  const double want = (3 * (layers + output) + layers) / (3 * (layers + output));
  const nlohmann::json full = predict({"--recompute", "full"});
  EXPECT_NEAR(full["hfu_tflops_per_gpu"].get<double>() / full["tflops_per_gpu"].get<double>(), want,
              1e-6);
  EXPECT_GT(full["iteration_time"].get<double>(), j["iteration_time"].get<double>());
}

// --stage-recompute full,none on two stages of 12 layers: half the layers recompute their
// forward, (3(L + O) + L / 2) / (3(L + O)) of the model FLOPs; its time lies between none and full
// everywhere, and the plan it prints says so.
TEST(PredictCli, StageRecomputeClosedForm) {
  const double h = 2304, s = 2048, l = 24, v = 51200;
  const double layers = l * (24 * h * h + 2 * s * h), output = 2 * h * v;
  const double want = (3 * (layers + output) + layers / 2) / (3 * (layers + output));
  const nlohmann::json mixed = predict({"--stage-recompute", "full,none"});
  EXPECT_NEAR(mixed["hfu_tflops_per_gpu"].get<double>() / mixed["tflops_per_gpu"].get<double>(),
              want, 1e-6);
  EXPECT_EQ(mixed["plan"]["stage_recompute"], nlohmann::json::parse(R"(["full", "none"])"));
  EXPECT_LE(mixed["iteration_time"].get<double>(),
            predict({"--recompute", "full"})["iteration_time"].get<double>());
  EXPECT_GT(mixed["iteration_time"].get<double>(), predict({})["iteration_time"].get<double>());
}

TEST(PredictCli, AnInfeasiblePlanSaysWhy) {
  const testing::ProcessResult r = run_pipetune(
      {"predict", "--model", "llama3-405b", "--hardware", "h100-sxm", "--gpus", "8", "--tp", "8",
       "--pp", "1", "--dp", "1", "--global-batch", "8", "--seq", "4096", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["feasible"].get<bool>());
  EXPECT_NE(j["infeasible_reason"].get<std::string>().find("stage"), std::string::npos)
      << j["infeasible_reason"];
}

TEST(TuneCli, JsonResultsAreRankedAndConsistent) {
  const testing::ProcessResult r =
      run_pipetune({"tune", "--model", "gpt3-1.7b", "--hardware", "a100-80gb", "--gpus", "16",
                    "--global-batch", "64", "--seq", "2048", "--top", "5", "--json", "--no-db"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["candidates_evaluated"].get<int>(), 0);
  EXPECT_TRUE(j["pruned"].is_object());
  ASSERT_EQ(j["results"].size(), 5u);
  double last = INFINITY;
  for (const nlohmann::json& res : j["results"]) {
    for (const char* key :
         {"plan", "iteration_time", "tokens_per_s", "mfu", "peak_memory_bytes", "feasible"})
      EXPECT_TRUE(res.contains(key)) << key;
    const double tps = res["tokens_per_s"].get<double>();
    EXPECT_LE(tps, last) << "ranked by throughput";
    last = tps;
    EXPECT_NEAR(tps * res["iteration_time"].get<double>(), 64.0 * 2048, 1e-6 * 64 * 2048);
    const nlohmann::json& p = res["plan"];
    EXPECT_EQ(p["tp"].get<int>() * p["pp"].get<int>() * p["dp"].get<int>(), 16) << p.dump();
  }
}

TEST(TuneCli, BadInput) {
  const std::vector<std::string> base = {"--global-batch", "8", "--seq", "32", "--no-db"};
  auto tune = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "tune");
    args.insert(args.end(), base.begin(), base.end());
    return run_pipetune(args);
  };
  expect_input_error(tune({"--model", "gpt9", "--hardware", "h100-sxm", "--gpus", "8"}),
                     {"unknown model preset 'gpt9'", "valid:", "gpt3-175b", "tiny"});
  expect_input_error(tune({"--model", "tiny", "--hardware", "h200x", "--gpus", "8"}),
                     {"unknown hardware preset 'h200x'", "valid:", "h100-sxm"});
  // 11 is prime: dp=11 does not divide the batch, pp=11 exceeds 8 layers, tp=11 does not divide
  // the 4 heads.
  expect_input_error(
      tune({"--model", "tiny", "--hardware", "h100-sxm", "--gpus", "11", "--nodes-of", "11"}),
      {"no valid factorisation of 11 GPUs"});
  expect_input_error(tune({"--model", "tiny", "--hardware", "h100-sxm", "--gpus", "11"}),
                     {"not a whole number of nodes"});
  // Weights alone exceed 8 x 80 GiB: the smallest plan's memory and the device's are named.
  const testing::ProcessResult none =
      run_pipetune({"tune", "--model", "llama3-405b", "--hardware", "h100-sxm", "--gpus", "8",
                    "--global-batch", "8", "--seq", "4096", "--no-db"});
  expect_input_error(none, {"no feasible plan", "the smallest plan needs", "the device has"});
  expect_input_error(tune({"--model", "tiny", "--hardware", "h100-sxm", "--gpus", "8",
                           "--schedules", "1f1b,bogus"}),
                     {"unknown schedule 'bogus'", "valid:"});
  expect_input_error(
      tune({"--model", "tiny", "--hardware", "h100-sxm", "--gpus", "8", "--top", "0"}), {"--top"});
}

TEST(PredictCli, BadInput) {
  auto predict_args = [](std::vector<std::string> plan) {
    std::vector<std::string> args = {"predict",  "--model", "tiny", "--hardware",
                                     "h100-sxm", "--gpus",  "8",    "--global-batch",
                                     "32",       "--seq",   "32",   "--json"};
    args.insert(args.end(), plan.begin(), plan.end());
    return run_pipetune(args);
  };
  expect_input_error(predict_args({"--tp", "2", "--pp", "2", "--dp", "4"}), {"16", "8 devices"});
  expect_input_error(predict_args({"--tp", "3", "--pp", "1", "--dp", "8"}), {"tp=3", "heads"});
  expect_input_error(
      predict_args({"--tp", "1", "--pp", "2", "--dp", "4", "--schedule", "1f1b", "--chunks", "2"}),
      {"chunks"});
  expect_input_error(predict_args({"--tp", "1", "--pp", "1", "--dp", "8", "--ep", "3"}), {"ep=3"});
  expect_input_error(predict_args({"--tp", "1", "--pp", "1", "--dp", "8", "--recompute", "some"}),
                     {"some", "valid:"});
  expect_input_error(
      predict_args({"--tp", "1", "--pp", "2", "--dp", "4", "--stage-recompute", "full,most"}),
      {"--stage-recompute", "'most'", "valid: none, selective, full"});
  expect_input_error(
      predict_args({"--tp", "1", "--pp", "2", "--dp", "4", "--stage-recompute", "full"}),
      {"--stage-recompute", "needs pp = 2 entries, got 1"});
}

}  // namespace
}  // namespace pipetune
