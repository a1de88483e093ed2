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

#include "db/import/nsys_pipeline_export.hpp"
#include "support/cli_expect.hpp"
#include "support/required_data.hpp"
#include "support/run_process.hpp"

namespace pipetune {
namespace {

using testing::expect_input_error;

namespace fs = std::filesystem;
using testing::run_pipetune;

using Dir = testing::ScratchWorkspace;

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
  const std::string out = d.path("fitted.toml");
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

// A GPipe run of 2 stages and 4 micro-batches as Nsight Systems would capture it from
// Megatron-LM: F takes 2 ms and a backward 4 ms on each stage.
std::vector<db::testing::PipelineOp> gpipe_ops() {
  const std::int64_t f = 2'000'000, b = 4'000'000;
  std::vector<db::testing::PipelineOp> ops;
  for (int mb = 0; mb < 4; ++mb) {
    ops.push_back({0, true, mb, mb * f, (mb + 1) * f});
    ops.push_back({1, true, mb, (mb + 1) * f, (mb + 2) * f});
  }
  const std::int64_t backward_start = 5 * f;
  for (int mb = 0; mb < 4; ++mb) {  // backwards in micro-batch order, as pipetune's GPipe
    ops.push_back({1, false, mb, backward_start + mb * b, backward_start + (mb + 1) * b});
    ops.push_back({0, false, mb, backward_start + (mb + 1) * b, backward_start + (mb + 2) * b});
  }
  return ops;
}

// End to end: an imported profile with its plan pairs op for op with
// the plan's prediction (ops timed by their kernels) and is a calibration input (its
// kernels' GPU time by phase); without a plan, or without phases, it is refused by name.
TEST(CalibrateCli, ImportedRunsWithTheirPlanPairWithThePredictionAndCalibrate) {
  Dir d;
  const std::string file = d.path("pipeline.sqlite");
  db::testing::write_pipeline_export(file, gpipe_ops());
  const testing::ProcessResult imported =
      d.run({"import-nsys", file, "--model", "tiny", "--hardware", "h100-sxm", "--tp", "1", "--pp",
             "2", "--dp", "1", "--microbatches", "4", "--schedule", "gpipe"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.out.find("attributed to the range that launched them: 16 of 16 (16 in a "
                              "pipeline phase)"),
            std::string::npos)
      << imported.out;
  const testing::ProcessResult report = d.run({"report", "1"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("GPU compute time by pipeline phase"), std::string::npos) << report.out;

  const testing::ProcessResult fit =
      d.run({"calibrate", "--hardware", "h100-sxm", "--runs", "1", "--fit", "gemm", "--json"});
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  const auto j = nlohmann::json::parse(fit.out);
  EXPECT_EQ(j["after"]["points"], 4) << j.dump(2);  // F and BW on each of 2 stages
  for (const char* kind : {"F", "BW"}) {
    const auto& e = j["errors"]["by_kind"][kind];
    ASSERT_TRUE(e.is_object()) << j.dump(2);
    EXPECT_EQ(e["points"], 2);
    EXPECT_LE(e["mape_after"].get<double>(), e["mape_before"].get<double>()) << kind;
  }
  for (const char* stage : {"0", "1"})
    EXPECT_EQ(j["errors"]["by_stage"][stage]["points"], 2) << j.dump(2);
  // The points are the mean kernel time per op: F 2 ms, BW 4 ms.
  for (const auto& p : j["points"]) {
    const std::string label = p["label"];
    EXPECT_DOUBLE_EQ(p["measured"].get<double>(), label.ends_with(" F") ? 2e-3 : 4e-3) << label;
  }
  const testing::ProcessResult human =
      d.run({"calibrate", "--hardware", "h100-sxm", "--runs", "1", "--fit", "gemm"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("kind BW"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("stage 1"), std::string::npos) << human.out;

  // The plan's prediction pairs with the import op for op (same GPipe order), ops timed by
  // their kernels: every F took 2 ms and every BW 4 ms on the GPU.
  const std::string run_file = d.path("run.toml");
  {
    std::ofstream(run_file) << "model = \"tiny\"\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 2\n"
                               "[plan]\ntp = 1\npp = 2\ndp = 1\nmicrobatches = 4\n"
                               "schedule = \"gpipe\"\n";
  }
  ASSERT_EQ(d.run({"simulate", "--config", run_file, "--no-gantt"}).exit_code, 0);  // run 2
  const testing::ProcessResult diff = d.run({"diff", "2", "1", "--json"});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  const auto dj = nlohmann::json::parse(diff.out);
  EXPECT_EQ(dj["op_pairing"]["paired"], 16) << dj["op_pairing"].dump(2);
  EXPECT_TRUE(dj["op_pairing"]["identical"].get<bool>()) << dj["op_pairing"].dump(2);
  ASSERT_FALSE(dj["op_pairing"]["largest_differences"].empty());
  for (const auto& op : dj["op_pairing"]["largest_differences"]) {
    const std::string name = op["op"];
    EXPECT_DOUBLE_EQ(op["b"].get<double>(), name.starts_with("BW") ? 4e-3 : 2e-3) << name;
  }
  for (const auto& k : dj["kinds"]) {
    if (k["kind"] == "F") {
      EXPECT_DOUBLE_EQ(k["time"]["b"].get<double>(), 8 * 2e-3);
    }
  }

  ASSERT_EQ(d.run({"import-nsys", file}).exit_code, 0);  // run 3: no plan
  expect_input_error(d.run({"calibrate", "--hardware", "h100-sxm", "--runs", "3"}),
                     "run 3 was imported without its plan");

  // A real capture with its plan but no pipeline phases (a sequence-parallel run).
  const auto real = test::shared_path("data/real_traces/nsys-2gpu-torchrun/mfu_2gpu_before.sqlite");
  if (!fs::exists(real)) PIPETUNE_SKIP_OR_FAIL("real trace nsys-2gpu-torchrun is absent");
  ASSERT_EQ(d.run({"import-nsys", real.string(), "--model", "tiny", "--hardware", "h100-sxm",
                   "--tp", "1", "--pp", "1", "--dp", "2"})
                .exit_code,
            0);
  expect_input_error(d.run({"calibrate", "--hardware", "h100-sxm", "--runs", "4"}),
                     "no GPU activity was launched inside a pipeline phase");

  // A real pipeline without GPU activity (PiPPy's 4-stage toy run, 1 s sleeps per op): its
  // phase ranges' own durations are the op times (README facts: F and B 1.00-1.04 s on stages
  // 0-2, stage 3's forwards 1.105-1.157 s with the loss).
  const auto pippy = test::shared_path("data/real_traces/pippy-4stage-toy/pipe_visualized.json");
  ASSERT_EQ(
      d.run({"import-trace", pippy.string(), "--model", "tiny", "--hardware", "h100-sxm", "--tp",
             "1", "--pp", "4", "--dp", "1", "--microbatches", "4", "--schedule", "gpipe"})
          .exit_code,
      0);
  const testing::ProcessResult toy =
      d.run({"calibrate", "--hardware", "h100-sxm", "--runs", "5", "--fit", "gemm", "--json"});
  ASSERT_EQ(toy.exit_code, 0) << toy.err;
  const auto tj = nlohmann::json::parse(toy.out);
  ASSERT_EQ(tj["points"].size(), 8u) << tj.dump(2);  // F and BW on 4 stages
  for (const auto& p : tj["points"]) {
    const std::string label = p["label"];
    const double t = p["measured"];
    if (label.ends_with("rank 3 F")) {
      EXPECT_GT(t, 1.10) << label;
      EXPECT_LT(t, 1.16) << label;
    } else {
      EXPECT_GT(t, 0.99) << label;
      EXPECT_LT(t, 1.05) << label;
    }
  }
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

using testing::expect_input_error;

// `calibrate --local`: a CPU hardware file from the engine's own kernels, which the other
// commands accept and which makes the cost model describe the engine (fp32 weights: 4 bytes per
// parameter in the memory estimate).
TEST(CalibrateLocalCli, WritesACpuHardwareFileTheOtherCommandsUse) {
  Dir d;
  const std::string out = d.path("cpu.toml");
  const testing::ProcessResult r = run_pipetune(
      {"calibrate", "--local", "--quick", "--devices", "2", "--threads", "1", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["devices"], 2);
  for (const char* key :
       {"memory_bandwidth", "special_function_rate", "transfer_bandwidth", "transfer_latency",
        "collective_bytes", "all_reduce_seconds", "all_gather_seconds", "reduce_scatter_seconds"})
    EXPECT_GT(j["measured"][key].get<double>(), 0.0) << key;
  EXPECT_GT(j["hardware"]["peak_flops"].get<double>(), 0.0);
  std::ifstream file(out);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("device = \"cpu\""), std::string::npos) << text;
  // Each collective's bus fraction is measured and written (predict below loads the file).
  for (const char* key : {"all_reduce_bus", "all_gather_bus", "reduce_scatter_bus"}) {
    const double f = j["hardware"]["efficiency"][key].get<double>();
    EXPECT_GT(f, 0.0) << key;
    EXPECT_LE(f, 1.0) << key;
    EXPECT_NE(text.find(std::string("\n") + key + " = "), std::string::npos) << key << "\n" << text;
  }

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
