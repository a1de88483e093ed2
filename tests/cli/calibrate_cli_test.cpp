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

namespace pipetune {
namespace {

// `calibrate --local`: a CPU hardware file from the engine's own kernels, which the other
// commands accept and which makes the cost model describe the engine (fp32 weights: 4 bytes per
// parameter in the memory estimate).
TEST(CalibrateLocalCli, WritesACpuHardwareFileTheOtherCommandsUse) {
  Dir d;
  const std::string out = (d.path / "cpu.toml").string();
  const testing::ProcessResult r = run_pipetune(
      {"calibrate", "--local", "--quick", "--devices", "2", "--threads", "1", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["devices"], 2);
  for (const char* key :
       {"memory_bandwidth", "special_function_rate", "transfer_bandwidth", "transfer_latency"})
    EXPECT_GT(j["measured"][key].get<double>(), 0.0) << key;
  EXPECT_GT(j["hardware"]["peak_flops"].get<double>(), 0.0);
  std::ifstream file(out);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("device = \"cpu\""), std::string::npos) << text;

  const testing::ProcessResult p =
      run_pipetune({"predict", "--model", "tiny", "--hardware", out, "--gpus", "2", "--tp", "1",
                    "--pp", "2", "--dp", "1", "--global-batch", "8", "--seq", "32", "--json"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const nlohmann::json pj = nlohmann::json::parse(p.out);
  EXPECT_GT(pj["iteration_time"].get<double>(), 0.0);
  // The same plan on a GPU keeps bf16 weights (2 bytes per parameter), the CPU engine fp32.
  const testing::ProcessResult g =
      run_pipetune({"predict", "--model", "tiny", "--hardware", "a100-80gb", "--gpus", "2", "--tp",
                    "1", "--pp", "2", "--dp", "1", "--global-batch", "8", "--seq", "32", "--json"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const nlohmann::json gj = nlohmann::json::parse(g.out);
  for (int stage = 0; stage < 2; ++stage)
    EXPECT_DOUBLE_EQ(pj["stages"][stage]["parameter_bytes"].get<double>(),
                     2.0 * gj["stages"][stage]["parameter_bytes"].get<double>())
        << stage;

  // Written once; --local takes no --hardware, and the fitting flags need none of --local's.
  expect_input_error(run_pipetune({"calibrate", "--local", "--quick", "-o", out}), "--force");
  expect_input_error(run_pipetune({"calibrate", "--local", "--hardware", "a100-80gb"}),
                     "--hardware");
  expect_input_error(d.run({"calibrate", "--threads", "2"}), "--hardware is required");
  expect_input_error(d.run({"calibrate", "--hardware", "a100-80gb", "--threads", "2"}),
                     "--threads needs --local");
  expect_input_error(run_pipetune({"calibrate", "--local", "--threads", "0"}), "--threads");
}

}  // namespace
}  // namespace pipetune
