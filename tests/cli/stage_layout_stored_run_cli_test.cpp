// A stored run with per-stage layouts (stages of different tp) read back: `report` names each
// rank's stage, and `predict --against` averages each stage over its own ranks. The stages are
// listed by hand: stage_tp [2, 1, 1], dp 1 puts ranks 0 and 1 on stage 0, rank 2 on stage 1
// and rank 3 on stage 2 (not rank / (tp * dp) = rank / 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

using Scratch = ScratchWorkspace;

nlohmann::json json_of(const ProcessResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

// tiny on the CPU engine's hardware: 3 stages of tp 2, 1 and 1 on 4 devices.
std::string wider_first_stage(const Scratch& s) {
  const std::string path = (s.dir / "stage-tp-211.toml").string();
  std::ofstream(path) << "model = \"tiny\"\n[cluster]\nhardware = \"cpu-dev-2core\"\n"
                         "devices = 4\n[plan]\npp = 3\ndp = 1\nstage_tp = [2, 1, 1]\n"
                         "micro_batch_size = 2\nmicrobatches = 6\nschedule = \"1f1b\"\n";
  return path;
}

TEST(StageLayoutStoredRun, ReportAndPredictAgainstPutRanksInTheirStages) {
  Scratch s;
  const std::string run = wider_first_stage(s);
  ASSERT_EQ(run_pipetune({"train", "--config", run, "--steps", "2", "--db", s.db}).exit_code, 0);

  const auto rep = json_of(run_pipetune({"report", "1", "--db", s.db, "--json"}));
  ASSERT_TRUE(rep.at("pipeline").get<bool>());
  std::map<int, int> stage_of;
  for (const auto& r : rep.at("stages")) stage_of[r.at("rank").get<int>()] = r.at("stage");
  EXPECT_EQ(stage_of, (std::map<int, int>{{0, 0}, {1, 0}, {2, 1}, {3, 2}}));

  const auto got =
      json_of(run_pipetune({"predict", "--config", run, "--against", "1", "--db", s.db, "--json"}));
  ASSERT_EQ(got.at("stages").size(), 3u);
  const int ranks[] = {2, 1, 1};
  for (int stage = 0; stage < 3; ++stage) {
    const auto& g = got.at("stages")[static_cast<std::size_t>(stage)];
    EXPECT_EQ(g.at("ranks"), ranks[stage]) << "stage " << stage;
    double compute = 0.0;  // the report's compute of the stage's ranks, averaged
    for (const auto& r : rep.at("stages"))
      if (r.at("stage") == stage) compute += r.at("compute").get<double>();
    EXPECT_NEAR(g.at("measured_compute").get<double>(), compute / ranks[stage], 1e-12);
  }
}

}  // namespace
}  // namespace pipetune::testing
