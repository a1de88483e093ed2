// Hostile input, the tuning side, through the binary: a search that finds
// nothing names every reason (a schedule that does not support the vocabulary mode asked for
// included); repeated list entries are refused, not searched or counted twice; tune proposes
// ZeRO-2 and 3, priced as the memory model's closed form says, and they are what a tight device
// gets; exports write what the plan is (a redistributed layer split) or refuse what the framework
// cannot express; calibrate keeps the parameters its data cannot determine at their start and
// says so, and refuses them when they were asked for by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

ProcessResult run_in(const ScratchWorkspace& w, std::vector<std::string> args) {
  args.insert(args.end(), {"--db", w.db});
  return run_pipetune(args);
}

const std::vector<std::string> kTinyTune = {"tune",     "--model", "tiny", "--hardware",
                                            "h100-sxm", "--gpus",  "8",    "--global-batch",
                                            "32",       "--seq",   "32"};

nlohmann::json tune_json(const ScratchWorkspace& w, const std::vector<std::string>& extra) {
  const ProcessResult r = run_in(w, with(with(kTinyTune, extra), {"--json"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

// Point 11: the reason a whole combination cannot exist is named, with every other reason.
TEST(HostileTuning, AnImpossibleScheduleAndVocabularyCombinationIsNamed) {
  const ProcessResult r =
      run_pipetune(with(kTinyTune, {"--schedules", "zb-v", "--vocab-modes", "vocab-1", "--no-db"}));
  // Every reason, counted: the incompatibility on the pipelined plans, no pipeline on the others,
  // and the tp / batch reasons as before.
  expect_input_error(
      r, {"every plan was pruned", "zb-v does not support vocab-1",
          "vocab-1 needs a pipeline (pp > 1)", "tp does not divide the attention heads"});
  const std::regex counted("[0-9]+ zb-v does not support vocab-1");
  EXPECT_TRUE(std::regex_search(r.err, counted)) << r.err;
}

// Point 14: a repeated entry of a list is refused with the entry, never searched twice.
TEST(HostileTuning, RepeatedListEntriesAreRefused) {
  expect_input_error(run_pipetune(with(kTinyTune, {"--schedules", "1f1b,1f1b", "--no-db"})),
                     {"'1f1b' is listed twice"});
  expect_input_error(run_pipetune(with(kTinyTune, {"--vocab-modes", "none,redis,none", "--no-db"})),
                     {"'none' is listed twice"});
  // A list given that names nothing is not "every one".
  expect_input_error(run_pipetune(with(kTinyTune, {"--vocab-modes", ",", "--no-db"})),
                     {"--vocab-modes names nothing"});
  // Distinct entries are searched once each: no plan is listed twice.
  ScratchWorkspace w;
  const nlohmann::json j =
      tune_json(w, {"--schedules", "1f1b,gpipe", "--keep", "0", "--top", "100000"});
  std::vector<std::string> plans;
  for (const auto& res : j["results"]) plans.push_back(res["plan"].dump());
  std::sort(plans.begin(), plans.end());
  EXPECT_EQ(std::adjacent_find(plans.begin(), plans.end()), plans.end());
}

// tiny at pp = 1, tp = 1 on each device: 8 layers of attention 4 h^2 (kv heads = heads), MLP
// 2 h ffn and 2 norms of h; embedding and output tables V h; the final norm h.
constexpr double kH = 64, kFfn = 256, kVocab = 512;
constexpr double kLayer = 4 * kH * kH + 2 * kH * kFfn + 2 * kH;  // 49 280
constexpr double kTable = kVocab * kH;                           // 32 768
constexpr double kParams = 8 * kLayer + 2 * kTable + kH;         // 459 840

// Point 15: tune enumerates ZeRO-2 and 3, and their memory is the memory model's closed form
// (mixed-precision Adam: 2 bytes of weights, 4 of gradients, 12 of optimizer state per
// parameter). Against ZeRO-1 over d ranks, ZeRO-2 shards the gradients and ZeRO-3 the weights
// too, except the full copies of the largest layer and table a device opens while they compute.
TEST(HostileTuning, TuneSearchesZeroTwoAndThreeAtTheirClosedFormMemory) {
  ScratchWorkspace w;
  const nlohmann::json j = tune_json(w, {"--keep", "0", "--top", "100000", "--no-db"});
  std::map<int, int> stages;
  // Peak memory by ZeRO stage of one plan (pp = 1, tp = 1, dp = 8, micro-batch 1, 1F1B, no
  // recomputation).
  std::map<int, double> peak;
  for (const auto& res : j["results"]) {
    const auto& p = res["plan"];
    ++stages[p["zero_stage"].get<int>()];
    if (p["tp"] == 1 && p["pp"] == 1 && p["dp"] == 8 && p["micro_batch_size"] == 1 &&
        p["recompute"] == "none")
      peak[p["zero_stage"].get<int>()] = res["peak_memory_bytes"].get<double>();
  }
  for (int z : {0, 1, 2, 3}) EXPECT_GT(stages[z], 0) << "no plan with ZeRO " << z;
  ASSERT_EQ(peak.size(), 4u) << j.dump(1).substr(0, 2000);
  const double d = 8, beyond_shard = 1 - 1 / d;
  const double open = kLayer + kTable;  // the largest layer and table, opened whole
  EXPECT_DOUBLE_EQ(peak[0] - peak[1], 12 * beyond_shard * kParams);
  EXPECT_DOUBLE_EQ(peak[1] - peak[2], 4 * beyond_shard * (kParams - open));
  EXPECT_DOUBLE_EQ(peak[2] - peak[3], 2 * beyond_shard * (kParams - open));
}

// Point 15: on a device too small for ZeRO 0 and 1, tune proposes ZeRO-2 and 3 plans.
TEST(HostileTuning, ADeviceOnlyZeroTwoOrThreeFitsGetsThem) {
  // DualPipeV needs 2 micro-batches per stage: 8 sequences keep the pipeline short, so the
  // model's states are sharded over data-parallel ranks rather than stages. Without offload,
  // which would fit ZeRO 0 and 1 too (their optimizer state on the host).
  const auto search = [](const std::string& hardware) {
    return std::vector<std::string>{
        "tune",       "--model",        "tiny",   "--hardware", hardware, "--gpus",
        "8",          "--global-batch", "8",      "--seq",      "32",     "--schedules",
        "dualpipe-v", "--top",          "100000", "--no-db",    "--json", "--no-offload"};
  };
  ScratchWorkspace w;
  const ProcessResult unbounded = run_pipetune(with(search("h100-sxm"), {"--keep", "0"}));
  ASSERT_EQ(unbounded.exit_code, 0) << unbounded.err;
  const nlohmann::json all = nlohmann::json::parse(unbounded.out);
  double least_low = std::numeric_limits<double>::infinity();
  double least_high = least_low;
  for (const auto& res : all["results"]) {
    const double bytes = res["peak_memory_bytes"].get<double>();
    double& least = res["plan"]["zero_stage"].get<int>() >= 2 ? least_high : least_low;
    least = std::min(least, bytes);
  }
  ASSERT_LT(least_high, least_low);
  // The h100-sxm preset with its memory between the two.
  std::string preset = slurp(std::string(PIPETUNE_SOURCE_DIR) + "/presets/hardware/h100-sxm.toml");
  const std::regex hbm("hbm_bytes = [0-9_]+");
  ASSERT_TRUE(std::regex_search(preset, hbm));
  const auto tight = static_cast<long long>((least_low + least_high) / 2);
  preset = std::regex_replace(preset, hbm, "hbm_bytes = " + std::to_string(tight));
  const std::string hardware = (w.dir / "tight-h100.toml").string();
  std::ofstream(hardware) << preset;
  const ProcessResult r = run_pipetune(search(hardware));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["results"].empty());
  for (const auto& res : j["results"]) {
    EXPECT_GE(res["plan"]["zero_stage"].get<int>(), 2) << res.dump();
    EXPECT_LE(res["peak_memory_bytes"].get<double>(), static_cast<double>(tight));
  }
}

// The rank (from 1) of the first result whose plan satisfies `pick`, or -1.
template <class Pick>
int rank_of(const nlohmann::json& tuned, Pick pick) {
  for (std::size_t i = 0; i < tuned["results"].size(); ++i)
    if (pick(tuned["results"][i]["plan"])) return static_cast<int>(i + 1);
  return -1;
}

// Point 11: a redistributed-vocabulary plan's layer split is written as it is: the pipetune run
// file carries it (the header says redis) and simulate reads the same plan back; torchtitan
// refuses tiny (no flavor of its shape); DeepSpeed's model code places it in its PipelineModule.
TEST(HostileTuning, ExportsWriteTheRedistributedSplitOrRefuseIt) {
  ScratchWorkspace w;
  // tiny over 8 stages: the output layer is worth 0.64 layers, so the last stage holds none and
  // the seven others share the eight layers: 1 2 1 1 1 1 1 0.
  const nlohmann::json tuned =
      tune_json(w, {"--vocab-modes", "redis", "--schedules", "1f1b", "--top", "100000"});
  const int rank = rank_of(tuned, [](const nlohmann::json& p) { return p["pp"] == 8; });
  ASSERT_GT(rank, 0);
  const std::vector<int> split = {1, 2, 1, 1, 1, 1, 1, 0};
  ASSERT_EQ(tuned["results"][rank - 1]["plan"]["layer_split"].get<std::vector<int>>(), split);

  const std::string run_file = (w.dir / "run.toml").string();
  const ProcessResult e =
      run_in(w, {"export", "--format", "pipetune", "--rank", std::to_string(rank), "-o", run_file});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const std::string text = slurp(run_file);
  EXPECT_NE(text.find("vocab=redis layer_split=1/2/1/1/1/1/1/0"), std::string::npos) << text;
  EXPECT_NE(text.find("layer_split = [1, 2, 1, 1, 1, 1, 1, 0]"), std::string::npos) << text;
  // simulate runs the same plan: each stage's weights (2 bytes a parameter on h100-sxm) are its
  // layers', the first stage's embedding and the last stage's output layer and final norm.
  const ProcessResult s = run_pipetune({"simulate", "--config", run_file, "--json", "--no-db"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const nlohmann::json stages = nlohmann::json::parse(s.out)["iteration"]["memory"]["stages"];
  ASSERT_EQ(stages.size(), split.size());
  for (std::size_t i = 0; i < split.size(); ++i) {
    const double params = split[i] * kLayer + (i == 0 ? kTable : 0) + (i == 7 ? kTable + kH : 0);
    EXPECT_EQ(stages[i]["parameters"].get<double>(), 2 * params) << "stage " << i;
  }
  // The engine runs no empty layer group: train says so (the file's header too).
  EXPECT_NE(text.find("`pipetune train` refuses it"), std::string::npos) << text;
  expect_input_error(
      run_pipetune({"train", "--config", run_file, "--steps", "1", "--threads", "1", "--no-db"}),
      {"empty layer group"});

  // torchtitan builds only model flavors it registers, and has none of tiny's shape: refused by
  // name (layer_split_export_test.cpp checks the module lists on llama3 models).
  const std::string toml = (w.dir / "titan.toml").string();
  expect_input_error(
      run_in(w, {"export", "--format", "torchtitan", "--rank", std::to_string(rank), "-o", toml}),
      {"torchtitan", "registers no model flavor with tiny's shape"});
  EXPECT_FALSE(std::filesystem::exists(toml));

  // DeepSpeed: the split in the PipelineModule code beside the JSON (a plan DeepSpeed can run
  // otherwise: no selective recomputation, ZeRO 0 or 1 with a pipeline).
  const int ds_rank = rank_of(tuned, [](const nlohmann::json& p) {
    return p["pp"] == 8 && p["recompute"] != "selective" && p["zero_stage"].get<int>() <= 1;
  });
  ASSERT_GT(ds_rank, 0);
  ASSERT_EQ(tuned["results"][ds_rank - 1]["plan"]["layer_split"].get<std::vector<int>>(), split);
  const std::string json = (w.dir / "ds.json").string();
  const ProcessResult ds =
      run_in(w, {"export", "--format", "deepspeed", "--rank", std::to_string(ds_rank), "-o", json});
  ASSERT_EQ(ds.exit_code, 0) << ds.err;
  const std::string code = slurp((w.dir / "pipetune_deepspeed.py").string());
  EXPECT_NE(code.find("PIPELINE_STAGES = 8\n"), std::string::npos) << code;
  EXPECT_NE(code.find("DECODER_LAYERS_PER_STAGE = [1, 2, 1, 1, 1, 1, 1, 0]"), std::string::npos)
      << code;
}

// Point 11: DeepSpeed's expert parallelism is AutoEP, whose presets cover Mixtral and a few
// other Hugging Face models but not tiny-moe: an ep > 1 plan is refused by name, not written
// without it.
TEST(HostileTuning, DeepspeedRefusesExpertParallelism) {
  ScratchWorkspace w;
  const ProcessResult r = run_in(
      w, {"tune", "--model", "tiny-moe", "--hardware", "h100-sxm", "--gpus", "8", "--global-batch",
          "32", "--seq", "32", "--schedules", "1f1b", "--json", "--top", "100000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json tuned = nlohmann::json::parse(r.out);
  const int rank = rank_of(tuned, [](const nlohmann::json& p) {
    return p["ep"].get<int>() > 1 && p["pp"] == 1 && p["recompute"] != "selective" &&
           !(p["sequence_parallel"] == true && p["tp"].get<int>() > 1) &&
           p.value("moe_chunks", 1) == 1 && !p.contains("expert_layout");
  });
  ASSERT_GT(rank, 0);
  const std::string json = (w.dir / "ds.json").string();
  expect_input_error(
      run_in(w, {"export", "--format", "deepspeed", "--rank", std::to_string(rank), "-o", json}),
      {"deepspeed", "expert parallelism (ep="});
  // The same plan with its all-to-all in chunks: refused for the chunks, which DeepSpeed lacks.
  const int chunked = rank_of(tuned, [](const nlohmann::json& p) {
    return p["ep"].get<int>() > 1 && p["pp"] == 1 && p["recompute"] != "selective" &&
           !(p["sequence_parallel"] == true && p["tp"].get<int>() > 1) &&
           p.value("moe_chunks", 1) > 1 && !p.contains("expert_layout");
  });
  ASSERT_GT(chunked, 0);
  expect_input_error(
      run_in(w, {"export", "--format", "deepspeed", "--rank", std::to_string(chunked), "-o", json}),
      {"deepspeed", "moe_chunks=", "export the plan with moe_chunks 1"});
  // A plan with whole experts inside the TP group (PPMoE): refused by each framework by name.
  const int whole = rank_of(tuned, [](const nlohmann::json& p) {
    return p.contains("expert_layout") && p["expert_layout"][0] == "whole" && p["ep"] == 1 &&
           p["pp"] == 1 && p["recompute"] != "selective" && p.value("moe_chunks", 1) == 1;
  });
  ASSERT_GT(whole, 0);
  for (const char* format : {"megatron", "torchtitan", "deepspeed"})
    expect_input_error(
        run_in(w, {"export", "--format", format, "--rank", std::to_string(whole), "-o", json}),
        {"expert_layout=whole", "export the plan with expert_layout sharded"});
  EXPECT_FALSE(std::filesystem::exists(json));
}

// Two measured runs of tiny in the workspace: pp = 2 (F and BW on each stage) and tp = 2.
void train_two_runs(const ScratchWorkspace& w) {
  for (const std::vector<std::string>& plan :
       {std::vector<std::string>{"--pp", "2", "--tp", "1", "--dp", "1"},
        std::vector<std::string>{"--pp", "1", "--tp", "2", "--dp", "1"}}) {
    const ProcessResult r = run_in(
        w, with({"train", "--config", "tiny-train", "--steps", "2", "--threads", "1"}, plan));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
}

// Point 14: a run listed twice in --runs, or a parameter twice in --fit, is refused; it would
// count its data points twice.
TEST(HostileTuning, CalibrateRefusesARunOrParameterListedTwice) {
  ScratchWorkspace w;
  train_two_runs(w);
  expect_input_error(run_in(w, {"calibrate", "--hardware", "h100-sxm", "--runs", "1,2,1"}),
                     {"run 1", "given twice"});
  expect_input_error(run_in(w, {"calibrate", "--hardware", "h100-sxm", "--fit", "gemm,gemm"}),
                     {"gemm is asked for twice"});
  expect_input_error(run_in(w, {"calibrate", "--hardware", "h100-sxm", "--fit", ","}),
                     {"--fit names no parameter"});
  expect_input_error(run_in(w, {"calibrate", "--hardware", "h100-sxm", "--runs", ","}),
                     {"--runs names no run"});
}

// Point 9: one pp = 2 run gives 4 op durations (F and BW on each stage), fewer than the six
// efficiency parameters and, both stages being alike, only two independent ones. By default the
// undetermined parameters keep their start and one line says which; asked for by name, they are
// refused, naming the points and the parameters. What the points determine is fitted.
TEST(HostileTuning, CalibrateFitsOnlyWhatItsDataDetermine) {
  ScratchWorkspace w;
  train_two_runs(w);
  const ProcessResult r = run_in(w, {"calibrate", "--hardware", "h100-sxm", "--runs", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("kept at their start, not determined by these 4 op durations"),
            std::string::npos)
      << r.out;
  const ProcessResult j =
      run_in(w, {"calibrate", "--hardware", "h100-sxm", "--runs", "1", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json fit = nlohmann::json::parse(j.out);
  const int independent = fit["independent_points"].get<int>();
  EXPECT_EQ(fit["after"]["points"], 4);
  EXPECT_GE(independent, 1);
  EXPECT_LE(independent, 4);
  EXPECT_EQ(fit["fitted_parameters"].size(), static_cast<std::size_t>(independent));
  EXPECT_EQ(fit["fitted_parameters"].size() + fit["fixed_parameters"].size(), 6u);
  // Single-node runs never cross a NIC: the inter-node bus is never determined.
  const auto fixed = fit["fixed_parameters"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(fixed.begin(), fixed.end(), "inter_node_bus"), fixed.end());
  for (const std::string& name : fixed) EXPECT_EQ(fit["fitted"][name], fit["start"][name]) << name;

  // Asked for by name, every parameter must be determined.
  expect_input_error(
      run_in(w, {"calibrate", "--hardware", "h100-sxm", "--runs", "1", "--fit",
                 "gemm,gemm_half_flops,attention,memory,intra_node_bus,inter_node_bus"}),
      {"the 4 data points determine", "of the 6 parameters asked for",
       "not determined: ", "inter_node_bus"});
  // One parameter the runs determine is fitted, none kept.
  const ProcessResult one =
      run_in(w, {"calibrate", "--hardware", "h100-sxm", "--runs", "1", "--fit", "gemm", "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const nlohmann::json g = nlohmann::json::parse(one.out);
  EXPECT_EQ(g["fitted_parameters"], nlohmann::json::array({"gemm"}));
  EXPECT_TRUE(g["fixed_parameters"].empty());
}

}  // namespace
}  // namespace pipetune::testing
