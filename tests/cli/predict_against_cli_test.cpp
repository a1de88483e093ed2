// `pipetune predict --config RUN --against STORED`: each stage's predicted compute beside the
// stored run's, checked against the two commands that compute each side on their own
// (`simulate --config --json` for the prediction, `report --json` for the measurement). What
// is refused beside it: tests/cli/hostile_answers_cli_test.cpp.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

using Scratch = ScratchWorkspace;

nlohmann::json json_of(const ProcessResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

// tiny-train's plan priced on this machine's CPU engine (the cpu-dev-2core hardware): what the
// measured run ran on, so the two compare (a GPU's prediction does not).
std::string cpu_tiny_train(const Scratch& s) {
  const std::string path = (s.dir / "tiny-train-cpu.toml").string();
  std::ofstream(path) << "model = \"tiny\"\n[cluster]\nhardware = \"cpu-dev-2core\"\n"
                         "devices = 8\n[plan]\ntp = 2\npp = 2\ndp = 2\nmicro_batch_size = 4\n"
                         "microbatches = 8\nschedule = \"1f1b\"\n";
  return path;
}

TEST(PredictAgainst, StagesPairThePredictionWithTheMeasuredRun) {
  Scratch s;
  const std::string run = cpu_tiny_train(s);
  ASSERT_EQ(run_pipetune({"train", "--config", run, "--steps", "2", "--db", s.db}).exit_code, 0);
  const auto got =
      json_of(run_pipetune({"predict", "--config", run, "--against", "1", "--db", s.db, "--json"}));
  const auto sim = json_of(run_pipetune({"simulate", "--config", run, "--json", "--no-db"}));
  const auto rep = json_of(run_pipetune({"report", "1", "--db", s.db, "--json"}));

  ASSERT_EQ(got.at("stages").size(), 2u);
  EXPECT_NEAR(got.at("predicted_iteration").get<double>(),
              sim.at("iteration").at("iteration_time").get<double>(), 1e-12);
  EXPECT_NEAR(got.at("measured_iteration").get<double>(), rep.at("iteration_time").get<double>(),
              1e-12);
  for (int stage = 0; stage < 2; ++stage) {
    const auto& g = got.at("stages")[static_cast<std::size_t>(stage)];
    EXPECT_EQ(g.at("ranks"), 4);  // tp * dp
    EXPECT_NEAR(g.at("predicted_compute").get<double>(),
                sim.at("stages")[static_cast<std::size_t>(stage)].at("busy").get<double>(), 1e-12);
    double compute = 0.0;
    int ranks = 0;
    for (const auto& r : rep.at("stages"))
      if (r.at("stage") == stage) {
        compute += r.at("compute").get<double>();
        ++ranks;
      }
    ASSERT_EQ(ranks, 4);
    EXPECT_NEAR(g.at("measured_compute").get<double>(), compute / ranks, 1e-12);
    const double p = g.at("predicted_compute").get<double>(), m = compute / ranks;
    EXPECT_NEAR(g.at("compute_error").get<double>(), (m - p) / p, 1e-9);
  }
}

TEST(PredictAgainst, ARunWithoutAPlanOrWithAnotherPlanIsRefused) {
  Scratch s;
  ASSERT_EQ(
      run_pipetune({"train", "--steps", "1", "--tp", "1", "--pp", "2", "--dp", "1", "--db", s.db})
          .exit_code,
      0);
  const auto other =
      run_pipetune({"predict", "--config", cpu_tiny_train(s), "--against", "1", "--db", s.db});
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("run 1 (tiny tp=1 pp=2 dp=1 1f1b) is not a run of "), std::string::npos)
      << other.err;
  EXPECT_NE(other.err.find("tiny-train-cpu.toml: tp: 1 vs 2"), std::string::npos) << other.err;
  const auto flags = run_pipetune({"predict", "--model", "tiny", "--hardware", "h100-sxm", "--gpus",
                                   "8", "--global-batch", "64", "--pp", "2"});
  EXPECT_EQ(flags.exit_code, 2) << flags.err;
  EXPECT_NE(flags.err.find("--tp is required (or --config RUN)"), std::string::npos) << flags.err;
  const auto mixed = run_pipetune({"predict", "--config", "tiny-train", "--tp", "2"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
}

}  // namespace
}  // namespace pipetune::testing
