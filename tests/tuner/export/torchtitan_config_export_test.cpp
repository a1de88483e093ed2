// The torchtitan export for torchtitan's current config system (b5bcd76): a Python module whose
// function derives from torchtitan's own run of the model's flavor. Each exported module is read
// the way torchtitan runs it and checked against its start-up rules (torchtitan_config_rules:
// configs.py's dataclasses, the flavor lookup, ParallelDims._validate, the trainer's token counts,
// the pipeline's stages and the schedule CSV), says what the plan says, and every rule catches a
// module that breaks it. References: torchtitan b5bcd76's sources as torchtitan_sources.hpp cites
// them (torchtitan_config_sources), and the plan itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tests/tuner/export/export_request_support.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/export/torchtitan_config_rules.hpp"
#include "tuner/export/torchtitan_pipeline_rules.hpp"

namespace pipetune::tuner {
namespace {

using export_testing::plan_request;

TorchtitanLaunch launch_for(const ExportRequest& q) {
  TorchtitanLaunch l;
  l.world_size = q.plan.world_size();
  l.num_layers = q.model.layers;
  l.schedule_csv = export_side_file(ExportFormat::Torchtitan, q).text;
  l.model_shape = torchtitan_shape(q.model);
  return l;
}

std::string violations_text(const RuleViolations& v) {
  std::string out;
  for (const RuleViolation& x : v) out += "  " + x.rule + " (" + x.source + "): " + x.detail + "\n";
  return out;
}

std::string refusal(const ExportRequest& q) {
  try {
    (void)export_torchtitan(q);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Plans over the features the config carries: schedules with a torch class and without one (a
// CSV), interleaving, V placement, uneven splits, recomputation, sequence parallelism, ZeRO.
std::vector<ExportRequest> plans() {
  using spec::Recompute;
  std::vector<ExportRequest> out;
  const auto add = [&](const char* model, int tp, int pp, int dp, const char* schedule, int chunks,
                       Recompute rc, int zero, int micro, std::vector<int> split = {}) {
    ExportRequest q = plan_request(model, tp, pp, dp, [&](spec::ParallelPlan& p) {
      p.schedule = schedule;
      p.chunks = chunks;
      p.recompute = rc;
      p.zero_stage = zero;
      p.microbatches = micro;
      p.layer_split = split;
    });
    out.push_back(q);
  };
  add("llama3-8b", 1, 1, 8, "1f1b", 0, Recompute::None, 3, 1);
  add("llama3-8b", 2, 1, 4, "1f1b", 0, Recompute::Selective, 0, 4);
  add("llama3-8b", 2, 2, 2, "1f1b", 0, Recompute::Full, 2, 8);
  add("llama3-8b", 1, 4, 2, "gpipe", 0, Recompute::None, 0, 8);
  add("llama3-8b", 2, 2, 2, "interleaved-1f1b", 4, Recompute::None, 3, 8);
  add("llama3-8b", 1, 4, 2, "zb-h1", 0, Recompute::Selective, 0, 8);
  add("llama3-8b", 1, 4, 2, "zb-h2", 0, Recompute::None, 2, 8);
  add("llama3-70b", 4, 4, 2, "zb-v", 0, Recompute::Full, 3, 8);
  add("llama3-70b", 4, 4, 2, "v-half", 0, Recompute::None, 0, 8);
  add("llama3-70b", 8, 4, 1, "v-min", 0, Recompute::None, 0, 8);
  add("llama3-70b", 4, 4, 2, "dualpipe-v", 0, Recompute::Full, 0, 8);
  // llama3-70b over 8 stages, 80 layers split unevenly (fewer beside the vocabulary layers).
  add("llama3-70b", 4, 8, 1, "1f1b", 0, Recompute::Full, 0, 16, {9, 10, 10, 11, 10, 10, 11, 9});
  return out;
}

TEST(TorchtitanConfigExport, EveryModulePassesTorchtitansStartUpChecks) {
  int with_csv = 0;
  for (const ExportRequest& q : plans()) {
    const std::string what = q.model.name + " tp" + std::to_string(q.plan.tp) + " pp" +
                             std::to_string(q.plan.pp) + " dp" + std::to_string(q.plan.dp) + " " +
                             q.plan.schedule;
    std::string module;
    ASSERT_NO_THROW(module = export_torchtitan(q)) << what << ": " << refusal(q);
    const TorchtitanLaunch launch = launch_for(q);
    with_csv += launch.schedule_csv.empty() ? 0 : 1;
    const RuleViolations v = check_torchtitan_config_module(module, launch);
    EXPECT_TRUE(v.empty()) << what << " breaks:\n" << violations_text(v) << module;
  }
  EXPECT_EQ(with_csv, 5);  // zb-h1, zb-h2, zb-v, v-half, v-min
}

// What the module sets is the plan: degrees, ZeRO as FSDP, sequence parallelism, the schedule,
// micro-batches and tokens, the stages in model order, recomputation.
TEST(TorchtitanConfigExport, TheModuleSaysWhatThePlanSays) {
  for (const ExportRequest& q : plans()) {
    const spec::ParallelPlan& p = q.plan;
    const auto keys = parse_torchtitan_config_module(export_torchtitan(q));
    const std::string what = q.model.name + " " + p.schedule;
    EXPECT_EQ(keys.at("parallelism.tensor_parallel_degree"), std::to_string(p.tp)) << what;
    EXPECT_EQ(keys.at("parallelism.pipeline_parallel_degree"), std::to_string(p.pp)) << what;
    EXPECT_EQ(keys.at("parallelism.data_parallel_replicate_degree"),
              std::to_string(p.zero_stage == 0 ? p.dp : 1))
        << what;
    EXPECT_EQ(keys.at("parallelism.data_parallel_shard_degree"),
              std::to_string(p.zero_stage == 0 ? 1 : p.dp))
        << what;
    if (p.dp > 1 && p.zero_stage >= 2) {
      EXPECT_EQ(keys.at("parallelism.fsdp_reshard_after_forward"),
                p.zero_stage == 3 ? "\"always\"" : "\"never\"")
          << what;
    }
    EXPECT_EQ(keys.at("parallelism.enable_sequence_parallel"), p.tp > 1 ? "True" : "False") << what;
    const std::int64_t seq = q.model.seq_len;
    EXPECT_EQ(keys.at("training.num_tokens_per_microbatch_per_dp_rank"),
              std::to_string(p.micro_batch_size * seq))
        << what;
    EXPECT_EQ(keys.at("training.num_tokens_per_train_step"), std::to_string(p.global_batch * seq))
        << what;
    EXPECT_EQ(keys.at("activation_checkpoint"),
              p.recompute == spec::Recompute::Full        ? "FullAC.Config()"
              : p.recompute == spec::Recompute::Selective ? "SelectiveAC.Config()"
                                                          : "None")
        << what;
    if (p.pp == 1) continue;
    EXPECT_EQ(keys.at("parallelism.num_pp_microbatches"), std::to_string(p.microbatches)) << what;
    // One model part per stage, each with the plan's layers.
    const auto parts =
        torchtitan_detail::string_lists(keys.at("parallelism.module_fqns_per_model_part"));
    ASSERT_TRUE(parts.has_value()) << what;
    const std::vector<int> split = spec::layer_split(q.model, p);
    ASSERT_EQ(parts->size(), split.size()) << what;
    for (std::size_t s = 0; s < split.size(); ++s) {
      int layers = 0;
      for (const std::string& m : (*parts)[s]) layers += m.rfind("layers.", 0) == 0 ? 1 : 0;
      EXPECT_EQ(layers, split[s]) << what << " stage " << s;
    }
  }
}

TEST(TorchtitanConfigExport, UnevenSplitIsWrittenModuleByModule) {
  const ExportRequest q = plans().back();
  const std::vector<int> split = spec::layer_split(q.model, q.plan);
  ASSERT_NE(split.front(), split[1]);
  const std::string module = export_torchtitan(q);
  EXPECT_NE(module.find("            [\"tok_embeddings\", \"layers.0\""), std::string::npos)
      << module;
  EXPECT_NE(module.find("\"norm\", \"lm_head\"],\n        ],"), std::string::npos) << module;
}

TEST(TorchtitanConfigExport, RefusesWhatTorchtitanCannotRun) {
  // No registered flavor: refused naming the model and what there is.
  const std::string mixtral = refusal(plan_request("mixtral-8x7b", 1, 1, 8));
  EXPECT_NE(mixtral.find("torchtitan b5bcd76 registers no model flavor with mixtral-8x7b's shape"),
            std::string::npos)
      << mixtral;
  EXPECT_NE(mixtral.find("llama3 8B"), std::string::npos) << mixtral;
  EXPECT_NE(refusal(plan_request("gpt3-175b", 8, 8, 2)).find("not SwiGLU"), std::string::npos);
  // ZeRO-1 is not FSDP.
  const std::string zero1 =
      refusal(plan_request("llama3-8b", 1, 1, 8, [](spec::ParallelPlan& p) { p.zero_stage = 1; }));
  EXPECT_NE(zero1.find("ZeRO-1 (optimizer-state sharding alone) has no torchtitan counterpart"),
            std::string::npos)
      << zero1;
  // Vocabulary parallelism is not in torchtitan.
  const std::string vocab = refusal(plan_request("llama3-8b", 1, 4, 2, [](spec::ParallelPlan& p) {
    p.vocab = schedule::VocabMode::Vocab1;
    p.schedule = "v-half";
  }));
  EXPECT_NE(vocab.find("vocabulary parallelism"), std::string::npos) << vocab;
}

// Each rule catches a module that breaks it: an edit of a module that passes, and the rule (and
// its source) the check names.
TEST(TorchtitanConfigExport, EachRuleCatchesAModuleThatBreaksIt) {
  const ExportRequest q = plans()[8];  // llama3-70b v-half: a CSV, V placement
  const std::string good = export_torchtitan(q);
  const TorchtitanLaunch launch = launch_for(q);
  ASSERT_TRUE(check_torchtitan_config_module(good, launch).empty());
  const auto edited = [&](const std::string& from, const std::string& to) {
    const std::size_t at = good.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    std::string m = good;
    if (at != std::string::npos) m.replace(at, from.size(), to);
    return m;
  };
  struct Case {
    std::string from, to, rule, source;
  };
  const std::int64_t step_tokens = q.plan.global_batch * q.model.seq_len;
  const std::vector<Case> cases = {
      {"model_registry(\"70B\")", "model_registry(\"70b\")", "a key of llama3_configs",
       "__init__.py@b5bcd76"},
      {"model_registry(\"70B\")", "model_registry(\"8B\")",
       "the flavor's shape is the plan's model", "llama3_configs"},
      {"config = llama3_70b()", "config = llama3_65b()", "derives from a run of config_registry",
       "config_registry.py@b5bcd76"},
      {"    config.training.disable_cuda_graphs = True\n", "", "CUDA graphs",
       "_validate_cuda_graphs"},
      {"        num_pp_microbatches=",
       "        pipeline_parallel_microbatch_size=1,\n        num_pp_microbatches=",
       "every field set is a field of the dataclass", "ParallelismConfig"},
      {"config.training.steps", "config.training.local_batch_size = 8\n    config.training.steps",
       "every field set is a field of the dataclass", "TrainingConfig"},
      {"tensor_parallel_degree=4", "tensor_parallel_degree=\"4\"",
       "every value has its field's type", "ParallelismConfig"},
      {"tensor_parallel_degree=4", "tensor_parallel_degree=2", "= world size",
       "ParallelDims._validate"},
      {"\"norm\", \"lm_head\"]", "\"norm\", \"output\"]", "module names are the model's",
       "pipeline_parallel.py@b5bcd76"},
      {"num_tokens_per_train_step = " + std::to_string(step_tokens),
       "num_tokens_per_train_step = " + std::to_string(step_tokens + q.model.seq_len),
       "tokens per train step divisible", "trainer.py@b5bcd76:409-428"},
      {"num_tokens_per_microbatch_per_dp_rank = 8192",
       "num_tokens_per_microbatch_per_dp_rank = 8190", "divisible by SP x 2CP",
       "trainer.py@b5bcd76:296-307"},
      {"    return config\n", "", "the function returns the config", "_load_config"},
      {"def pipetune_plan()", "def plan()", "the function CONFIG names", "_load_config"},
      {"from torchtitan.trainer import Trainer", "from torchtitan.train import Trainer",
       "every imported name exists", "config/__init__.py"},
      {"import os\n", "", "every name used is imported", "_load_config"},
      {"    config.compile = CompileConfig()\n",
       "    config.compile = CompileConfig()\n    config.float8 = True\n",
       "a statement pipetune's exports write", "_load_config"},
      {"pipeline_parallel_schedule=\"ZBVZeroBubble\"", "pipeline_parallel_schedule=\"ZBV\"",
       "names a torch schedule class", "get_schedule_class"},
      {"pipeline_parallel_schedule=\"ZBVZeroBubble\"",
       "pipeline_parallel_schedule=\"PipelineScheduleMulti\"", "",
       ""},  // loop placement: the V-placed CSV no longer fits (checked by the CSV rules)
  };
  for (const Case& c : cases) {
    const std::string module = edited(c.from, c.to);
    const RuleViolations v = check_torchtitan_config_module(module, launch);
    ASSERT_FALSE(v.empty()) << "not caught: " << c.from << " -> " << c.to;
    if (c.rule.empty()) continue;
    const bool named = std::any_of(v.begin(), v.end(), [&](const RuleViolation& x) {
      return x.rule.find(c.rule) != std::string::npos &&
             x.source.find(c.source) != std::string::npos;
    });
    EXPECT_TRUE(named) << c.from << " -> " << c.to << ": expected '" << c.rule << "' from "
                       << c.source << ", got:\n"
                       << violations_text(v);
  }
  // Without the CSV beside it, torchtitan stops (os.path.isfile).
  TorchtitanLaunch no_csv = launch;
  no_csv.schedule_csv.clear();
  EXPECT_NE(violations_text(check_torchtitan_config_module(good, no_csv))
                .find("the schedule CSV file exists"),
            std::string::npos);
}

TEST(TorchtitanConfigExport, NamesItsTargetAndHowToLaunch) {
  const ExportRequest q = plans()[2];
  const std::string module = export_torchtitan(q);
  EXPECT_NE(module.find("# torchtitan run config for torchtitan b5bcd76"), std::string::npos);
  EXPECT_NE(module.find("NGPU=" + std::to_string(q.plan.world_size()) + " MODULE="),
            std::string::npos)
      << module;
  EXPECT_NE(module.find("CONFIG=pipetune_plan ./run_train.sh"), std::string::npos) << module;
  EXPECT_NE(std::string(torchtitan_export_target()).find("b5bcd76"), std::string::npos);
  EXPECT_EQ(export_format_name(ExportFormat::Torchtitan), "torchtitan");
  EXPECT_EQ(parse_export_format("torchtitan-toml"), ExportFormat::TorchtitanToml);
  // Each b5bcd76 flavor derives from its own run.
  for (const TorchtitanFlavor& f : torchtitan_config_flavors()) EXPECT_FALSE(f.base_config.empty());
  EXPECT_THROW((void)parse_torchtitan_config_module("x = 1\n"), InputError);
}

}  // namespace
}  // namespace pipetune::tuner
