// Exporters: each writes the plan in its framework's terms and refuses what the framework would
// refuse, naming the rule. References: Megatron-LM's flags and validate_args rules, torchtitan's
// job config keys, DeepSpeed's batch assertion (train_batch_size = micro x GA x the world
// DeepSpeedConfig counts) and its PipelineModule code, and for the
// pipetune format the engine itself (it must accept and train the file).
#include "tuner/export/exporters.hpp"
#include "tuner/export/megatron_rules.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_spec.hpp"
#include "tuner/export/small_scale.hpp"

namespace pipetune::tuner {
namespace {

ExportRequest request(const std::string& run) {
  const spec::RunSpec r = spec::load_run(run);
  ExportRequest q;
  q.model = r.model;
  q.cluster = r.cluster;
  q.plan = r.plan;
  spec::apply_defaults(q.plan);
  return q;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n  " + line + "\n") != std::string::npos;
}

// The script must at least be valid bash.
void expect_valid_bash(const std::string& script) {
  // A file of this call's own: tests run in parallel processes.
  std::string tmpl = (std::filesystem::temp_directory_path() / "pipetune_megatron_XXXXXX").string();
  const int fd = ::mkstemp(tmpl.data());
  ASSERT_GE(fd, 0);
  ::close(fd);
  const std::filesystem::path path = tmpl;
  std::ofstream(path) << script;
  const int rc = std::system(("bash -n " + path.string()).c_str());
  std::filesystem::remove(path);
  EXPECT_EQ(rc, 0) << "bash -n rejects the script:\n" << script;
}

std::string error_of(ExportFormat f, const ExportRequest& q) {
  try {
    (void)export_plan(f, q);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MegatronExport, InterleavedGqaPlanHasExactlyItsFlags) {
  const ExportRequest q = request("llama3-70b-h100-1024");
  const std::string s = export_megatron(q);
  for (const char* flag :
       {"--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 8", "--sequence-parallel",
        "--num-virtual-stages-per-pipeline-rank 5", "--use-distributed-optimizer",
        "--recompute-granularity selective", "--micro-batch-size 1", "--global-batch-size 512",
        "--num-layers 80", "--hidden-size 8192", "--group-query-attention", "--num-query-groups 8",
        "--swiglu", "--vocab-size 128256", "--untie-embeddings-and-output-weights"})
    EXPECT_TRUE(has_line(s, flag)) << "missing " << flag << " in\n" << s;
  EXPECT_NE(s.find("NNODES=128\n"), std::string::npos);
  EXPECT_NE(s.find("GPUS_PER_NODE=8\n"), std::string::npos);
  EXPECT_EQ(s.find("--expert-model-parallel-size"), std::string::npos);
  expect_valid_bash(s);
}

TEST(MegatronExport, VocabularyPaddingIsTheModelsNotMegatronsDefault) {
  // Megatron pads to make_vocab_size_divisible_by x TP (default 128): the launch says the model's
  // multiple, so Megatron runs the vocabulary tables that were predicted.
  ExportRequest q = request("default");
  EXPECT_TRUE(has_line(export_megatron(q), "--make-vocab-size-divisible-by 1"));
  q.model.vocab_divisible_by = 128;
  const std::string s = export_megatron(q);
  EXPECT_TRUE(has_line(s, "--make-vocab-size-divisible-by 128")) << s;
  EXPECT_TRUE(check_megatron_script(s).empty());
}

TEST(MegatronExport, MoeAndUnevenStagesUseTheirFlags) {
  ExportRequest q = request("mixtral-8x7b-h100-16");
  const std::string s = export_megatron(q);
  EXPECT_TRUE(has_line(s, "--num-experts 8"));
  EXPECT_TRUE(has_line(s, "--moe-router-topk 2"));
  EXPECT_TRUE(has_line(s, "--expert-model-parallel-size " + std::to_string(q.plan.ep)));
  expect_valid_bash(s);

  ExportRequest uneven = request("default");  // llama3-8b, 32 layers, pp=4
  uneven.plan.layer_split = {7, 9, 9, 7};
  const std::string u = export_megatron(uneven);
  EXPECT_TRUE(has_line(u, "--decoder-first-pipeline-num-layers 7")) << u;
  EXPECT_TRUE(has_line(u, "--decoder-last-pipeline-num-layers 7")) << u;
}

// Any other split is Megatron's pipeline layout: one stage per layer group, in Megatron's order
// (virtual stage v of rank r is stage v * pp + r, the interleaved placement), the embedding first
// and the loss last; the layout sets the virtual stages, so no other virtual-stage flag is given.
TEST(MegatronExport, OtherSplitsAreAPipelineLayout) {
  const ExportRequest base = request("default");  // llama3-8b, 32 layers, pp=4
  ExportRequest middle = base;
  middle.plan.layer_split = {8, 9, 7, 8};  // middle stages differ
  const std::string m = export_megatron(middle);
  EXPECT_TRUE(has_line(m, "--pipeline-model-parallel-layout 'Et*8|t*9|t*7|t*8L'")) << m;
  EXPECT_FALSE(has_line(m, "--decoder-first-pipeline-num-layers 8")) << m;
  EXPECT_EQ(format_violations(check_megatron_script(m)), "");
  expect_valid_bash(m);

  ExportRequest empty_last = base;  // a last stage that holds only the output layer
  empty_last.plan.layer_split = {11, 11, 10, 0};
  const std::string e = export_megatron(empty_last);
  EXPECT_TRUE(has_line(e, "--pipeline-model-parallel-layout 'Et*11|t*11|t*10|L'")) << e;
  EXPECT_EQ(format_violations(check_megatron_script(e)), "");

  ExportRequest interleaved = base;  // 32 layers over 4 x 3 virtual stages: 3 3 3 3 3 3 3 3 2 2 2 2
  interleaved.plan.schedule = "interleaved-1f1b";
  interleaved.plan.chunks = 3;
  const std::string i = export_megatron(interleaved);
  EXPECT_TRUE(has_line(
      i, "--pipeline-model-parallel-layout 'Et*3|t*3|t*3|t*3|t*3|t*3|t*3|t*3|t*2|t*2|t*2|t*2L'"))
      << i;
  EXPECT_EQ(i.find("--num-virtual-stages-per-pipeline-rank"), std::string::npos) << i;
  EXPECT_EQ(format_violations(check_megatron_script(i)), "");
}

TEST(MegatronExport, RefusesWhatMegatronRefuses) {
  const ExportRequest base = request("default");
  ExportRequest q = base;
  q.plan.global_batch = 18;  // micro 1 x dp 1 divides it, so break dp instead
  q.plan.dp = 4;
  q.cluster.devices = q.plan.world_size();
  q.plan.global_batch = 18;
  EXPECT_NE(error_of(ExportFormat::Megatron, q)
                .find("global batch 18 is not divisible by micro-batch 1 x data-parallel 4"),
            std::string::npos)
      << error_of(ExportFormat::Megatron, q);

  q = base;
  q.plan.schedule = "zb-v";
  EXPECT_NE(error_of(ExportFormat::Megatron, q).find("megatron: schedule zb-v"), std::string::npos);
  q = base;
  q.plan.vocab = schedule::VocabMode::Vocab1;
  EXPECT_NE(error_of(ExportFormat::Megatron, q).find("vocabulary parallelism"), std::string::npos);

  ExportRequest moe = request("mixtral-8x7b-h100-16");
  moe.plan.sequence_parallel = false;
  if (moe.plan.tp > 1 && moe.plan.ep > 1) {
    EXPECT_NE(error_of(ExportFormat::Megatron, moe).find("needs sequence parallelism"),
              std::string::npos);
  }
  q = base;
  q.plan.tp = 3;  // 32 heads
  q.cluster.devices = q.plan.world_size();
  EXPECT_NE(error_of(ExportFormat::Megatron, q).find("tp=3 does not divide"), std::string::npos)
      << error_of(ExportFormat::Megatron, q);
}

TEST(TorchtitanExport, DegreesMultiplyToTheWorldAndBatchesAgree) {
  const ExportRequest q = request("default");
  const toml::table t = toml::parse(export_torchtitan_toml(q));
  const auto& par = *t["parallelism"].as_table();
  const std::int64_t world =
      par["data_parallel_replicate_degree"].value_or(0) *
      par["data_parallel_shard_degree"].value_or(0) * par["tensor_parallel_degree"].value_or(0) *
      par["pipeline_parallel_degree"].value_or(0) * par["context_parallel_degree"].value_or(0);
  EXPECT_EQ(world, q.plan.world_size());
  EXPECT_EQ(par["pipeline_parallel_schedule"].value_or(std::string()), "1F1B");
  EXPECT_EQ(par["pipeline_parallel_layers_per_stage"].value_or(0), 8);
  const auto& tr = *t["training"].as_table();
  EXPECT_EQ(tr["local_batch_size"].value_or(0) * par["data_parallel_replicate_degree"].value_or(0) *
                par["data_parallel_shard_degree"].value_or(0),
            tr["global_batch_size"].value_or(-1));
  EXPECT_EQ(tr["seq_len"].value_or(0), q.model.seq_len);
  EXPECT_EQ(t["activation_checkpoint"]["mode"].value_or(std::string()), "selective");

  // pipetune's own V-Half runs from a schedule CSV (pipelining_csv_test.cpp checks the CSV).
  ExportRequest v = q;
  v.plan.schedule = "v-half";
  v.plan.chunks = 2;
  const std::string vt = export_torchtitan_toml(v);
  EXPECT_NE(vt.find("pipeline_parallel_schedule = \"ZBVZeroBubble\""), std::string::npos) << vt;
  EXPECT_NE(vt.find("pipeline_parallel_schedule_csv = \"pipetune_schedule.csv\""),
            std::string::npos)
      << vt;
  v.plan.vocab = schedule::VocabMode::Vocab1;
  EXPECT_NE(error_of(ExportFormat::TorchtitanToml, v).find("vocabulary parallelism"),
            std::string::npos);
}

TEST(DeepspeedExport, WritesThePipelineBesideTheConfigOrRefusesNamingTheFeature) {
  ExportRequest q = request("default");  // llama3-8b tp=2 pp=4 1F1B, SP, selective, ZeRO-1
  EXPECT_NE(error_of(ExportFormat::Deepspeed, q)
                .find("tensor parallelism (tp=2) with pipeline parallelism (pp=4)"),
            std::string::npos)
      << error_of(ExportFormat::Deepspeed, q);
  q.plan.tp = 1;
  q.plan.dp = 2;
  q.plan.sequence_parallel = false;
  EXPECT_NE(error_of(ExportFormat::Deepspeed, q).find("selective recomputation"),
            std::string::npos);
  q.plan.recompute = spec::Recompute::Full;
  const nlohmann::json j = nlohmann::json::parse(export_deepspeed(q));
  // DeepSpeedConfig's batch world with a PipelineModule is its grid's DP: the plan's dp.
  EXPECT_EQ(j["train_batch_size"].get<std::int64_t>(),
            j["train_micro_batch_size_per_gpu"].get<std::int64_t>() *
                j["gradient_accumulation_steps"].get<std::int64_t>() * q.plan.dp);
  EXPECT_EQ(j["zero_optimization"]["stage"], 1);
  EXPECT_EQ(j["pipeline"], nlohmann::json({{"activation_checkpoint_interval", 1}}));
  EXPECT_FALSE(j.contains("tensor_parallel"));
  EXPECT_FALSE(j.contains("activation_checkpointing"));
  EXPECT_NE(j["pipetune_export"].get<std::string>().find(
                "DeepSpeed 0.19.6 (deepspeedai/DeepSpeed@edaa722)"),
            std::string::npos);
  const std::string code = deepspeed_model_code(q);
  for (const char* line :
       {"# Targets DeepSpeed 0.19.6 (deepspeedai/DeepSpeed@edaa722).\n", "PIPELINE_STAGES = 4\n",
        "DECODER_LAYERS_PER_STAGE = [8, 8, 8, 8]\n", "ACTIVATION_CHECKPOINT_INTERVAL = 1\n",
        "class PipetuneSplitPipelineModule(PipelineModule):\n"})
    EXPECT_NE(code.find(line), std::string::npos) << line << code;
  // Without a pipeline: AutoTP, whose ranks DeepSpeedConfig counts in the batch world.
  ExportRequest autotp = q;
  autotp.plan.tp = 2;
  autotp.plan.pp = 1;
  autotp.plan.dp = 4;
  const nlohmann::json t = nlohmann::json::parse(export_deepspeed(autotp));
  EXPECT_EQ(t["tensor_parallel"]["autotp_size"], 2);
  EXPECT_FALSE(t.contains("pipeline"));
  EXPECT_EQ(t["train_batch_size"].get<std::int64_t>(),
            t["train_micro_batch_size_per_gpu"].get<std::int64_t>() *
                t["gradient_accumulation_steps"].get<std::int64_t>() * 8);
  EXPECT_NE(deepspeed_model_code(autotp).find("CheckpointedLayer(layer)"), std::string::npos);
  // What the pipeline engine cannot run.
  q.plan.zero_stage = 3;
  EXPECT_NE(error_of(ExportFormat::Deepspeed, q).find("cannot be combined with pipeline"),
            std::string::npos);
  q.plan.zero_stage = 1;
  q.plan.schedule = "zb-h1";
  EXPECT_NE(error_of(ExportFormat::Deepspeed, q).find("runs 1F1B only"), std::string::npos);
}

TEST(PipetuneExport, TheEngineTrainsTheSmallScaleRunFile) {
  ExportRequest q = request("vp-4b-256k-vocab1");  // pp=8, 1F1B + vocab-1, 128 micro-batches
  q.plan.microbatches = 16;
  q.plan.global_batch = 0;
  spec::apply_defaults(q.plan);
  const std::string text = export_pipetune(q);
  const spec::RunSpec run = spec::parse_run(text, "exported");
  EXPECT_EQ(run.plan.pp, 8);
  EXPECT_EQ(run.plan.vocab, schedule::VocabMode::Vocab1);
  EXPECT_EQ(run.plan.microbatches, 16);
  runtime::TrainOptions o;
  o.model = run.model;
  o.plan = run.plan;
  o.steps = 2;
  const runtime::TrainResult r = runtime::train(o);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_TRUE(std::isfinite(r.steps[1].loss));
}

TEST(PipetuneExport, ShrinksEveryKindOfPlanToOneTheEngineAccepts) {
  for (const char* run : {"default", "llama3-70b-h100-1024", "mixtral-8x7b-h100-16",
                          "gpt3-18b-sc21", "vp-4b-256k-vocab1"}) {
    const ExportRequest q = request(run);
    const SmallScaleRun s = shrink_to_engine(q.model, q.plan);
    runtime::TrainOptions o;
    o.model = s.model;
    o.plan = s.plan;
    o.steps = 1;
    EXPECT_NO_THROW(runtime::check_train_options(o)) << run;
    EXPECT_EQ(s.plan.pp, q.plan.pp) << run;
    EXPECT_EQ(s.plan.schedule, q.plan.schedule) << run;
    EXPECT_EQ(spec::is_moe(s.model), spec::is_moe(q.model)) << run;
    // The engine carries out recomputation and sequence parallelism: they stay.
    EXPECT_EQ(s.plan.recompute, q.plan.recompute) << run;
    EXPECT_EQ(s.plan.sequence_parallel, q.plan.sequence_parallel && s.plan.tp > 1) << run;
    const spec::RunSpec exported = spec::parse_run(export_pipetune(q), run);
    EXPECT_EQ(exported.plan.recompute, s.plan.recompute) << run;
    EXPECT_EQ(exported.plan.sequence_parallel, s.plan.sequence_parallel) << run;
    EXPECT_EQ(s.plan.zero_stage, q.plan.zero_stage) << run;  // ZeRO 0 to 3 alike
    EXPECT_EQ(exported.plan.zero_stage, q.plan.zero_stage) << run;
  }
  // Every ZeRO stage stays, and the engine trains it.
  for (int zero : {2, 3}) {
    ExportRequest q = request("default");
    q.plan.zero_stage = zero;
    const SmallScaleRun s = shrink_to_engine(q.model, q.plan);
    EXPECT_EQ(s.plan.zero_stage, zero);
    runtime::TrainOptions o;
    o.model = s.model;
    o.plan = s.plan;
    o.steps = 1;
    EXPECT_NO_THROW(runtime::check_train_options(o)) << "zero " << zero;
  }
}

TEST(Exporters, FormatNamesRoundTripAndUnknownOnesAreListed) {
  for (const std::string& n : export_format_names())
    EXPECT_EQ(export_format_name(parse_export_format(n)), n);
  try {
    parse_export_format("slurm");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(
        std::string(e.what()).find("megatron, torchtitan, torchtitan-toml, deepspeed, pipetune"),
        std::string::npos);
  }
}

}  // namespace
}  // namespace pipetune::tuner
