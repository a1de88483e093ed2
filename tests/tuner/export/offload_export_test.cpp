// Offload (KARMA, issue 46 point 4) in the exports. Each framework gets the plan's
// offload_activations and offload_optimizer as its own options, spelled as its source parses
// them (the references below, each with the file and line it is read from), or refuses the plan
// naming the setting and why; what is written passes the framework's rules (megatron_rules,
// deepspeed_rules), whose offload rules are caught when broken; plans without offload export
// with no trace of it. The pipetune run file keeps both settings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_spec.hpp"
#include "engine/spec/validate.hpp"
#include "tests/tuner/export/export_request_support.hpp"
#include "tuner/export/deepspeed_rules.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/export/megatron_rules.hpp"

namespace pipetune::tuner {
namespace {

using export_testing::plan_request;
using spec::Recompute;

// ---- References, read from the frameworks' sources ----

// Megatron-LM (NVIDIA/Megatron-LM@d98e8a6) makes a flag of each TransformerConfig field (with
// ModelParallelConfig's) as ArgumentGroupFactory._format_arg_name does: "--" + the name with
// '_' as '-' (megatron/training/argument_utils.py@d98e8a6:95-107).
std::string megatron_field_flag(std::string field) {
  std::replace(field.begin(), field.end(), '_', '-');
  return "--" + field;
}
// ModelParallelConfig.cpu_offloading_num_layers (megatron/core/model_parallel_config.py
// @d98e8a6:461), not in _add_network_size_args' exclude list (arguments.py@d98e8a6:2279-2372).
const std::string kMegatronOffloadLayers = megatron_field_flag("cpu_offloading_num_layers");
// Hand-made flags: megatron/training/arguments.py@d98e8a6:2918 (store_true), 2922 (type=float),
// 3667 (store_true).
constexpr const char* kMegatronOptimizerOffload = "--optimizer-cpu-offload";
constexpr const char* kMegatronOffloadFraction = "--optimizer-offload-fraction";
constexpr const char* kMegatronPrecisionAware = "--use-precision-aware-optimizer";

// DeepSpeed 0.19.6 (deepspeedai/DeepSpeed@edaa722): DeepSpeedZeroConfig.offload_optimizer
// (deepspeed/runtime/zero/config.py@edaa722:164) of DeepSpeedZeroOffloadOptimizerConfig
// (zero/offload_config.py@edaa722:55-75: device, an OffloadDeviceEnum whose cpu is "cpu";
// pin_memory); the optimizer's "type" matched lower-case against 'adam' / 'adamw'
// (runtime/config.py@edaa722:73,841-842); deepspeed.checkpointing.configure's checkpoint_in_cpu
// (runtime/activation_checkpointing/checkpointing.py@edaa722:1162-1230).
const nlohmann::json kDeepspeedOffloadOptimizer = {{"device", "cpu"}, {"pin_memory", true}};
constexpr const char* kDeepspeedCheckpointInCpu =
    "deepspeed.checkpointing.configure(None, checkpoint_in_cpu=";

// ---- Helpers ----

// The file's text, or "error: " and the error.
std::string exported(ExportFormat f, const ExportRequest& q) {
  try {
    return export_plan(f, q);
  } catch (const InputError& e) {
    return std::string("error: ") + e.what();
  }
}

std::string deepspeed_code(const ExportRequest& q) {
  try {
    return deepspeed_model_code(q);
  } catch (const InputError& e) {
    return std::string("error: ") + e.what();
  }
}

// Whether `text` is a refusal by `framework` naming `setting` first, on one line.
testing::AssertionResult refused(const std::string& text, const std::string& framework,
                                 const std::string& setting) {
  const std::string head = "error: " + framework + ": " + setting;
  if (text.rfind(head, 0) != 0)
    return testing::AssertionFailure() << "expected a refusal starting '" << head << "', got:\n"
                                       << text;
  if (text.find('\n') != std::string::npos)
    return testing::AssertionFailure() << "the refusal is not one line:\n" << text;
  return testing::AssertionSuccess();
}

// Whether some violation's rule contains `rule`; the message lists them all.
testing::AssertionResult caught(const RuleViolations& v, const std::string& rule) {
  for (const RuleViolation& x : v)
    if (x.rule.find(rule) != std::string::npos && !x.source.empty())
      return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << rule << "' not caught; got:\n"
                                     << format_violations(v);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// llama3-8b (32 layers) with the plan's tp x pp x dp; `edit` sets offload and the rest.
ExportRequest offload_request(int tp, int pp, int dp,
                              const std::function<void(spec::ParallelPlan&)>& edit) {
  return plan_request("llama3-8b", tp, pp, dp, edit);
}

// ---- Megatron-LM ----

// One stage, no recomputation, ZeRO-1: both settings as Megatron-LM's flags.
TEST(OffloadExport, MegatronWritesItsCpuOffloadFlags) {
  const ExportRequest q = offload_request(8, 1, 1, [](spec::ParallelPlan& p) {
    p.recompute = Recompute::None;
    p.zero_stage = 1;
    p.offload_activations = true;
    p.offload_optimizer = true;
  });
  const std::string script = exported(ExportFormat::Megatron, q);
  ASSERT_EQ(script.rfind("error: ", 0), std::string::npos) << script;
  const MegatronLaunch l = parse_megatron_script(script);
  // Every layer but the last (Megatron-LM allows fewer than --num-layers; the last layer's
  // backward comes first, so its activations stay).
  ASSERT_EQ(l.flags.count(kMegatronOffloadLayers), 1u) << script;
  EXPECT_EQ(l.flags.at(kMegatronOffloadLayers), "31");
  EXPECT_NE(script.find("\n  " + kMegatronOffloadLayers + " 31\n"), std::string::npos) << script;
  ASSERT_EQ(l.flags.count(kMegatronOptimizerOffload), 1u) << script;
  EXPECT_EQ(l.flags.at(kMegatronOptimizerOffload), "") << "a switch";
  ASSERT_EQ(l.flags.count(kMegatronOffloadFraction), 1u) << script;
  EXPECT_DOUBLE_EQ(std::stod(l.flags.at(kMegatronOffloadFraction)), 1.0) << "every state";
  EXPECT_EQ(l.flags.count(kMegatronPrecisionAware), 1u) << script;
  EXPECT_EQ(l.flags.count("--use-distributed-optimizer"), 1u) << script;
  EXPECT_EQ(l.flags.count("--recompute-granularity"), 0u) << script;
  EXPECT_EQ(format_violations(check_megatron_launch(l)), "") << script;
}

// ZeRO 0 over one replica: the distributed optimizer the offload runs in shards nothing.
TEST(OffloadExport, MegatronRunsAnOffloadedZeroZeroOptimizerOverOneReplicaDistributed) {
  const ExportRequest q = offload_request(8, 1, 1, [](spec::ParallelPlan& p) {
    p.zero_stage = 0;
    p.offload_optimizer = true;
  });
  const std::string script = exported(ExportFormat::Megatron, q);
  ASSERT_EQ(script.rfind("error: ", 0), std::string::npos) << script;
  const MegatronLaunch l = parse_megatron_script(script);
  EXPECT_EQ(l.flags.count("--use-distributed-optimizer"), 1u) << script;
  EXPECT_EQ(l.flags.count(kMegatronOptimizerOffload), 1u) << script;
  EXPECT_EQ(l.flags.count(kMegatronOffloadLayers), 0u) << "activations stay: " << script;
  EXPECT_EQ(format_violations(check_megatron_launch(l)), "") << script;
}

// Megatron-FSDP (ZeRO 2/3) sets the distributed optimizer itself (arguments.py@d98e8a6:1135).
TEST(OffloadExport, MegatronOffloadsTheOptimizerUnderFsdp) {
  for (int zero : {2, 3}) {
    const ExportRequest q = offload_request(2, 1, 4, [zero](spec::ParallelPlan& p) {
      p.zero_stage = zero;
      p.offload_optimizer = true;
    });
    const std::string script = exported(ExportFormat::Megatron, q);
    ASSERT_EQ(script.rfind("error: ", 0), std::string::npos) << zero << ": " << script;
    const MegatronLaunch l = parse_megatron_script(script);
    EXPECT_EQ(l.flags.count("--use-megatron-fsdp"), 1u) << zero;
    EXPECT_EQ(l.flags.count(kMegatronOptimizerOffload), 1u) << zero;
    EXPECT_EQ(format_violations(check_megatron_launch(l)), "") << zero << "\n" << script;
  }
}

TEST(OffloadExport, MegatronRefusesWhatItsCpuOffloadingCannotRun) {
  // A pipeline (transformer_config.py@d98e8a6:1891).
  EXPECT_TRUE(refused(exported(ExportFormat::Megatron, offload_request(2, 4, 1,
                                                                       [](spec::ParallelPlan& p) {
                                                                         p.recompute =
                                                                             Recompute::None;
                                                                         p.offload_activations =
                                                                             true;
                                                                       })),
                      "megatron", "offload_activations with pipeline parallelism (pp=4)"));
  // Recomputation (transformer_config.py@d98e8a6:1896).
  for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
    const std::string name(spec::recompute_name(mode));
    EXPECT_TRUE(
        refused(exported(ExportFormat::Megatron, offload_request(8, 1, 1,
                                                                 [mode](spec::ParallelPlan& p) {
                                                                   p.recompute = mode;
                                                                   p.offload_activations = true;
                                                                 })),
                "megatron", "offload_activations with recompute " + name));
  }
  // An optimizer that is not sharded, over several replicas (arguments.py@d98e8a6:1884,
  // optimizer/__init__.py@d98e8a6:1057).
  const std::string text =
      exported(ExportFormat::Megatron, offload_request(2, 1, 4, [](spec::ParallelPlan& p) {
                 p.zero_stage = 0;
                 p.offload_optimizer = true;
               }));
  EXPECT_TRUE(refused(text, "megatron", "offload_optimizer with zero_stage 0 over dp=4"));
  EXPECT_NE(text.find("--use-precision-aware-optimizer"), std::string::npos) << text;
}

TEST(OffloadExport, MegatronsOffloadRulesAreCaught) {
  const ExportRequest q = offload_request(8, 1, 1, [](spec::ParallelPlan& p) {
    p.recompute = Recompute::None;
    p.zero_stage = 1;
    p.offload_activations = true;
    p.offload_optimizer = true;
  });
  const MegatronLaunch base = parse_megatron_script(export_megatron(q));
  ASSERT_EQ(format_violations(check_megatron_launch(base)), "");
  auto with = [&](const std::function<void(MegatronLaunch&)>& edit) {
    MegatronLaunch l = base;
    edit(l);
    return check_megatron_launch(l);
  };
  using L = MegatronLaunch;
  EXPECT_TRUE(caught(with([](L& l) { l.flags[kMegatronOffloadLayers] = "32"; }),
                     "CPU offloading of fewer layers than --num-layers"));
  EXPECT_TRUE(caught(with([](L& l) {
                       l.flags["--pipeline-model-parallel-size"] = "2";
                       l.flags["--tensor-model-parallel-size"] = "4";
                     }),
                     "CPU offloading without pipeline parallelism"));
  EXPECT_TRUE(caught(with([](L& l) { l.flags["--recompute-granularity"] = "selective"; }),
                     "CPU offloading without recomputation"));
  EXPECT_TRUE(caught(with([](L& l) { l.flags.erase(kMegatronPrecisionAware); }),
                     "--optimizer-cpu-offload needs --use-precision-aware-optimizer"));
  EXPECT_TRUE(caught(with([](L& l) {
                       l.flags.erase("--use-distributed-optimizer");
                       l.flags.erase("--overlap-param-gather");
                     }),
                     "--use-precision-aware-optimizer needs the distributed optimizer"));
  EXPECT_TRUE(caught(with([](L& l) { l.flags["--cpu-offload"] = ""; }),
                     "every flag is one Megatron-LM defines"));
}

// ---- DeepSpeed ----

// Without a pipeline (the layers checkpointed by the model code) and with one (the
// PipelineModule's activation_checkpoint_interval).
TEST(OffloadExport, DeepspeedWritesZeroOffloadAndCheckpointInCpu) {
  for (int pp : {1, 4}) {
    SCOPED_TRACE("pp=" + std::to_string(pp));
    const ExportRequest q = offload_request(1, pp, 8 / pp, [](spec::ParallelPlan& p) {
      p.recompute = Recompute::Full;
      p.zero_stage = 1;
      p.offload_activations = true;
      p.offload_optimizer = true;
    });
    const std::string text = exported(ExportFormat::Deepspeed, q);
    ASSERT_EQ(text.rfind("error: ", 0), std::string::npos) << text;
    const nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_EQ(j["zero_optimization"]["offload_optimizer"], kDeepspeedOffloadOptimizer) << text;
    EXPECT_EQ(j["zero_optimization"]["stage"], 1) << text;
    // DeepSpeedCPUAdam comes from the config's Adam / AdamW (engine.py@edaa722:2107-2131).
    ASSERT_TRUE(j.contains("optimizer")) << text;
    EXPECT_EQ(lower(j["optimizer"]["type"].get<std::string>()), "adamw") << text;
    const std::string code = deepspeed_code(q);
    ASSERT_EQ(code.rfind("error: ", 0), std::string::npos) << code;
    EXPECT_NE(code.find(std::string(kDeepspeedCheckpointInCpu)), std::string::npos) << code;
    EXPECT_NE(code.find("\nACTIVATION_CPU_CHECKPOINTING = 1\n"), std::string::npos) << code;
    EXPECT_NE(code.find("\nACTIVATION_CHECKPOINT_INTERVAL = 1\n"), std::string::npos) << code;
    // The function that builds the model turns it on before any layer runs.
    const std::string builder =
        pp > 1 ? "def build_model(" : "def build_decoder_layers(decoder_layers):";
    const std::size_t at = code.find(builder);
    ASSERT_NE(at, std::string::npos) << code;
    EXPECT_NE(code.find("    configure_activation_offload()\n", at), std::string::npos) << code;
    const DeepspeedLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers), code};
    EXPECT_EQ(format_violations(check_deepspeed_config(text, launch)), "") << text << code;
  }
}

// ZeRO 0 over one replica: stage 1, which then shards nothing, so that the offload acts.
TEST(OffloadExport, DeepspeedRunsAnOffloadedZeroZeroOptimizerAsStageOneOverOneReplica) {
  const ExportRequest q = offload_request(1, 4, 1, [](spec::ParallelPlan& p) {
    p.recompute = Recompute::None;
    p.zero_stage = 0;
    p.offload_optimizer = true;
  });
  const std::string text = exported(ExportFormat::Deepspeed, q);
  ASSERT_EQ(text.rfind("error: ", 0), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["zero_optimization"]["stage"], 1) << text;
  EXPECT_EQ(j["zero_optimization"]["offload_optimizer"], kDeepspeedOffloadOptimizer) << text;
  const std::string code = deepspeed_code(q);
  EXPECT_EQ(code.find("checkpoint_in_cpu"), std::string::npos) << "activations stay: " << code;
  const DeepspeedLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers), code};
  EXPECT_EQ(format_violations(check_deepspeed_config(text, launch)), "") << text << code;
}

TEST(OffloadExport, DeepspeedRefusesWhatItCannotOffload) {
  // Activations without recomputation: checkpoint_in_cpu moves only what recomputed layers keep.
  const ExportRequest kept = offload_request(1, 1, 8, [](spec::ParallelPlan& p) {
    p.recompute = Recompute::None;
    p.offload_activations = true;
  });
  EXPECT_TRUE(refused(exported(ExportFormat::Deepspeed, kept), "deepspeed",
                      "offload_activations with recompute none"));
  EXPECT_TRUE(
      refused(deepspeed_code(kept), "deepspeed", "offload_activations with recompute none"));
  // The optimizer with ZeRO 0 over several replicas: offload_optimizer acts in ZeRO 1-3 only.
  EXPECT_TRUE(refused(exported(ExportFormat::Deepspeed, offload_request(1, 1, 8,
                                                                        [](spec::ParallelPlan& p) {
                                                                          p.recompute =
                                                                              Recompute::None;
                                                                          p.zero_stage = 0;
                                                                          p.offload_optimizer =
                                                                              true;
                                                                        })),
                      "deepspeed", "offload_optimizer with zero_stage 0 over dp=8"));
}

TEST(OffloadExport, DeepspeedsOffloadRulesAreCaught) {
  const ExportRequest q = offload_request(1, 1, 8, [](spec::ParallelPlan& p) {
    p.recompute = Recompute::Full;
    p.zero_stage = 1;
    p.offload_activations = true;
    p.offload_optimizer = true;
  });
  const nlohmann::json base = nlohmann::json::parse(export_deepspeed(q));
  const std::string code = deepspeed_model_code(q);
  const DeepspeedLaunch launch{8, 32, code};
  ASSERT_EQ(format_violations(check_deepspeed_config(base.dump(), launch)), "");
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = base;
    edit(j);
    return check_deepspeed_config(j.dump(), launch);
  };
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["zero_optimization"]["stage"] = 0; }),
                     "offload_optimizer acts in ZeRO stages 1-3 only"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j.erase("optimizer"); }),
                     "ZeRO-Offload builds DeepSpeedCPUAdam"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) { j["optimizer"]["type"] = "Lamb"; }),
                     "ZeRO-Offload builds DeepSpeedCPUAdam"));
  EXPECT_TRUE(caught(with([](nlohmann::json& j) {
                       j["zero_optimization"]["offload_optimizer"]["device"] = "gpu";
                     }),
                     "offload_optimizer.device is none, cpu or nvme"));
  EXPECT_TRUE(caught(
      with([](nlohmann::json& j) { j["zero_optimization"]["offload_optimizer"]["pin"] = true; }),
      "a key DeepSpeed reads in zero_optimization.offload_optimizer"));
  // checkpoint_in_cpu with nothing recomputed.
  std::string no_recompute = code;
  const std::string interval = "\nACTIVATION_CHECKPOINT_INTERVAL = 1\n";
  no_recompute.replace(no_recompute.find(interval), interval.size(),
                       "\nACTIVATION_CHECKPOINT_INTERVAL = 0\n");
  EXPECT_TRUE(caught(check_deepspeed_config(base.dump(), {8, 32, no_recompute}),
                     "checkpoint_in_cpu offloads what recomputed layers keep"));
}

// ---- A sweep ----

// Offloading plans over models, degrees, ZeRO stages and recomputation: every file Megatron-LM or
// DeepSpeed is given passes its rules and carries each offload setting the plan has; every
// refusal is one line naming the framework.
TEST(OffloadExport, EveryOffloadingExportOfASweepPassesItsFrameworksRules) {
  int plans = 0, megatron = 0, deepspeed = 0;
  int megatron_activations = 0, deepspeed_activations = 0;  // files offloading activations
  for (const char* model : {"llama3-8b", "gpt3-18b", "mixtral-8x7b"})
    for (int tp : {1, 2, 8})
      for (int pp : {1, 2, 4})
        for (int dp : {1, 2, 4})
          for (int zero = 0; zero <= 3; ++zero)
            for (Recompute mode : {Recompute::None, Recompute::Full})
              for (int offload : {1, 2, 3}) {  // activations, optimizer, both
                ExportRequest q = plan_request(model, tp, pp, dp, [&](spec::ParallelPlan& p) {
                  p.recompute = mode;
                  p.zero_stage = zero;
                  p.offload_activations = (offload & 1) != 0;
                  p.offload_optimizer = (offload & 2) != 0;
                });
                try {
                  spec::validate(q.model, q.cluster, q.plan);
                } catch (const InputError&) {
                  continue;
                }
                ++plans;
                const std::string what = std::string(model) + " tp=" + std::to_string(tp) +
                                         " pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) +
                                         " zero=" + std::to_string(zero) +
                                         " recompute=" + std::string(spec::recompute_name(mode)) +
                                         " offload=" + std::to_string(offload);
                const std::string script = exported(ExportFormat::Megatron, q);
                if (script.rfind("error: ", 0) == 0) {
                  EXPECT_TRUE(refused(script, "megatron", "")) << what;
                } else {
                  ++megatron;
                  megatron_activations += offload & 1;
                  const MegatronLaunch l = parse_megatron_script(script);
                  EXPECT_EQ(format_violations(check_megatron_launch(l)), "") << what << "\n"
                                                                             << script;
                  EXPECT_EQ(l.flags.count(kMegatronOffloadLayers), (offload & 1) ? 1u : 0u) << what;
                  EXPECT_EQ(l.flags.count(kMegatronOptimizerOffload), (offload & 2) ? 1u : 0u)
                      << what;
                }
                const std::string json = exported(ExportFormat::Deepspeed, q);
                if (json.rfind("error: ", 0) == 0) {
                  EXPECT_TRUE(refused(json, "deepspeed", "")) << what;
                  continue;
                }
                ++deepspeed;
                deepspeed_activations += offload & 1;
                const std::string code = deepspeed_model_code(q);
                const DeepspeedLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers),
                                             code};
                EXPECT_EQ(format_violations(check_deepspeed_config(json, launch)), "")
                    << what << "\n"
                    << json << code;
                const nlohmann::json j = nlohmann::json::parse(json);
                EXPECT_EQ(j["zero_optimization"].contains("offload_optimizer"), (offload & 2) != 0)
                    << what;
                EXPECT_EQ(code.find("checkpoint_in_cpu") != std::string::npos, (offload & 1) != 0)
                    << what;
              }
  std::printf(
      "%d offloading plans: megatron wrote %d (%d offloading activations), deepspeed %d (%d)\n",
      plans, megatron, megatron_activations, deepspeed, deepspeed_activations);
  EXPECT_GT(plans, 1000);
  EXPECT_GT(megatron, 300) << "megatron";
  EXPECT_GT(deepspeed, 100) << "deepspeed";
  EXPECT_GT(megatron_activations, 20) << "megatron with offload_activations";
  EXPECT_GT(deepspeed_activations, 20) << "deepspeed with offload_activations";
}

// ---- torchtitan ----

// torchtitan's trainer has no activation offload, and training.enable_cpu_offload (FSDP2's
// CPUOffloadPolicy) moves the parameters and gradients to the host too: both formats refuse
// both settings, for a plan they export without them.
TEST(OffloadExport, TorchtitanRefusesBothSettingsNamingThem) {
  for (ExportFormat f : {ExportFormat::Torchtitan, ExportFormat::TorchtitanToml}) {
    SCOPED_TRACE(std::string(export_format_name(f)));
    const ExportRequest plain = offload_request(2, 4, 1, {});
    ASSERT_EQ(exported(f, plain).rfind("error: ", 0), std::string::npos) << exported(f, plain);
    ExportRequest q = plain;
    q.plan.offload_activations = true;
    EXPECT_TRUE(refused(exported(f, q), "torchtitan", "offload_activations: "));
    q = plain;
    q.plan.offload_optimizer = true;
    const std::string text = exported(f, q);
    EXPECT_TRUE(refused(text, "torchtitan", "offload_optimizer: "));
    EXPECT_NE(text.find("enable_cpu_offload"), std::string::npos) << text;
  }
}

// ---- Plans without offload, and the pipetune run file ----

TEST(OffloadExport, PlansWithoutOffloadExportWithNoTraceOfIt) {
  int written = 0;
  for (const ExportRequest& q :
       {offload_request(8, 1, 1, [](spec::ParallelPlan& p) { p.recompute = Recompute::None; }),
        offload_request(1, 1, 8, [](spec::ParallelPlan& p) { p.recompute = Recompute::Full; }),
        offload_request(2, 4, 1, {})}) {
    for (const std::string& name : export_format_names()) {
      const ExportFormat f = parse_export_format(name);
      const std::string text = exported(f, q);
      if (text.rfind("error: ", 0) == 0) continue;
      ++written;
      EXPECT_EQ(lower(text).find("offload"), std::string::npos) << name << ":\n" << text;
      EXPECT_EQ(lower(export_side_file(f, q).text).find("offload"), std::string::npos) << name;
    }
  }
  EXPECT_GE(written, 8) << "most exports refused: the check tests little";
}

TEST(OffloadExport, ThePipetuneRunFileKeepsBothSettings) {
  const ExportRequest q = offload_request(2, 4, 1, [](spec::ParallelPlan& p) {
    p.offload_activations = true;
    p.offload_optimizer = true;
  });
  const std::string text = export_plan(ExportFormat::Pipetune, q);
  EXPECT_NE(text.find(" offload_activations=true offload_optimizer=true "), std::string::npos)
      << text;
  EXPECT_NE(text.find("\noffload_activations = true\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\noffload_optimizer = true\n"), std::string::npos) << text;
  const spec::RunSpec run = spec::parse_run(text, "exported");
  EXPECT_TRUE(run.plan.offload_activations);
  EXPECT_TRUE(run.plan.offload_optimizer);
  // One at a time: each key is its own setting.
  ExportRequest one = q;
  one.plan.offload_optimizer = false;
  const spec::RunSpec activations_only =
      spec::parse_run(export_plan(ExportFormat::Pipetune, one), "exported");
  EXPECT_TRUE(activations_only.plan.offload_activations);
  EXPECT_FALSE(activations_only.plan.offload_optimizer);
}

}  // namespace
}  // namespace pipetune::tuner
