// `pipetune tune` stores its ranked results as a search in the workspace and `pipetune export`
// writes one of them for Megatron-LM, torchtitan, DeepSpeed or pipetune. References: the JSON
// that tune printed (the exported flags must be that plan's), the frameworks' formats (a JSON
// document parses, the pipetune run file trains), and the bad-input rules (one line, exit 2,
// never overwrite without --force).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune {
namespace {

using testing::expect_input_error;

namespace fs = std::filesystem;
using testing::run_pipetune;
using testing::slurp;

using Dir = testing::ScratchWorkspace;

const std::vector<std::string> kTinyTune = {"tune",     "--model", "tiny", "--hardware",
                                            "h100-sxm", "--gpus",  "8",    "--global-batch",
                                            "32",       "--seq",   "32",   "--json"};

nlohmann::json tune(const Dir& d, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = kTinyTune;
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::ProcessResult r = d.run(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

// The integer after `flag` in a launch script, or -1.
int flag_value(const std::string& script, const std::string& flag) {
  std::smatch m;
  if (!std::regex_search(script, m, std::regex(flag + " (\\d+)"))) return -1;
  return std::stoi(m[1]);
}

TEST(TuneExportCli, TuneStoresItsResultsAsASearch) {
  Dir d;
  const nlohmann::json first = tune(d);
  ASSERT_TRUE(first.contains("search_id"));
  const nlohmann::json second = tune(d, {"--schedules", "1f1b"});
  EXPECT_NE(second["search_id"], first["search_id"]);
  // Without a workspace nothing is written.
  Dir none;
  const testing::ProcessResult r = run_pipetune(
      [&] {
        std::vector<std::string> a = kTinyTune;
        a.push_back("--no-db");
        return a;
      }(),
      none.dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out).contains("search_id"));
  EXPECT_FALSE(fs::exists(none.dir / "pipetune.db"));
}

TEST(TuneExportCli, MegatronScriptCarriesTheBestOneFOneBPlan) {
  Dir d;
  const nlohmann::json j = tune(d, {"--schedules", "1f1b"});
  ASSERT_FALSE(j["results"].empty());
  const nlohmann::json& plan = j["results"][0]["plan"];
  const std::string out = d.path("launch.sh");
  const testing::ProcessResult r = d.run({"export", "--format", "megatron", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string script = slurp(out);
  EXPECT_EQ(flag_value(script, "--tensor-model-parallel-size"), plan["tp"].get<int>()) << script;
  EXPECT_EQ(flag_value(script, "--pipeline-model-parallel-size"), plan["pp"].get<int>());
  EXPECT_EQ(flag_value(script, "--micro-batch-size"), plan["micro_batch_size"].get<int>());
  EXPECT_EQ(flag_value(script, "--global-batch-size"), 32);
  EXPECT_EQ(flag_value(script, "--num-layers"), 8);
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_NE(st.st_mode & S_IXUSR, 0u) << "a launch script is executable";
}

TEST(TuneExportCli, WithoutARankTheBestResultTheFrameworkCanRunIsChosen) {
  Dir d;
  const nlohmann::json j = tune(d, {"--top", "100000"});
  const std::string out = d.path("ds.json");
  const testing::ProcessResult r = d.run({"export", "--format", "deepspeed", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json ds = nlohmann::json::parse(slurp(out));
  // The chosen rank is the first result DeepSpeed can run: its one schedule (1F1B) or no
  // pipeline, no vocabulary parallelism, AutoTP only without a pipeline, no Megatron-style
  // sequence parallelism, no selective recomputation, ZeRO 0 or 1 with a pipeline.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("^rank (\\d+):"))) << r.out;
  const std::size_t rank = std::stoul(m[1]);
  ASSERT_LE(rank, j["results"].size());
  for (std::size_t i = 0; i + 1 < rank; ++i) {
    const nlohmann::json& p = j["results"][i]["plan"];
    const bool pipelined = p["pp"].get<int>() > 1;
    const bool runnable = (p["schedule"] == "1f1b" || !pipelined) && p["vocab"] == "none" &&
                          p["chunks"] == 1 && !(pipelined && p["tp"].get<int>() > 1) &&
                          !(p["sequence_parallel"] == true && p["tp"].get<int>() > 1) &&
                          p["recompute"] != "selective" &&
                          !(pipelined && p["zero_stage"].get<int>() >= 2);
    EXPECT_FALSE(runnable) << p.dump();
  }
  const nlohmann::json& chosen = j["results"][rank - 1]["plan"];
  // DeepSpeedConfig counts AutoTP's ranks in its batch world when there is no pipeline.
  const int counted_tp = chosen["pp"] == 1 ? chosen["tp"].get<int>() : 1;
  EXPECT_EQ(ds["train_batch_size"], 32 * counted_tp);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], chosen["micro_batch_size"]);
  EXPECT_EQ(ds["zero_optimization"]["stage"], chosen["zero_stage"]);
  // The model code beside it names the pipeline.
  const std::string code = slurp(d.path("pipetune_deepspeed.py"));
  EXPECT_NE(code.find("PIPELINE_STAGES = " + std::to_string(chosen["pp"].get<int>()) + "\n"),
            std::string::npos)
      << code;
}

TEST(TuneExportCli, PipetuneRunFileTrainsOnTheEngine) {
  Dir d;
  tune(d);
  const std::string out = d.path("run.pipetune");
  ASSERT_EQ(d.run({"export", "--format", "pipetune", "--rank", "1", "-o", out}).exit_code, 0);
  const testing::ProcessResult r = run_pipetune(
      {"train", "--config", out, "--steps", "2", "--json", "--no-db", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json t = nlohmann::json::parse(r.out);
  EXPECT_TRUE(t.contains("losses") || t.contains("steps")) << r.out;
}

// torchtitan builds a model flavor it registers: tiny has none and is refused by name; a
// llama3-8b plan names llama3's 8B flavor and states the torchtitan version it targets.
const std::vector<std::string> kLlama3Tune = {
    "tune",           "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8",
    "--global-batch", "32",      "--seq",     "32",         "--top",    "1000",   "--json"};

// The first result torchtitan can run (no ZeRO-1 over data parallelism: torchtitan has only
// FSDP, which shards the weights too), with a pipeline when asked; 0 when none.
int torchtitan_rank(const nlohmann::json& j, bool with_pipeline = false) {
  for (std::size_t i = 0; i < j["results"].size(); ++i) {
    const nlohmann::json& p = j["results"][i]["plan"];
    if (with_pipeline && p["pp"] == 1) continue;
    if (p["vocab"] == "none" && (p["zero_stage"] != 1 || p["dp"] == 1))
      return static_cast<int>(i + 1);
  }
  return 0;
}

nlohmann::json tune_llama3(const Dir& d, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = kLlama3Tune;
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::ProcessResult r = d.run(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(TuneExportCli, TorchtitanConfigNamesTheDegreesAndARegisteredFlavor) {
  Dir tiny;
  tune(tiny);
  expect_input_error(
      tiny.run({"export", "--format", "torchtitan", "--rank", "1", "-o", tiny.path("job.toml")}),
      "registers no model flavor with tiny's shape");

  Dir d;
  const nlohmann::json j = tune_llama3(d);
  const int rank = torchtitan_rank(j);
  ASSERT_GT(rank, 0);
  const nlohmann::json& plan = j["results"][rank - 1]["plan"];
  // The default torchtitan format: a config function for torchtitan's current config system.
  const std::string module = d.path("pipetune_llama3.py");
  ASSERT_EQ(
      d.run({"export", "--format", "torchtitan", "--rank", std::to_string(rank), "-o", module})
          .exit_code,
      0);
  const std::string py = slurp(module);
  EXPECT_NE(py.find("        pipeline_parallel_degree=" + std::to_string(plan["pp"].get<int>())),
            std::string::npos)
      << py;
  EXPECT_NE(py.find("        tensor_parallel_degree=" + std::to_string(plan["tp"].get<int>())),
            std::string::npos)
      << py;
  EXPECT_NE(py.find("    config = llama3_8b()\n"), std::string::npos) << py;
  EXPECT_NE(py.find("    config.model_spec = model_registry(\"8B\")\n"), std::string::npos) << py;
  EXPECT_NE(py.find("def pipetune_plan() -> Trainer.Config:"), std::string::npos) << py;
  EXPECT_NE(py.find("torchtitan b5bcd76"), std::string::npos) << py;

  // The last TOML-configured torchtitan, by its own format name. (--force: a plan torch has no
  // schedule class for brings its schedule CSV, which the export above wrote already.)
  const std::string out = d.path("job.toml");
  ASSERT_EQ(d.run({"export", "--format", "torchtitan-toml", "--rank", std::to_string(rank), "-o",
                   out, "--force"})
                .exit_code,
            0);
  const std::string text = slurp(out);
  EXPECT_NE(text.find("pipeline_parallel_degree = " + std::to_string(plan["pp"].get<int>())),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tensor_parallel_degree = " + std::to_string(plan["tp"].get<int>())),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("name = \"llama3\"\nflavor = \"8B\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("torchtitan 238fa99"), std::string::npos) << text;
  // export --help says which version of each framework the files are for.
  const testing::ProcessResult help = d.run({"export", "--help"});
  EXPECT_NE(help.out.find("torchtitan: b5bcd76"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("torchtitan-toml: 238fa99"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("megatron: NVIDIA/Megatron-LM commit d98e8a6"), std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("deepspeed: DeepSpeed 0.19.6"), std::string::npos) << help.out;
}

// A torchtitan export of a pipetune schedule torch has no class for: the config module and the
// TOML name pipetune_schedule.csv, which is written beside them (with the rows the TOML embeds as
// "#csv " lines).
TEST(TuneExportCli, TorchtitanExportOfAZeroBubbleScheduleWritesItsCsv) {
  Dir d;
  const nlohmann::json j = tune_llama3(d, {"--schedules", "zb-h1"});
  const int rank = torchtitan_rank(j, true);
  ASSERT_GT(rank, 0);
  ASSERT_EQ(j["results"][rank - 1]["plan"]["schedule"], "zb-h1");
  ASSERT_GT(j["results"][rank - 1]["plan"]["pp"].get<int>(), 1);
  // The config module names the CSV beside it.
  Dir py;
  tune_llama3(py, {"--schedules", "zb-h1"});
  const std::string module = py.path("pipetune_zb.py");
  const testing::ProcessResult m =
      py.run({"export", "--format", "torchtitan", "--rank", std::to_string(rank), "-o", module});
  ASSERT_EQ(m.exit_code, 0) << m.err;
  EXPECT_NE(slurp(module).find("pipeline_parallel_schedule_csv=os.path.join(os.path.dirname("
                               "os.path.abspath(__file__)), \"pipetune_schedule.csv\")"),
            std::string::npos)
      << slurp(module);
  EXPECT_TRUE(fs::exists(py.path("pipetune_schedule.csv"))) << m.out;

  const std::string out = d.path("job.toml");
  const std::vector<std::string> export_args = {
      "export", "--format", "torchtitan-toml", "--rank", std::to_string(rank), "-o", out};
  const testing::ProcessResult r = d.run(export_args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string toml = slurp(out);
  EXPECT_NE(toml.find("pipeline_parallel_schedule_csv = \"pipetune_schedule.csv\""),
            std::string::npos)
      << toml;
  const std::string csv_path = d.path("pipetune_schedule.csv");
  ASSERT_TRUE(fs::exists(csv_path)) << r.out;
  std::string embedded;
  std::istringstream lines(toml);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("#csv ", 0) == 0) embedded += line.substr(5) + "\n";
  EXPECT_FALSE(embedded.empty()) << toml;
  EXPECT_EQ(slurp(csv_path), embedded);
  // Never overwritten without --force: the TOML is not written either.
  fs::remove(out);
  expect_input_error(d.run(export_args), "--force");
  EXPECT_FALSE(fs::exists(out));
}

// A cluster preset with node groups of different NICs is a target of its own: tune searches it,
// the search keeps it, and export writes the plan for it; it replaces --hardware and --gpus.
TEST(TuneExportCli, AClusterWithMixedNicsIsATarget) {
  Dir d;
  const testing::ProcessResult r =
      d.run({"tune", "--model", "llama3-8b", "--cluster", "h100-mixed-nic", "--global-batch", "64",
             "--schedules", "1f1b", "--top", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpus"], 32) << r.out;
  const std::string out = d.path("launch.sh");
  ASSERT_EQ(d.run({"export", "--format", "megatron", "-o", out}).exit_code, 0);
  EXPECT_NE(slurp(out).find("on 32 GPUs (h100-mixed-nic)"), std::string::npos) << slurp(out);
  expect_input_error(d.run({"tune", "--model", "llama3-8b", "--cluster", "h100-mixed-nic", "--gpus",
                            "8", "--global-batch", "64"}),
                     "--gpus excludes --cluster");
  expect_input_error(d.run({"tune", "--model", "llama3-8b", "--global-batch", "64"}),
                     "--hardware is required (or --cluster)");
}

TEST(TuneExportCli, BadInput) {
  Dir d;
  const std::string out = d.path("x.sh");
  expect_input_error(d.run({"export", "--format", "megatron", "-o", out}), "no such workspace");
  ASSERT_EQ(d.run({"simulate", "--config", "tiny"}).exit_code, 0);  // a workspace, no search
  expect_input_error(d.run({"export", "--format", "megatron", "-o", out}), "pipetune tune");
  const nlohmann::json j = tune(d, {"--schedules", "zb-v"});
  // Asked for by rank, a plan the framework cannot run is refused with the rule it breaks.
  ASSERT_EQ(j["results"][0]["plan"]["schedule"], "zb-v");
  expect_input_error(d.run({"export", "--format", "megatron", "--rank", "1", "-o", out}), "zb-v");
  EXPECT_FALSE(fs::exists(out));
  expect_input_error(d.run({"export", "--format", "slurm", "-o", out}), "slurm");
  expect_input_error(d.run({"export", "--format", "pipetune", "--rank", "100000", "-o", out}),
                     "out of range");
  expect_input_error(d.run({"export", "--format", "pipetune", "--rank", "0", "-o", out}), "--rank");
  expect_input_error(d.run({"export", "--format", "pipetune", "--search", "99", "-o", out}), "99");
  // An existing file is never overwritten without --force, and stays as it was.
  { std::ofstream(out) << "keep me\n"; }
  expect_input_error(d.run({"export", "--format", "pipetune", "-o", out}), "--force");
  EXPECT_EQ(slurp(out), "keep me\n");
  EXPECT_EQ(d.run({"export", "--format", "pipetune", "-o", out, "--force"}).exit_code, 0);
  EXPECT_NE(slurp(out), "keep me\n");
}

}  // namespace
}  // namespace pipetune
