// `pipetune simulate --config` and `pipetune presets` end to end, including bad run files.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

class ConfigCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pipetune_cfg_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(ConfigCli, DefaultRunReportsEveryStageWithBytes) {
  const auto r = run_pipetune({"simulate", "--config", "default", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("time_unit"), "s");
  EXPECT_GT(j.at("iteration_time").get<double>(), 0.0);
  const int p = j.at("stages_count").get<int>();
  ASSERT_EQ(static_cast<int>(j.at("stages").size()), p);
  for (const auto& st : j["stages"]) {
    EXPECT_GT(st.at("peak_activation_bytes").get<double>(), 0.0);
    EXPECT_GE(st.at("bubble_ratio").get<double>(), 0.0);
    EXPECT_LT(st.at("bubble_ratio").get<double>(), 1.0);
  }
}

TEST_F(ConfigCli, DefaultRunHumanReport) {
  const auto r = run_pipetune({"simulate", "--config", "default"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("peak act bytes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 0 compute |"), std::string::npos) << r.out;
}

TEST_F(ConfigCli, EveryRunPresetSimulates) {
  const auto list = run_pipetune({"presets", "runs", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  const auto names = nlohmann::json::parse(list.out).at("runs");
  ASSERT_FALSE(names.empty());
  for (const auto& n : names) {
    const auto r = run_pipetune({"simulate", "--config", n.get<std::string>(), "--json"});
    EXPECT_EQ(r.exit_code, 0) << n << ": " << r.err;
  }
}

TEST_F(ConfigCli, PathToRunFileWorks) {
  const std::string run = write("mine.toml",
                                "model = \"tiny\"\n"
                                "[cluster]\nhardware = \"a100-80gb\"\ndevices = 4\n"
                                "[plan]\npp = 4\nmicroboatches = 8\n");
  // A typo in a key is an error naming the key, the file and the line.
  auto r = run_pipetune({"simulate", "--config", run});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("microboatches"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mine.toml:7:"), std::string::npos) << r.err;

  const std::string good = write("good.toml",
                                 "model = \"tiny\"\n"
                                 "[cluster]\nhardware = \"a100-80gb\"\ndevices = 4\n"
                                 "[plan]\npp = 4\nmicrobatches = 8\nschedule = \"zb-h1\"\n");
  r = run_pipetune({"simulate", "--config", good, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("schedule"), "zb-h1");
}

// Every plan key of a run file is applied. dp and zero_stage do not change the
// pipeline, so they must show in the whole iteration: the pipeline plus the exposed
// data-parallel communication plus the optimizer step, and the memory of each stage.
TEST_F(ConfigCli, DataParallelAndZeroStageEnterTheIteration) {
  const auto run_file = [&](int zero) {
    return write("zero" + std::to_string(zero) + ".toml",
                 "model = \"llama3-8b\"\ncluster = \"dgx-h100-8\"\n[plan]\ntp = 2\npp = 2\n"
                 "dp = 2\nmicrobatches = 8\nrecompute = \"selective\"\nzero_stage = " +
                     std::to_string(zero) + "\n");
  };
  std::vector<nlohmann::json> it;
  for (int zero : {0, 1, 3}) {
    const auto r = run_pipetune({"simulate", "--config", run_file(zero), "--json", "--no-db"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const auto& i = j.at("iteration");
    EXPECT_EQ(i.at("dp"), 2);
    EXPECT_EQ(i.at("zero_stage"), zero);
    // The pipeline part is the simulated schedule this command reports.
    EXPECT_DOUBLE_EQ(i.at("pipeline_time").get<double>(), j.at("iteration_time").get<double>());
    // Exposed only: on one NVSwitch node the gradient reduction hides behind the backward.
    EXPECT_GE(i.at("data_parallel_time").get<double>(), 0.0);
    EXPECT_NEAR(i.at("iteration_time").get<double>(),
                i.at("pipeline_time").get<double>() + i.at("data_parallel_time").get<double>() +
                    i.at("optimizer_time").get<double>(),
                1e-12);
    it.push_back(i);
  }
  // ZeRO-1 shards the optimizer state over dp=2, ZeRO-3 also gradients and weights.
  const auto stage0 = [](const nlohmann::json& i, const char* what) {
    return i.at("memory").at("stages").at(0).at(what).get<double>();
  };
  EXPECT_NEAR(stage0(it[1], "optimizer"), stage0(it[0], "optimizer") / 2.0,
              1e-6 * stage0(it[0], "optimizer"));
  EXPECT_LT(stage0(it[2], "gradients"), stage0(it[1], "gradients"));
  EXPECT_LT(stage0(it[2], "parameters"), stage0(it[1], "parameters"));

  const auto human = run_pipetune({"simulate", "--config", run_file(1), "--no-db", "--no-gantt"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("whole iteration, dp=2 ep=1 ZeRO-1"), std::string::npos) << human.out;
}

TEST_F(ConfigCli, MalformedTomlNamesFileAndLine) {
  const std::string bad = write("broken.toml", "model = \"tiny\"\n[plan\npp = 2\n");
  const auto r = run_pipetune({"simulate", "--config", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("broken.toml:2:"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST_F(ConfigCli, WrongTypeNamesKey) {
  const std::string bad =
      write("typed.toml",
            "model = \"tiny\"\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 2\n"
            "[plan]\npp = \"two\"\n");
  const auto r = run_pipetune({"simulate", "--config", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("typed.toml:6:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'plan.pp'"), std::string::npos) << r.err;
}

TEST_F(ConfigCli, BrokenPlanRuleIsNamed) {
  const std::string bad =
      write("rule.toml",
            "model = \"tiny\"\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 3\n"
            "[plan]\ntp = 3\n");
  const auto r = run_pipetune({"simulate", "--config", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("tp=3 does not divide heads=4"), std::string::npos) << r.err;
}

TEST_F(ConfigCli, UnknownPresetListsValidNames) {
  const auto r = run_pipetune({"simulate", "--config", "no-such-run"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("default"), std::string::npos) << r.err;
}

TEST_F(ConfigCli, ConfigExcludesScheduleFlags) {
  const auto r = run_pipetune({"simulate", "--config", "default", "--schedule", "1f1b"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
}

TEST_F(ConfigCli, PresetsListsEveryKind) {
  const auto r = run_pipetune({"presets", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* kind : {"models", "hardware", "clusters", "runs"}) EXPECT_TRUE(j.contains(kind));
  const auto& models = j.at("models");
  for (const char* m : {"tiny", "tiny-moe", "llama3-8b", "gpt3-1.7b", "mixtral-8x7b"})
    EXPECT_NE(std::find(models.begin(), models.end(), m), models.end()) << m;
  const auto& hw = j.at("hardware");
  for (const char* h : {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x"})
    EXPECT_NE(std::find(hw.begin(), hw.end(), h), hw.end()) << h;
  const auto bad = run_pipetune({"presets", "gadgets"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(count_lines(bad.err), 1) << bad.err;
}

}  // namespace
}  // namespace pipetune::testing
