// Every file the exporters write for a sweep of valid plans passes its framework's own rules
// (megatron_rules, torchtitan_rules, deepspeed_rules: the frameworks' checks as written in their
// sources at a stated version), and says what the plan says. An exporter may refuse a plan (the
// framework cannot run it); what it writes, the framework must accept.
#include <gtest/gtest.h>

#include <cstdio>

#include <toml++/toml.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/export/deepspeed_rules.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/export/megatron_rules.hpp"
#include "tuner/export/torchtitan_rules.hpp"

namespace pipetune::tuner {
namespace {

struct Sweep {
  int plans = 0;
  int written[3] = {0, 0, 0};  // megatron, torchtitan, deepspeed
  int csv = 0;                 // torchtitan exports with a schedule CSV
};

// The plans: presets' models over tp / pp / dp / ep, every schedule, virtual chunks, sequence
// parallelism, micro-batch size, micro-batch count (so the global batch), ZeRO and recompute,
// varied together by index so the sweep stays a few hundred plans.
std::vector<ExportRequest> sweep_requests() {
  std::vector<ExportRequest> out;
  const spec::ClusterSpec base = spec::load_cluster("dgx-h100-8");
  int k = 0;
  for (const char* model_name :
       {"llama3-8b", "gpt3-18b", "mixtral-8x7b", "tiny-moe", "llama3-70b"}) {
    const spec::ModelSpec model = spec::load_model(model_name);
    const bool moe = spec::is_moe(model);
    for (int tp : {1, 2, 8})
      for (int pp : {1, 2, 4})
        for (int dp : {1, 2, 4}) {
          std::vector<std::string> schedules = {"1f1b"};
          if (pp > 1) {
            schedules.clear();
            for (std::string_view s : schedule::schedule_names()) schedules.emplace_back(s);
          }
          for (const std::string& sched : schedules) {
            ++k;
            ExportRequest q;
            q.model = model;
            q.cluster = base;
            spec::ParallelPlan& p = q.plan;
            p.tp = tp;
            p.pp = pp;
            p.dp = dp;
            p.ep = moe && dp % 2 == 0 && k % 2 == 0 ? 2 : 1;
            p.schedule = sched;
            p.chunks = sched == "interleaved-1f1b" && k % 3 == 0 ? 4 : 0;
            p.micro_batch_size = 1 + k % 2;
            p.microbatches = pp * (1 + k % 3) * (sched == "dualpipe-v" ? 2 : 1);
            p.sequence_parallel = tp > 1 && (moe || k % 2 == 1);
            p.zero_stage = k % 4;
            p.recompute = static_cast<spec::Recompute>(k % 3);
            p.global_batch = 0;
            spec::apply_defaults(p);
            q.cluster.devices = p.world_size();
            try {
              spec::validate(q.model, q.cluster, p);
              (void)schedule::generate(spec::generator_params(p));
            } catch (const InputError&) {
              continue;  // not a plan the tuner would hand an exporter
            }
            out.push_back(q);
          }
        }
  }
  return out;
}

TEST(FrameworkRules, EveryExportOfASweepOfPlansPassesItsFrameworksRules) {
  Sweep s;
  for (const ExportRequest& q : sweep_requests()) {
    ++s.plans;
    const spec::ParallelPlan& p = q.plan;
    const std::string what =
        q.model.name + " tp=" + std::to_string(p.tp) + " pp=" + std::to_string(p.pp) +
        " dp=" + std::to_string(p.dp) + " ep=" + std::to_string(p.ep) + " " + p.schedule +
        " chunks=" + std::to_string(p.chunks) + " mbs=" + std::to_string(p.micro_batch_size) +
        " m=" + std::to_string(p.microbatches) + " zero=" + std::to_string(p.zero_stage);
    try {
      const std::string script = export_megatron(q);
      ++s.written[0];
      const MegatronLaunch l = parse_megatron_script(script);
      EXPECT_EQ(format_violations(check_megatron_launch(l)), "") << what << "\n" << script;
      // The launch is the plan's: Megatron's DP (world / (TP x PP)) is the plan's dp.
      EXPECT_EQ(l.world_size(), p.world_size()) << what;
      EXPECT_EQ(l.flags.at("--tensor-model-parallel-size"), std::to_string(p.tp)) << what;
      EXPECT_EQ(l.flags.at("--global-batch-size"), std::to_string(p.global_batch)) << what;
    } catch (const InputError&) {
    }
    try {
      const std::string text = export_torchtitan_toml(q);
      ++s.written[1];
      EXPECT_NO_THROW((void)toml::parse(text)) << what;
      TorchtitanLaunch launch{p.world_size(), static_cast<int>(q.model.layers),
                              embedded_schedule_csv(text), torchtitan_shape(q.model)};
      // Only models torchtitan has a flavor of are written (llama3-8b, llama3-70b here).
      EXPECT_TRUE(torchtitan_flavor_for(q.model, torchtitan_flavors()).has_value()) << what;
      if (!launch.schedule_csv.empty()) ++s.csv;
      EXPECT_EQ(format_violations(check_torchtitan_config(text, launch)), "") << what << "\n"
                                                                              << text;
      // Micro-batches per iteration: torchtitan's accumulation steps x pipeline micro-batches.
      const auto keys = parse_torchtitan_toml(text);
      const std::int64_t local = std::stoll(keys.at("training.local_batch_size"));
      const std::int64_t global = std::stoll(keys.at("training.global_batch_size"));
      EXPECT_EQ(global, p.global_batch) << what;
      EXPECT_EQ(global / p.dp / p.micro_batch_size, p.microbatches) << what;
      EXPECT_EQ(local % p.micro_batch_size, 0) << what;
    } catch (const InputError&) {
    }
    try {
      const std::string json = export_deepspeed(q);
      const std::string code = deepspeed_model_code(q);
      ++s.written[2];
      const DeepspeedLaunch launch{p.world_size(), static_cast<int>(q.model.layers), code};
      EXPECT_EQ(format_violations(check_deepspeed_config(json, launch)), "") << what << "\n"
                                                                             << json << code;
    } catch (const InputError&) {
    }
  }
  std::printf("%d plans: megatron wrote %d, torchtitan %d (%d with a schedule CSV), deepspeed %d\n",
              s.plans, s.written[0], s.written[1], s.csv, s.written[2]);
  // The sweep is not vacuous: each format wrote many of the plans, torchtitan some with CSVs.
  EXPECT_GT(s.plans, 200);
  EXPECT_GT(s.written[0], 100) << "megatron";
  EXPECT_GT(s.written[1], 60) << "torchtitan";  // llama3-8b and llama3-70b only
  // DeepSpeed refuses most of the sweep (other schedules, AutoTP with a pipeline, Megatron-style
  // sequence parallelism, selective recomputation, ZeRO 2/3 with a pipeline): about 25 remain.
  EXPECT_GT(s.written[2], 10) << "deepspeed";
  EXPECT_GT(s.csv, 15) << "torchtitan with a schedule CSV";
}

// Exporter bugs the rules found, pinned down.
ExportRequest default_request() {
  ExportRequest q;
  q.model = spec::load_model("llama3-8b");
  q.cluster = spec::load_cluster("dgx-h100-8");
  q.plan.tp = 2;
  q.plan.pp = 4;
  q.plan.dp = 1;
  q.plan.microbatches = 8;
  q.plan.sequence_parallel = true;
  spec::apply_defaults(q.plan);
  return q;
}

TEST(FrameworkRules, MegatronFsdpLeavesDeviceConnectionsUnsetAndUsesItsCheckpointFormat) {
  ExportRequest q = default_request();
  q.plan.pp = 1;
  q.plan.dp = 4;
  q.plan.zero_stage = 3;
  spec::apply_defaults(q.plan);
  const MegatronLaunch l = parse_megatron_script(export_megatron(q));
  EXPECT_NE(l.cuda_device_max_connections, "1");
  EXPECT_EQ(l.flags.at("--ckpt-format"), "fsdp_dtensor");
  EXPECT_TRUE(check_megatron_launch(l).empty()) << format_violations(check_megatron_launch(l));
}

TEST(FrameworkRules, MegatronLaunchStartsExactlyThePlansRanks) {
  ExportRequest q = default_request();  // 8 ranks
  q.cluster.devices = 8;
  q.cluster.devices_per_node = 6;  // 8 is not a multiple of 6: 2 per node on 4 nodes
  const MegatronLaunch l = parse_megatron_script(export_megatron(q));
  EXPECT_EQ(l.world_size(), 8);
  EXPECT_EQ(l.gpus_per_node, 2);
}

TEST(FrameworkRules, TorchtitanStageCountIsThePlansLayerGroups) {
  for (const char* sched : {"1f1b", "interleaved-1f1b", "v-half"}) {
    ExportRequest q = default_request();
    q.plan.schedule = sched;
    q.plan.chunks = 0;
    spec::apply_defaults(q.plan);
    const auto keys = parse_torchtitan_toml(export_torchtitan_toml(q));
    const int lps = std::stoi(keys.at("parallelism.pipeline_parallel_layers_per_stage"));
    // torchtitan: stages = ceil((layers + first_less + last_less) / layers per stage).
    const int extra = std::stoi(keys.at("parallelism.pipeline_parallel_first_stage_less_layers")) +
                      std::stoi(keys.at("parallelism.pipeline_parallel_last_stage_less_layers"));
    EXPECT_EQ((q.model.layers + extra + lps - 1) / lps, q.plan.pp * q.plan.chunks) << sched;
  }
}

TEST(FrameworkRules, TorchtitanWithoutPipelineAccumulatesOneMicroBatchPerStep) {
  ExportRequest q = default_request();
  q.plan.pp = 1;
  q.plan.tp = 2;
  q.plan.dp = 4;
  q.plan.micro_batch_size = 2;
  q.plan.microbatches = 6;
  q.plan.global_batch = 0;
  spec::apply_defaults(q.plan);
  const auto keys = parse_torchtitan_toml(export_torchtitan_toml(q));
  EXPECT_EQ(keys.at("training.local_batch_size"), "2");  // 6 accumulation steps of 2 sequences
  EXPECT_EQ(keys.at("training.global_batch_size"), "48");
}

TEST(FrameworkRules, TorchtitanRefusesExpertParallelismTheExpertMeshCannotHold) {
  // Mixtral's experts are SwiGLU: expert TP = TP = 4 (as Megatron's export writes it). Without
  // ZeRO the data-parallel ranks replicate (dp_shard 1), so dp_shard x TP = 4 cannot hold
  // ETP x EP = 8 expert ranks.
  ExportRequest q;
  q.model = spec::load_model("mixtral-8x7b");
  q.cluster = spec::load_cluster("dgx-h100-8");
  q.plan.tp = 4;
  q.plan.dp = 2;
  q.plan.ep = 2;
  q.plan.zero_stage = 0;
  q.plan.sequence_parallel = true;
  spec::apply_defaults(q.plan);
  try {
    (void)export_torchtitan_toml(q);
    FAIL() << "exported";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "ep=2 x expert tp=4 does not divide data_parallel_shard_degree x tp = 4"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::tuner
