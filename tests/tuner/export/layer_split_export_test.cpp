// Plans whose layers are split unevenly (the search's "redis": layers moved off the stages with
// the vocabulary layers) through every exporter: each writes the split its framework's way and
// the file passes that framework's rules (megatron_rules, torchtitan_rules, deepspeed_rules:
// DeepSpeed's split is in the PipelineModule code beside its JSON). The pipetune run file keeps
// the split at small scale; DeepSpeed writes expert parallelism as AutoEP or refuses it by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/export/deepspeed_rules.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/export/megatron_rules.hpp"
#include "tuner/export/small_scale.hpp"
#include "tuner/export/torchtitan_rules.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::tuner {
namespace {

ExportRequest redistributed(const std::string& model, int pp, const std::string& schedule) {
  ExportRequest q;
  q.model = spec::load_model(model);
  q.plan.tp = 1;
  q.plan.pp = pp;
  q.plan.dp = 1;
  q.plan.schedule = schedule;
  q.plan.microbatches = 2 * pp;
  q.plan.layer_split =
      redistributed_layer_split(q.model.layers, pp, 0.0, output_layer_in_layers(q.model));
  spec::apply_defaults(q.plan);
  q.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), q.plan.world_size());
  q.vocab_label = "redis";
  spec::validate(q.model, q.cluster, q.plan);
  return q;
}

std::string slashed(const std::vector<int>& split) {
  std::string out;
  for (int n : split) out += (out.empty() ? "" : "/") + std::to_string(n);
  return out;
}

std::string listed(const std::vector<int>& split) {
  std::string out;
  for (int n : split) out += (out.empty() ? "" : ", ") + std::to_string(n);
  return out;
}

std::string refusal(ExportFormat f, const ExportRequest& q) {
  try {
    (void)export_plan(f, q);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The transformer layers torchtitan builds on each stage, read back from the module names.
std::vector<int> torchtitan_split(const std::string& toml) {
  const auto keys = parse_torchtitan_toml(toml);
  const std::string parts = keys.at("parallelism.module_fqns_per_model_part");
  std::vector<int> out;
  for (char c : parts) {
    if (c == '[') out.push_back(0);
    if (c == 'l') ++out.back();  // each "layers.N" starts with the only 'l' of a name
  }
  out.erase(out.begin());  // the outer list
  return out;
}

TEST(LayerSplitExport, EachFrameworkWritesTheSplitOrRefusesItByName) {
  struct Case {
    const char* model;
    int pp;
    const char* schedule;
  };
  int torchtitan_written = 0, megatron_written = 0;
  for (const Case& c :
       {Case{"llama3-8b", 4, "1f1b"}, Case{"llama3-8b", 2, "1f1b"}, Case{"tiny", 8, "1f1b"},
        Case{"gpt3-18b", 4, "zb-h1"}, Case{"llama3-70b", 8, "gpipe"}}) {
    const ExportRequest q = redistributed(c.model, c.pp, c.schedule);
    const std::string what = std::string(c.model) + " pp=" + std::to_string(c.pp);
    const std::vector<int> split = q.plan.layer_split;
    ASSERT_NE(split, spec::even_layer_split(q.model.layers, c.pp)) << what;

    // DeepSpeed (on its one schedule, 1F1B): the split in the PipelineModule's code, which
    // passes DeepSpeed's rules with the config.
    ExportRequest one_f_one_b = q;
    one_f_one_b.plan.schedule = "1f1b";
    const std::string code = deepspeed_model_code(one_f_one_b);
    EXPECT_NE(code.find("DECODER_LAYERS_PER_STAGE = [" + listed(split) + "]"), std::string::npos)
        << what << "\n"
        << code;
    const DeepspeedLaunch ds{q.plan.world_size(), static_cast<int>(q.model.layers), code};
    EXPECT_EQ(format_violations(check_deepspeed_config(export_deepspeed(one_f_one_b), ds)), "")
        << what;

    // torchtitan: the modules of each stage, in the framework's rules; a model torchtitan has
    // no flavor for (tiny, GPT-3) is refused by name.
    if (!torchtitan_flavor_for(q.model, torchtitan_flavors())) {
      EXPECT_NE(refusal(ExportFormat::TorchtitanToml, q)
                    .find("registers no model flavor with " + q.model.name + "'s shape"),
                std::string::npos)
          << what;
    } else {
      const std::string titan = export_torchtitan_toml(q);
      ++torchtitan_written;
      EXPECT_EQ(torchtitan_split(titan), split) << what << "\n" << titan;
      TorchtitanLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers),
                              embedded_schedule_csv(titan), torchtitan_shape(q.model)};
      EXPECT_EQ(format_violations(check_torchtitan_config(titan, launch)), "") << what << "\n"
                                                                               << titan;
    }

    // Megatron-LM (1F1B): the first and last stages' counts when only they differ, else the
    // pipeline layout; each split is written, and the layout's stages hold the split's layers.
    const MegatronLaunch l = parse_megatron_script(export_megatron(one_f_one_b));
    ++megatron_written;
    EXPECT_EQ(format_violations(check_megatron_launch(l)), "") << what;
    if (l.flags.count("--decoder-first-pipeline-num-layers") > 0) {
      EXPECT_EQ(l.flags.at("--decoder-first-pipeline-num-layers"), std::to_string(split.front()));
      EXPECT_EQ(l.flags.at("--decoder-last-pipeline-num-layers"), std::to_string(split.back()));
    } else {
      std::vector<int> stages(1, 0);
      const std::string layout = l.flags.at("--pipeline-model-parallel-layout");
      for (std::size_t k = 0; k < layout.size(); ++k) {
        if (layout[k] == '|') stages.push_back(0);
        if (layout[k] == 't')
          stages.back() +=
              k + 1 < layout.size() && layout[k + 1] == '*' ? std::stoi(layout.substr(k + 2)) : 1;
      }
      EXPECT_EQ(stages, split) << what << ": " << layout;
    }

    // pipetune: the split in the header and, kept whole, in the small-scale plan.
    const std::string run = export_pipetune(q);
    EXPECT_NE(run.find("vocab=redis layer_split=" + slashed(split)), std::string::npos) << run;
    const SmallScaleRun small = shrink_to_engine(q.model, q.plan);
    EXPECT_EQ(small.plan.layer_split, split) << what;
    EXPECT_EQ(small.model.layers, q.model.layers) << what;
    EXPECT_NO_THROW(spec::validate(small.model, q.cluster, small.plan)) << what;
  }
  EXPECT_EQ(torchtitan_written, 3);  // llama3-8b twice, llama3-70b
  EXPECT_EQ(megatron_written, 5);
}

TEST(LayerSplitExport, TorchtitanWritesLayersThatDoNotDivideOverTheStages) {
  // 32 layers over 3 ranks: 11 11 10 with one stage per rank, 6 6 5 5 5 5 with two (loop or V).
  for (const char* schedule : {"1f1b", "interleaved-1f1b", "zb-v"}) {
    ExportRequest q;
    q.model = spec::load_model("llama3-8b");
    q.plan.pp = 3;
    q.plan.schedule = schedule;
    q.plan.chunks = 0;
    q.plan.microbatches = 6;
    spec::apply_defaults(q.plan);
    q.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), q.plan.world_size());
    ASSERT_NO_THROW(spec::validate(q.model, q.cluster, q.plan)) << schedule;
    const std::string titan = export_torchtitan_toml(q);
    EXPECT_EQ(torchtitan_split(titan), spec::even_layer_split(32, q.plan.layer_groups()))
        << schedule << "\n"
        << titan;
    const TorchtitanLaunch launch{q.plan.world_size(), 32, embedded_schedule_csv(titan),
                                  torchtitan_shape(q.model)};
    EXPECT_EQ(format_violations(check_torchtitan_config(titan, launch)), "") << schedule << "\n"
                                                                             << titan;
  }
}

TEST(LayerSplitExport, TorchtitanRulesCatchAWrongModuleList) {
  const ExportRequest q = redistributed("llama3-8b", 4, "1f1b");
  const std::string good = export_torchtitan_toml(q);
  const TorchtitanLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers), "", {}};
  ASSERT_EQ(format_violations(check_torchtitan_config(good, launch)), "");
  // A layer left out, the output layer on a middle stage, a stage count PP does not divide.
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"layers.5\", ", ""},
           {"\"norm\", \"output\"]]", "\"norm\"]]"},
           {"[[\"tok_embeddings\", ", "[[\"tok_embeddings\"], ["}}) {
    std::string bad = good;
    const std::size_t at = bad.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    EXPECT_NE(format_violations(check_torchtitan_config(bad, launch)), "") << bad;
  }
}

TEST(LayerSplitExport, DeepspeedWritesExpertParallelismAsAutoEpOrRefusesIt) {
  ExportRequest q;
  q.model = spec::load_model("mixtral-8x7b");
  q.plan.tp = 1;
  q.plan.dp = 8;
  q.plan.ep = 4;
  q.plan.zero_stage = 1;
  spec::apply_defaults(q.plan);
  q.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), q.plan.world_size());
  // AutoEP (the config's expert_parallel section), with Mixtral's preset.
  const std::string json = export_deepspeed(q);
  const DeepspeedLaunch launch{q.plan.world_size(), 32, deepspeed_model_code(q)};
  EXPECT_EQ(format_violations(check_deepspeed_config(json, launch)), "") << json;
  EXPECT_NE(json.find("\"autoep_size\": 4"), std::string::npos) << json;
  EXPECT_NE(json.find("\"preset_model\": \"mixtral\""), std::string::npos) << json;
  // With a pipeline AutoEP finds no MoE blocks: refused, naming expert parallelism.
  q.plan.dp = 4;
  q.plan.pp = 2;
  q.plan.microbatches = 0;
  q.plan.global_batch = 0;
  spec::apply_defaults(q.plan);
  EXPECT_NE(refusal(ExportFormat::Deepspeed, q).find("expert parallelism (ep=4) with pipeline"),
            std::string::npos);
  // A model AutoEP has no preset for.
  ExportRequest tiny = q;
  tiny.model = spec::load_model("tiny-moe");
  tiny.plan.pp = 1;
  tiny.plan.dp = 8;
  tiny.plan.ep = 2;
  tiny.plan.microbatches = 0;
  tiny.plan.global_batch = 0;
  spec::apply_defaults(tiny.plan);
  EXPECT_NE(refusal(ExportFormat::Deepspeed, tiny).find("expert parallelism (ep=2) for tiny-moe"),
            std::string::npos)
      << refusal(ExportFormat::Deepspeed, tiny);
}

}  // namespace
}  // namespace pipetune::tuner
