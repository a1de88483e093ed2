// `pipetune calibrate` end to end: runs trained by `pipetune train` into a workspace calibrate a
// hardware file; the fit must not be worse than the start on its own data (Levenberg-Marquardt
// only accepts improving steps), every op kind the runs recorded is a data point, and the
// written hardware file is one the other commands accept. Bad input: one line, exit 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/run_process.hpp"

namespace pipetune {
namespace {

namespace fs = std::filesystem;
using testing::run_pipetune;

struct Dir {
  fs::path path;
  std::string db;
  Dir() {
    char tmpl[] = "/tmp/pipetune_calibrate_XXXXXX";
    path = ::mkdtemp(tmpl);
    db = (path / "w.db").string();
  }
  ~Dir() { fs::remove_all(path); }
  testing::ProcessResult run(std::vector<std::string> args) const {
    args.push_back("--db");
    args.push_back(db);
    return run_pipetune(args);
  }
};

void expect_input_error(const testing::ProcessResult& r, const std::string& text) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
}

TEST(CalibrateCli, FitsTheMeasuredRunsAndWritesAUsableHardwareFile) {
  Dir d;
  for (const std::vector<std::string>& plan :
       {std::vector<std::string>{"--pp", "2", "--tp", "1", "--dp", "1"},
        std::vector<std::string>{"--pp", "1", "--tp", "2", "--dp", "1"}}) {
    std::vector<std::string> args = {"train", "--config",  "tiny-train", "--steps",
                                     "3",     "--threads", "1"};
    args.insert(args.end(), plan.begin(), plan.end());
    ASSERT_EQ(d.run(args).exit_code, 0);
  }
  const std::string out = (d.path / "fitted.toml").string();
  const testing::ProcessResult r =
      d.run({"calibrate", "--hardware", "h100-sxm", "--json", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["runs"].size(), 2u);
  // pp=2: F and BW on two ranks; tp=2: F and BW on one rank.
  EXPECT_EQ(j["after"]["points"], 6) << j.dump(2);
  EXPECT_LE(j["after"]["rms_log"].get<double>(), j["before"]["rms_log"].get<double>());
  for (const auto& [name, v] : j["fitted"].items()) {
    EXPECT_GT(v.get<double>(), 0.0) << name;
    if (name != "gemm_half_flops") {
      EXPECT_LE(v.get<double>(), 1.0) << name;
    }
  }
  // The written file is a hardware file: predict accepts it and uses its fitted table.
  const testing::ProcessResult p =
      run_pipetune({"predict", "--model", "tiny", "--hardware", out, "--gpus", "2", "--tp", "1",
                    "--pp", "2", "--dp", "1", "--global-batch", "8", "--seq", "32", "--json"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_GT(nlohmann::json::parse(p.out)["iteration_time"].get<double>(), 0.0);
  // Never overwritten without --force.
  expect_input_error(d.run({"calibrate", "--hardware", "h100-sxm", "-o", out}), "--force");
}

TEST(CalibrateCli, BadInput) {
  Dir d;
  expect_input_error(d.run({"calibrate", "--hardware", "h100-sxm"}), "no such workspace");
  ASSERT_EQ(d.run({"simulate", "--config", "tiny"}).exit_code, 0);
  expect_input_error(d.run({"calibrate", "--hardware", "h100-sxm"}), "no complete measured runs");
  expect_input_error(d.run({"calibrate", "--hardware", "h100-sxm", "--runs", "1"}), "not measured");
  expect_input_error(d.run({"calibrate", "--hardware", "tpu-v9"}), "valid:");
  expect_input_error(d.run({"calibrate", "--hardware", "h100-sxm", "--fit", "gemm,warp"}), "warp");
}

}  // namespace
}  // namespace pipetune
