// `pipetune predict --config RUN --against STORED`: each stage's predicted compute beside the
// stored run's, checked against the two commands that compute each side on their own
// (`simulate --config --json` for the prediction, `report --json` for the measurement). What
// is refused beside it: tests/cli/hostile_answers_cli_test.cpp.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

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

// A two-stage run on the CPU engine with `recompute` for every stage or `stage_recompute`.
std::string cpu_pp2(const Scratch& s, const std::string& name, const std::string& recompute) {
  const std::string path = (s.dir / (name + ".toml")).string();
  std::ofstream(path) << "model = \"tiny\"\n[cluster]\nhardware = \"cpu-dev-2core\"\n"
                         "devices = 2\n[plan]\npp = 2\nmicro_batch_size = 4\nmicrobatches = 4\n"
                      << recompute << "\n";
  return path;
}

// Per stage: the peak memory beside the prediction's, each side against the command that computes
// it alone (`report --json` per rank, `predict --config --json` per stage); with per-stage
// recomputation [full, none], stage 0 measures and predicts the activations of the run where
// every stage recomputes fully, stage 1 those of the run without recomputation.
TEST(PredictAgainst, PeakMemoryPerStageWithEachStagesOwnRecomputation) {
  Scratch s;
  const std::map<std::string, std::string> runs = {
      {"mixed", cpu_pp2(s, "mixed", "stage_recompute = [\"full\", \"none\"]")},
      {"full", cpu_pp2(s, "full", "recompute = \"full\"")},
      {"none", cpu_pp2(s, "none", "recompute = \"none\"")}};
  std::map<std::string, nlohmann::json> against, predicted;
  int id = 0;
  for (const auto& [name, run] : runs) {
    SCOPED_TRACE(name);
    ASSERT_EQ(run_pipetune({"train", "--config", run, "--steps", "2", "--db", s.db}).exit_code, 0);
    const std::string stored = std::to_string(++id);
    against[name] = json_of(
        run_pipetune({"predict", "--config", run, "--against", stored, "--db", s.db, "--json"}));
    predicted[name] = json_of(run_pipetune({"predict", "--config", run, "--json"}));
    const auto rep = json_of(run_pipetune({"report", stored, "--db", s.db, "--json"}));
    ASSERT_EQ(against[name].at("stages").size(), 2u);
    for (std::size_t stage = 0; stage < 2; ++stage) {
      const auto& g = against[name].at("stages")[stage];
      const auto& p = predicted[name].at("stages")[stage];
      EXPECT_DOUBLE_EQ(g.at("predicted_peak_memory_bytes").get<double>(),
                       p.at("peak_memory_bytes").get<double>());
      EXPECT_DOUBLE_EQ(g.at("predicted_activation_bytes").get<double>(),
                       p.at("activation_bytes").get<double>());
      double peak = 0.0;
      for (const auto& r : rep.at("stages"))
        if (r.at("stage") == static_cast<int>(stage))
          peak = std::max(peak, r.at("peak_memory_bytes").get<double>());
      EXPECT_GT(peak, 0.0);
      EXPECT_DOUBLE_EQ(g.at("measured_peak_memory_bytes").get<double>(), peak);
      const double m = peak, q = g.at("predicted_peak_memory_bytes").get<double>();
      EXPECT_NEAR(g.at("peak_memory_error").get<double>(), (m - q) / q, 1e-9);
    }
  }
  for (const auto& [stage, uniform] : {std::pair<std::size_t, std::string>{0, "full"},
                                       std::pair<std::size_t, std::string>{1, "none"}}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const auto& got = against["mixed"].at("stages")[stage];
    const auto& want = against[uniform].at("stages")[stage];
    for (const char* key : {"measured_activation_bytes", "predicted_activation_bytes"})
      EXPECT_DOUBLE_EQ(got.at(key).get<double>(), want.at(key).get<double>()) << key;
  }
  // Not vacuous: full recomputation keeps less on stage 0 than none does.
  EXPECT_LT(against["full"].at("stages")[0].at("measured_activation_bytes").get<double>(),
            against["none"].at("stages")[0].at("measured_activation_bytes").get<double>());
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
  EXPECT_NE(flags.err.find("--tp (or --stage-tp) is required (or --config RUN)"), std::string::npos)
      << flags.err;
  const auto mixed = run_pipetune({"predict", "--config", "tiny-train", "--tp", "2"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
}

}  // namespace
}  // namespace pipetune::testing
