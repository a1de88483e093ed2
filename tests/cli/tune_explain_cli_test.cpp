// `pipetune tune --explain`: the explanation of rank 1 against rank 2 after the results, in the
// text and in the JSON. References: the search's own scores of the two plans (the JSON's
// results), the plans' fields (a setting is listed exactly when the two plans' values differ),
// and a search with one feasible plan, which has no runner-up.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/run_process.hpp"

namespace pipetune {
namespace {

using testing::run_pipetune;

const std::vector<std::string> kTinyTune = {
    "tune", "--model",     "tiny",       "--hardware",     "h100-sxm",  "--gpus",
    "8",    "--seq",       "32",         "--global-batch", "32",        "--top",
    "2",    "--schedules", "1f1b,gpipe", "--no-db",        "--threads", "1"};

testing::ProcessResult tune(std::vector<std::string> extra) {
  std::vector<std::string> args = kTinyTune;
  args.insert(args.end(), extra.begin(), extra.end());
  return run_pipetune(args);
}

TEST(TuneExplainCli, PrintsTheExplanationAfterTheResults) {
  const testing::ProcessResult r = tune({"--explain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::size_t at = r.out.find("rank 1 (best) against rank 2 (runner-up):\n");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(at, r.out.find("Pareto front"));  // after the results
  const std::string text = r.out.substr(at);
  EXPECT_NE(text.find("best binds on stage "), std::string::npos) << text;
  EXPECT_NE(text.find("runner-up binds on stage "), std::string::npos) << text;
  EXPECT_NE(text.find("settings that differ (best vs runner-up): "), std::string::npos) << text;
  // Without the flag, none.
  const testing::ProcessResult plain = tune({});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("runner-up"), std::string::npos);
}

TEST(TuneExplainCli, JsonCarriesTheExplanationOfTheFirstTwoResults) {
  const testing::ProcessResult r = tune({"--explain", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u);
  ASSERT_TRUE(j.contains("explanation"));
  const nlohmann::json& x = j["explanation"];
  const double best = j["results"][0]["iteration_time"], second = j["results"][1]["iteration_time"];
  // The explanation evaluates the plans the search scored: the same iteration times.
  EXPECT_NEAR(x["best"]["iteration_time"].get<double>(), best, 1e-12 * best);
  EXPECT_NEAR(x["runner_up"]["iteration_time"].get<double>(), second, 1e-12 * second);
  EXPECT_NEAR(x["margin"].get<double>(), second - best, 1e-9 * second);
  EXPECT_NEAR(x["difference"]["total"].get<double>(), best - second, 1e-9 * second);
  for (std::size_t rank = 0; rank < 2; ++rank) {
    const nlohmann::json& e = x[rank == 0 ? "best" : "runner_up"];
    double sum = 0.0;
    for (const char* part :
         {"compute", "tp_comm", "ep_comm", "sharded_comm", "bubble", "data_parallel", "optimizer"})
      sum += e["parts"][part].get<double>();
    EXPECT_NEAR(sum, e["iteration_time"].get<double>(), 1e-9 * second) << rank;
    EXPECT_EQ(e["rank"], rank + 1);
    EXPECT_LT(e["binding_stage"].get<int>(), j["results"][rank]["plan"]["pp"].get<int>());
  }
  // A plan field is listed exactly when the two plans' values differ.
  const nlohmann::json& a = j["results"][0]["plan"];
  const nlohmann::json& b = j["results"][1]["plan"];
  for (const char* field : {"tp", "pp", "dp", "ep", "chunks", "micro_batch_size", "microbatches",
                            "schedule", "zero_stage", "rank_order"}) {
    bool listed = false;
    for (const nlohmann::json& s : x["settings"])
      if (s["setting"] == field) {
        listed = true;
        EXPECT_EQ(s["best"], a[field].is_string() ? a[field] : nlohmann::json(a[field].dump()));
        EXPECT_EQ(s["runner_up"],
                  b[field].is_string() ? b[field] : nlohmann::json(b[field].dump()));
      }
    EXPECT_EQ(listed, a[field] != b[field]) << field;
  }
  EXPECT_FALSE(x["text"].get<std::string>().empty());
  // Without the flag, no explanation.
  const testing::ProcessResult plain = tune({"--json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(nlohmann::json::parse(plain.out).contains("explanation"));
}

TEST(TuneExplainCli, OneFeasiblePlanHasNoRunnerUp) {
  const testing::ProcessResult text = tune({"--explain", "--max-candidates", "1"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("only one feasible plan: there is no runner-up"), std::string::npos)
      << text.out;
  const testing::ProcessResult json = tune({"--explain", "--json", "--max-candidates", "1"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["feasible"], 1);
  EXPECT_EQ(j["explanation"]["best_rank"], 1);
  EXPECT_TRUE(j["explanation"]["runner_up_rank"].is_null());
}

}  // namespace
}  // namespace pipetune
