// The rule checkers can fail: hand-made launch files, each breaking one framework rule, are
// caught with that rule named (and its source cited).
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tests/tuner/export/export_request_support.hpp"
#include "tuner/export/deepspeed_rules.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/export/megatron_rules.hpp"
#include "tuner/export/torchtitan_rules.hpp"

namespace pipetune::tuner {
namespace {

// Whether some violation's rule contains `rule`; the message lists them all.
testing::AssertionResult caught(const RuleViolations& v, const std::string& rule) {
  for (const RuleViolation& x : v) {
    if (x.rule.find(rule) == std::string::npos) continue;
    if (x.source.empty()) return testing::AssertionFailure() << "no source for " << x.rule;
    return testing::AssertionSuccess();
  }
  return testing::AssertionFailure() << "'" << rule << "' not caught; got:\n"
                                     << format_violations(v);
}

ExportRequest request(const char* model, int tp, int pp, int dp) {
  return export_testing::plan_request(model, tp, pp, dp, [](spec::ParallelPlan& p) {
    p.micro_batch_size = 2;
    p.zero_stage = 1;
  });
}

// ---- Megatron-LM ----

MegatronLaunch megatron_base() {  // llama3-8b tp=2 pp=4 dp=1: 32 layers, 32 heads, 8 groups
  return parse_megatron_script(export_megatron(request("llama3-8b", 2, 4, 1)));
}

RuleViolations megatron_with(const std::function<void(MegatronLaunch&)>& edit) {
  MegatronLaunch l = megatron_base();
  edit(l);
  return check_megatron_launch(l);
}

TEST(MegatronRules, TheBaseLaunchPasses) {
  EXPECT_EQ(format_violations(check_megatron_launch(megatron_base())), "");
}

TEST(MegatronRules, EachBrokenRuleIsCaught) {
  using L = MegatronLaunch;
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--tensor-parallel-size"] = "2"; }),
                     "every flag is one Megatron-LM defines"));
  EXPECT_TRUE(
      caught(megatron_with([](L& l) { l.flags.erase("--num-layers"); }), "required argument"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.gpus_per_node = 6; }),
                     "world size divisible by TP x PP x CP"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--global-batch-size"] = "9"; }),
                     "global batch divisible by micro-batch x data-parallel size"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--micro-batch-size"] = "0"; }),
                     "micro-batch size > 0"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--micro-batch-size"] = "two"; }),
                     "argparse type=int"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--num-attention-heads"] = "31"; }),
                     "attention heads divisible by TP"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--num-attention-heads"] = "24";
                       l.flags["--num-query-groups"] = "3";
                       l.flags["--tensor-model-parallel-size"] = "2";
                     }),
                     "query groups a multiple or divisor of TP"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--hidden-size"] = "4100"; }),
                     "hidden size divisible by attention heads"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--max-position-embeddings"] = "4096"; }),
                     "max position embeddings >= sequence length"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--num-virtual-stages-per-pipeline-rank"] = "2";
                       l.flags["--num-layers-per-virtual-pipeline-stage"] = "4";
                     }),
                     "at most one virtual-pipeline flag"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--num-layers"] = "30"; }),
                     "layers divisible by PP"));
  EXPECT_TRUE(
      caught(megatron_with([](L& l) { l.flags["--num-layers-per-virtual-pipeline-stage"] = "3"; }),
             "layers per stage divisible by layers per virtual stage"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--num-virtual-stages-per-pipeline-rank"] = "2";
                       l.flags["--pipeline-model-parallel-size"] = "1";
                       l.gpus_per_node = 2;
                     }),
                     "interleaved schedule needs PP > 1"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--num-virtual-stages-per-pipeline-rank"] = "2";
                       l.flags["--pipeline-model-parallel-size"] = "2";
                       l.flags["--no-overlap-p2p-communication"] = "";
                       l.gpus_per_node = 4;
                     }),
                     "(> 2 without p2p overlap)"));
  EXPECT_TRUE(
      caught(megatron_with([](L& l) { l.flags["--num-virtual-stages-per-pipeline-rank"] = "3"; }),
             "layers per pipeline rank divisible by virtual stages"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--decoder-first-pipeline-num-layers"] = "7";
                       l.flags["--decoder-last-pipeline-num-layers"] = "7";
                       l.flags["--account-for-loss-in-pipeline-split"] = "";
                     }),
                     "exclude --account-for"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--decoder-first-pipeline-num-layers"] = "7";
                       l.flags["--decoder-last-pipeline-num-layers"] = "7";
                       l.flags["--num-virtual-stages-per-pipeline-rank"] = "2";
                     }),
                     "first/last stage layers divisible by virtual stages"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--decoder-first-pipeline-num-layers"] = "7";
                       l.flags["--decoder-last-pipeline-num-layers"] = "6";
                     }),
                     "middle layers divisible by middle stages"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--decoder-first-pipeline-num-layers"] = "16";
                       l.flags["--decoder-last-pipeline-num-layers"] = "16";
                     }),
                     "middle layers exist exactly when middle stages do"));
  EXPECT_TRUE(
      caught(megatron_with([](L& l) { l.flags["--decoder-first-pipeline-num-layers"] = "0"; }),
             "first/last stage layers > 0"));
  // A pipeline layout in Megatron's own syntax (pipeline_parallel_layer_layout.py's docstring:
  // "(...)*n" and "x*n" unrolled, commas cosmetic): 32 layers over 4 stages of llama3-8b's base.
  const auto layout = [](const char* text) {
    return megatron_with([text](L& l) { l.flags["--pipeline-model-parallel-layout"] = text; });
  };
  EXPECT_EQ(format_violations(layout("Et*7|(t*9|)*2,t*7L")), "");
  EXPECT_EQ(format_violations(layout("E(tttt|)*7,ttttL")), "");  // 8 virtual stages: 2 per rank
  EXPECT_TRUE(caught(layout("Et*8|t*8|t*8|t*8L|"), "layout stages divisible by PP"));
  EXPECT_TRUE(caught(layout("t*8|Et*8|t*8|t*8L"), "layout starts with the embedding"));
  EXPECT_TRUE(caught(layout("Et*8|t*8|t*8L|t*8"), "layout ends with the loss"));
  EXPECT_TRUE(caught(layout("Et*8|t*8|t*8|t*7L"), "layout decoder layers = --num-layers"));
  EXPECT_TRUE(caught(layout("Et*8|t*8|Et*8|t*8L"), "embedding and loss exactly once"));
  EXPECT_TRUE(caught(layout("Et*8|t*8|t*8|t*8mL"), "no MTP layers"));
  EXPECT_TRUE(caught(layout("Et*8|t*8|t*8|t*8x"), "layout of layer characters"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--pipeline-model-parallel-layout"] = "Et*8|t*8|t*8|t*8L";
                       l.flags["--num-virtual-stages-per-pipeline-rank"] = "2";
                     }),
                     "at most one virtual-pipeline flag"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--pipeline-model-parallel-layout"] = "Et*8|t*8|t*8|t*8L";
                       l.flags["--decoder-first-pipeline-num-layers"] = "8";
                     }),
                     "layout excludes the other pipeline layout flags"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--expert-model-parallel-size"] = "2"; }),
                     "expert parallelism needs --num-experts"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--num-experts"] = "6";
                       l.flags["--expert-model-parallel-size"] = "4";
                     }),
                     "experts divisible by EP"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--num-experts"] = "8";
                       l.flags["--expert-model-parallel-size"] = "2";
                       l.flags.erase("--sequence-parallel");
                     }),
                     "needs --sequence-parallel"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--num-experts"] = "8";
                       l.flags.erase("--disable-bias-linear");
                     }),
                     "MoE with linear biases needs expert tensor parallel size 1"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--fp16"] = ""; }),
                     "--bf16 and --fp16 exclude each other"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags.erase("--use-distributed-optimizer"); }),
                     "--overlap-param-gather needs the distributed optimizer"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags.erase("--overlap-grad-reduce"); }),
                     "--overlap-param-gather needs --overlap-grad-reduce"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--use-megatron-fsdp"] = ""; }),
                     "Megatron-FSDP needs CUDA_DEVICE_MAX_CONNECTIONS other than 1"));
  EXPECT_TRUE(caught(megatron_with([](L& l) {
                       l.flags["--use-megatron-fsdp"] = "";
                       l.cuda_device_max_connections.clear();
                     }),
                     "Megatron-FSDP needs --ckpt-format fsdp_dtensor"));
  // What Megatron-LM at d98e8a6 only warns about is accepted: TP without
  // CUDA_DEVICE_MAX_CONNECTIONS=1, grouped GEMM in fp32, EP with fp16.
  EXPECT_EQ(format_violations(megatron_with([](L& l) { l.cuda_device_max_connections.clear(); })),
            "");
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--recompute-method"] = "uniform"; }),
                     "selective recompute takes no --recompute-method"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--recompute-granularity"] = "full"; }),
                     "full recompute needs --recompute-method"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--recompute-granularity"] = "some"; }),
                     "recompute granularity is full or selective"));
  EXPECT_TRUE(caught(megatron_with([](L& l) { l.flags["--min-lr"] = "1.0"; }), "--min-lr <= --lr"));
}

TEST(MegatronRules, TheScriptParserReadsFlagsAndLaunchSizeFromText) {
  const std::string script =
      "#!/usr/bin/env bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\nGPUS_PER_NODE=4\nNNODES=2\n"
      "ARGS=(\n  --tensor-model-parallel-size 3\n  --num-layers 24\n  --hidden-size 768\n"
      "  --num-attention-heads 12\n  --max-position-embeddings 1024\n  --micro-batch-size 1\n)\n";
  const MegatronLaunch l = parse_megatron_script(script);
  EXPECT_EQ(l.world_size(), 8);
  EXPECT_EQ(l.cuda_device_max_connections, "1");
  EXPECT_TRUE(caught(check_megatron_launch(l), "world size divisible by TP x PP x CP"));
  EXPECT_THROW((void)parse_megatron_script("echo hello\n"), InputError);
}

// ---- torchtitan ----

struct Titan {
  std::string toml;
  TorchtitanLaunch launch;
};

Titan titan_base() {  // llama3-8b tp=2 pp=4 dp=1, v-half: a CSV with V placement
  ExportRequest q = request("llama3-8b", 2, 4, 1);
  q.plan.schedule = "v-half";
  q.plan.chunks = 0;
  spec::apply_defaults(q.plan);
  Titan t;
  t.toml = export_torchtitan_toml(q);
  t.launch = {8, 32, embedded_schedule_csv(t.toml), torchtitan_shape(q.model)};
  return t;
}

// The base with each `key = ...` replaced by its line (or the line added to [parallelism]).
RuleViolations titan_with_lines(const std::vector<std::pair<std::string, std::string>>& edits,
                                std::function<void(TorchtitanLaunch&)> edit = nullptr) {
  Titan t = titan_base();
  for (const auto& [key, line] : edits) {
    const std::size_t at = t.toml.find("\n" + key + " = ");
    if (at != std::string::npos) {
      const std::size_t end = t.toml.find('\n', at + 1);
      t.toml.replace(at + 1, end - at - 1, line);
    } else {
      const std::size_t par = t.toml.find("[parallelism]\n");
      t.toml.insert(par + 14, line + "\n");
    }
  }
  if (edit) edit(t.launch);
  return check_torchtitan_config(t.toml, t.launch);
}

RuleViolations titan_with(const std::string& key, const std::string& line,
                          std::function<void(TorchtitanLaunch&)> edit = nullptr) {
  return titan_with_lines({{key, line}}, std::move(edit));
}

TEST(TorchtitanRules, TheBaseConfigPasses) {
  const Titan t = titan_base();
  ASSERT_FALSE(t.launch.schedule_csv.empty());
  EXPECT_EQ(format_violations(check_torchtitan_config(t.toml, t.launch)), "");
}

TEST(TorchtitanRules, EachBrokenRuleIsCaught) {
  EXPECT_TRUE(
      caught(titan_with("x", "pipeline_parallel_stages = 8"), "every key is a JobConfig field"));
  EXPECT_TRUE(caught(titan_with("mode", "mode = \"partial\""), "activation_checkpoint.mode"));
  EXPECT_TRUE(caught(titan_with("selective_ac_option", "selective_ac_option = \"half\""),
                     "selective_ac_option"));
  EXPECT_TRUE(caught(titan_with("mixed_precision_param", "mixed_precision_param = \"float16\""),
                     "mixed_precision_param"));
  EXPECT_TRUE(
      caught(titan_with("tensor_parallel_degree", "tensor_parallel_degree = 4"), "= world size"));
  EXPECT_TRUE(caught(titan_with("tensor_parallel_degree", "tensor_parallel_degree = 0"),
                     "parallel degrees >= 1"));
  EXPECT_TRUE(caught(titan_with("data_parallel_shard_degree", "data_parallel_shard_degree = -2"),
                     "data_parallel_shard_degree is -1 or >= 1"));
  EXPECT_TRUE(caught(titan_with("expert_parallel_degree", "expert_parallel_degree = 3"),
                     "dp_shard x CP x TP divisible by ETP x EP (the expert mesh)"));
  EXPECT_TRUE(caught(
      titan_with_lines({{"expert_parallel_degree", "expert_parallel_degree = 2"},
                        {"expert_tensor_parallel_degree", "expert_tensor_parallel_degree = 3"}}),
      "with EP, expert TP is TP or 1"));
  // torchtitan raises NotImplementedError (dual_pipe_v.py get_dual_pipe_v_flag); the base runs
  // selective activation checkpointing.
  EXPECT_TRUE(caught(titan_with_lines({{"expert_parallel_degree", "expert_parallel_degree = 2"},
                                       {"pipeline_parallel_schedule",
                                        "pipeline_parallel_schedule = \"DualPipeV\""}}),
                     "EP with DualPipeV and activation checkpointing cannot be used together"));
  EXPECT_TRUE(caught(titan_with("flavor", "flavor = \"llama3-8b\""),
                     "[model] flavor is a key of the TrainSpec's model_args"));
  EXPECT_TRUE(
      caught(titan_with("name", "name = \"gpt3\""), "[model] name is a registered TrainSpec"));
  EXPECT_TRUE(
      caught(titan_with("flavor", "flavor = \"70B\""), "the flavor's shape is the plan's model"));
  EXPECT_TRUE(caught(titan_with("global_batch_size", "global_batch_size = 20"),
                     "global batch divisible by local batch x data-parallel degree"));
  EXPECT_TRUE(
      caught(titan_with("pipeline_parallel_schedule", "pipeline_parallel_schedule = \"VHalf\""),
             "pipeline_parallel_schedule names a torch schedule class"));
  EXPECT_TRUE(caught(
      titan_with("pipeline_parallel_microbatch_size", "pipeline_parallel_microbatch_size = 3"),
      "local batch divisible by the pipeline micro-batch size"));
  // torchtitan's defaults count the embedding and output as a layer each: 34 / 4 -> 9 stages.
  EXPECT_TRUE(caught(titan_with("pipeline_parallel_first_stage_less_layers",
                                "pipeline_parallel_first_stage_less_layers = 1"),
                     "number of stages divisible by PP"));
  EXPECT_TRUE(caught(
      titan_with("pipeline_parallel_layers_per_stage", "pipeline_parallel_layers_per_stage = 8"),
      "V schedules have exactly 2 stages per rank"));
  EXPECT_TRUE(
      caught(titan_with("pipeline_parallel_schedule", "pipeline_parallel_schedule = \"1F1B\""),
             "a single-stage schedule has 1 stage per rank"));
  EXPECT_TRUE(caught(
      titan_with("pipeline_parallel_layers_per_stage", "pipeline_parallel_layers_per_stage = 4",
                 [](TorchtitanLaunch& l) { l.schedule_csv.clear(); }),
      "schedule CSV file exists"));
  // Without layers per stage, a V class builds 2 stages per rank: 8 stages for debugmodel's 6
  // layers (the flavor's layer count is what torchtitan splits).
  EXPECT_TRUE(caught(titan_with_lines({{"pipeline_parallel_layers_per_stage", "# none"},
                                       {"flavor", "flavor = \"debugmodel\""}}),
                     "no more stages than effective layers"));
}

TEST(TorchtitanRules, EachBrokenScheduleCsvRuleIsCaught) {
  // 2 ranks, 1 stage each, 2 micro-batches: rows are ranks, loop placement.
  auto check = [](const std::string& csv, bool v = false, int stages = 2) {
    return check_pipelining_csv(csv, 2, stages, 2, v);
  };
  const std::string good = "0F0,0F1,0I0,0W0,0B1\n1F0,1B0,1F1,1I1,1W1\n";
  EXPECT_EQ(format_violations(check(good)), "");
  EXPECT_TRUE(caught(check("0F0,0F1,0B0,0B1\n"), "one CSV row per pipeline rank"));
  EXPECT_TRUE(caught(check("0F0,0F1,0B0,0Q1\n1F0,1B0,1F1,1B1\n"),
                     "every cell is <stage><F|I|W|B><micro-batch>"));
  EXPECT_TRUE(
      caught(check("0F0,0F1,0B0,0B1,1F0\n1F0,1B0,1F1,1B1\n"), "each stage runs on one rank"));
  EXPECT_TRUE(caught(check("1F0,1F1,1B0,1B1\n0F0,0F1,0B0,0B1\n"),
                     "stage placed where torchtitan builds it"));
  EXPECT_TRUE(caught(check("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", true, 4),
                     "every stage runs each micro-batch's forward and backward"));
  EXPECT_TRUE(caught(check("0F0,0B0,0B1\n1F0,1B0,1F1,1B1\n"), "backward after its forward"));
  EXPECT_TRUE(caught(check("0F0,0F1,0W0,0I0,0B1\n1F0,1B0,1F1,1B1\n"),
                     "weight backward after its input backward"));
  EXPECT_TRUE(caught(check("0F0,0F2,0B0,0B2\n1F0,1B0,1F2,1B2\n"),
                     "micro-batch index below the number of micro-batches"));
  EXPECT_TRUE(caught(check("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", false, 1),
                     "stage index below the number of stages"));
  // Rank 0 waits for stage 1's backward of micro-batch 0, which rank 1 runs only after the
  // forward of micro-batch 1 that rank 0 has not sent yet.
  EXPECT_TRUE(caught(check("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n"), "no deadlock"));
}

// ---- DeepSpeed ----

// An exported config, the model code beside it, and the launch they are checked for.
struct DeepspeedFiles {
  nlohmann::json config;
  std::string code;
  int world = 0;
  int layers = 0;
};

DeepspeedFiles deepspeed_files(ExportRequest q) {
  return {nlohmann::json::parse(export_deepspeed(q)), deepspeed_model_code(q), q.plan.world_size(),
          static_cast<int>(q.model.layers)};
}

// llama3-8b pp=4 dp=2 1F1B, full recomputation, ZeRO-1: a PipelineModule.
DeepspeedFiles deepspeed_pipeline() {
  ExportRequest q = request("llama3-8b", 1, 4, 2);
  q.plan.recompute = spec::Recompute::Full;
  return deepspeed_files(q);
}

// llama3-8b tp=2 dp=4: AutoTP, no pipeline.
DeepspeedFiles deepspeed_autotp() {
  ExportRequest q = request("llama3-8b", 2, 1, 4);
  q.plan.sequence_parallel = false;
  q.plan.recompute = spec::Recompute::None;
  return deepspeed_files(q);
}

// mixtral-8x7b dp=8 ep=4: AutoEP, no pipeline.
DeepspeedFiles deepspeed_autoep() {
  ExportRequest q = request("mixtral-8x7b", 1, 1, 8);
  q.plan.ep = 4;
  q.plan.recompute = spec::Recompute::None;
  return deepspeed_files(q);
}

RuleViolations deepspeed_check(const DeepspeedFiles& f) {
  return check_deepspeed_config(f.config.dump(), DeepspeedLaunch{f.world, f.layers, f.code});
}

RuleViolations deepspeed_with(DeepspeedFiles f, const std::function<void(DeepspeedFiles&)>& edit) {
  edit(f);
  return deepspeed_check(f);
}

// The model code with `from` replaced by `to` (`from` must be there).
std::string replaced(std::string code, const std::string& from, const std::string& to) {
  const std::size_t at = code.find(from);
  EXPECT_NE(at, std::string::npos) << from << " not in\n" << code;
  if (at != std::string::npos) code.replace(at, from.size(), to);
  return code;
}

TEST(DeepspeedRules, EachBrokenBatchAndKeyRuleIsCaught) {
  const DeepspeedFiles pipe = deepspeed_pipeline();
  ASSERT_EQ(format_violations(deepspeed_check(pipe)), "");
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    return deepspeed_with(pipe, [&](DeepspeedFiles& f) { edit(f.config); });
  };
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["train_batch_size"] = 10; }),
                     "train_batch_size = micro-batch x gradient accumulation x data-parallel"));
  // The same files on twice the GPUs double the grid's DP and break the identity.
  EXPECT_TRUE(
      caught(deepspeed_with(pipe, [](DeepspeedFiles& f) { f.world = 16; }), "train_batch_size ="));
  EXPECT_TRUE(caught(deepspeed_with(pipe, [](DeepspeedFiles& f) { f.world = 10; }),
                     "num_stages divides the world size"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) {
                       j["train_micro_batch_size_per_gpu"] = 0;
                       j["train_batch_size"] = 0;
                     }),
                     "train_batch_size > 0"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) {
                       j.erase("train_batch_size");
                       j.erase("train_micro_batch_size_per_gpu");
                     }),
                     "train_batch_size or train_micro_batch_size_per_gpu is given"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["gradient_accumulation_steps"] = "8"; }),
                     "gradient_accumulation_steps has the type DeepSpeed reads"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["zero_optimization"]["stage"] = 2; }),
                     "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["zero_optimization"]["stage"] = 4; }),
                     "ZeRO stage is 0..3"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) {
                       j["fp16"] = {{"enabled", true}};
                     }),
                     "bf16 and fp16 are not both enabled"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["pipeline"]["pipe_partitioned"] = 1; }),
                     "pipeline.pipe_partitioned has the type DeepSpeed reads"));
  // What the old export wrote: keys DeepSpeed never reads.
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["pipeline"]["stages"] = 4; }),
                     "a key DeepSpeed reads in pipeline"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["pipeline"]["partition"] = "uniform"; }),
                     "a key DeepSpeed reads in pipeline"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["pipeline_stages"] = 4; }),
                     "a top-level key DeepSpeed reads"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["zero_optimization"]["partition"] = true; }),
                     "a key DeepSpeed reads in zero_optimization"));
  EXPECT_THROW((void)check_deepspeed_config("{not json", DeepspeedLaunch{8, 32, ""}), InputError);
}

TEST(DeepspeedRules, EachBrokenPipelineRuleIsCaught) {
  const DeepspeedFiles pipe = deepspeed_pipeline();
  ASSERT_NE(pipe.code.find("DECODER_LAYERS_PER_STAGE = [8, 8, 8, 8]"), std::string::npos)
      << pipe.code;
  auto with_code = [&](const std::string& from, const std::string& to) {
    return deepspeed_with(pipe, [&](DeepspeedFiles& f) { f.code = replaced(f.code, from, to); });
  };
  EXPECT_TRUE(caught(with_code("[8, 8, 8, 8]", "[8, 8, 8, 7]"),
                     "the stages hold every decoder layer once"));
  EXPECT_TRUE(
      caught(with_code("[8, 8, 8, 8]", "[8, 8, 16]"), "one layer count per pipeline stage"));
  // A pipeline that is no PipelineModule: DeepSpeed builds no pipeline engine.
  EXPECT_TRUE(
      caught(deepspeed_with(pipe, [](DeepspeedFiles& f) { f.code = "PIPELINE_STAGES = 4\n"; }),
             "a pipeline is a PipelineModule"));
  // AutoTP inside a pipeline.
  EXPECT_TRUE(caught(deepspeed_with(pipe,
                                    [](DeepspeedFiles& f) {
                                      f.config["tensor_parallel"] = {{"autotp_size", 2}};
                                    }),
                     "AutoTP is not combined with a pipeline"));
  // AutoEP inside a PipelineModule.
  EXPECT_TRUE(
      caught(deepspeed_with(pipe,
                            [](DeepspeedFiles& f) {
                              f.config["expert_parallel"] = {{"enabled", true}, {"autoep_size", 2}};
                            }),
             "AutoEP is not used in a PipelineModule"));
  EXPECT_THROW((void)check_deepspeed_config(pipe.config.dump(),
                                            DeepspeedLaunch{8, 32, "import deepspeed\n"}),
               InputError);
}

TEST(DeepspeedRules, EachBrokenAutoTpAndAutoEpRuleIsCaught) {
  const DeepspeedFiles tp = deepspeed_autotp();
  ASSERT_EQ(format_violations(deepspeed_check(tp)), "");
  // DeepSpeedConfig has no mpu without a pipeline: its batch world is every rank, AutoTP's
  // included, so the plan's DP (world / tp) breaks the batch assertion.
  EXPECT_TRUE(caught(deepspeed_with(tp,
                                    [](DeepspeedFiles& f) {
                                      f.config["train_batch_size"] =
                                          f.config["train_batch_size"].get<int>() / 2;
                                    }),
                     "train_batch_size ="));
  EXPECT_TRUE(caught(
      deepspeed_with(tp, [](DeepspeedFiles& f) { f.config["tensor_parallel"]["autotp_size"] = 3; }),
      "autotp_size divides the world size"));
  EXPECT_TRUE(caught(
      deepspeed_with(tp, [](DeepspeedFiles& f) { f.config["tensor_parallel"]["tp_size"] = 2; }),
      "a key DeepSpeed reads in tensor_parallel"));

  const DeepspeedFiles ep = deepspeed_autoep();
  ASSERT_EQ(format_violations(deepspeed_check(ep)), "");
  auto with_ep = [&](const std::function<void(nlohmann::json&)>& edit) {
    return deepspeed_with(ep, [&](DeepspeedFiles& f) { edit(f.config["expert_parallel"]); });
  };
  EXPECT_TRUE(caught(with_ep([](nlohmann::json& s) { s["preset_model"] = "llama"; }),
                     "AutoEP's preset_model is one of its presets"));
  EXPECT_TRUE(
      caught(with_ep([](nlohmann::json& s) { s["autoep_size"] = 3; }), "divide the stage size"));
  EXPECT_TRUE(caught(with_ep([](nlohmann::json& s) { s["expert_tensor_parallel_size"] = 2; }),
                     "expert_tensor_parallel_size is 1"));
  EXPECT_TRUE(caught(with_ep([](nlohmann::json& s) { s["ep_size"] = 4; }),
                     "a key DeepSpeed reads in expert_parallel"));
  EXPECT_TRUE(caught(deepspeed_with(ep,
                                    [](DeepspeedFiles& f) {
                                      f.config["tensor_parallel"] = {{"autotp_size", 2}};
                                      f.config["expert_parallel"]["autoep_size"] = 1;
                                    }),
                     "AutoEP+AutoTP folding"));
}

}  // namespace
}  // namespace pipetune::tuner
