// The DeepSpeed export on the plans users get for the presets' models (dense llama3-8b,
// llama3-70b, gpt3-175b; MoE mixtral-8x7b): every plan of a grid over the degrees, schedules,
// uneven splits, recomputation, sequence parallelism, ZeRO and expert parallelism is either
// written, the JSON and its model code passing DeepSpeed's rules as DeepSpeed 0.19.6 reads them
// (deepspeed_rules), or refused with a reason naming what DeepSpeed cannot run.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/export/deepspeed_rules.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::tuner {
namespace {

struct Grid {
  const char* model;
  std::vector<int> tps, pps, dps;
};

struct Variant {
  std::string schedule;
  spec::Recompute recompute;
  bool sequence_parallel;
  int zero;
  bool uneven;  // the search's redistributed split (layers moved off the last stage)
};

std::vector<Variant> variants() {
  using R = spec::Recompute;
  return {{"1f1b", R::None, false, 1, false},     {"1f1b", R::Full, false, 0, false},
          {"1f1b", R::Selective, true, 1, false}, {"1f1b", R::Full, false, 1, true},
          {"1f1b", R::None, true, 3, false},      {"interleaved-1f1b", R::Full, false, 1, false},
          {"zb-v", R::None, false, 1, false},     {"1f1b", R::None, false, 2, true}};
}

// Fills q with the plan; false when spec::validate refuses it (not a plan the tuner gives).
bool make_request(const Grid& g, int tp, int pp, int dp, int ep, const Variant& v,
                  ExportRequest& q) {
  q = ExportRequest{};
  q.model = spec::load_model(g.model);
  spec::ParallelPlan& p = q.plan;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.ep = ep;
  p.schedule = pp > 1 ? v.schedule : "1f1b";
  p.chunks = 0;
  p.microbatches = 2 * pp;
  p.recompute = v.recompute;
  p.sequence_parallel = v.sequence_parallel && tp > 1;
  p.zero_stage = v.zero;
  if (v.uneven && pp > 1 && p.schedule == "1f1b")
    p.layer_split =
        redistributed_layer_split(q.model.layers, pp, 0.0, output_layer_in_layers(q.model));
  spec::apply_defaults(p);
  q.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), p.world_size());
  try {
    spec::validate(q.model, q.cluster, p);
  } catch (const InputError&) {
    return false;
  }
  return true;
}

// The features a DeepSpeed refusal names (deepspeed_export.cpp), one of which each must name.
bool names_a_feature(const std::string& reason) {
  for (const char* feature : {"schedule ", "virtual pipeline stages", "vocabulary parallelism",
                              "ZeRO stage", "tensor parallelism (tp=", "sequence parallelism",
                              "selective recomputation", "expert parallelism (ep="})
    if (reason.find(feature) != std::string::npos) return true;
  return false;
}

TEST(DeepspeedPresetsExport, EveryPlanIsWrittenAndPassesDeepSpeedsRulesOrRefusedByName) {
  const std::vector<Grid> grids = {{"llama3-8b", {1, 2, 8}, {1, 2, 4}, {1, 2, 8}},
                                   {"llama3-70b", {1, 4, 8}, {1, 4, 8}, {2, 8}},
                                   {"gpt3-175b", {1, 8}, {1, 8, 16}, {2, 8}},
                                   {"mixtral-8x7b", {1, 2}, {1, 4}, {4, 8}}};
  std::map<std::string, int> written, refused;
  for (const Grid& g : grids)
    for (int tp : g.tps)
      for (int pp : g.pps)
        for (int dp : g.dps)
          for (int ep : {1, 2, 8})
            for (const Variant& v : variants()) {
              ExportRequest q;
              if ((ep > 1 && std::string(g.model) != "mixtral-8x7b") || dp % ep != 0 ||
                  !make_request(g, tp, pp, dp, ep, v, q))
                continue;
              const std::string what = q.model.name + " tp=" + std::to_string(tp) +
                                       " pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) +
                                       " ep=" + std::to_string(ep) + " " + q.plan.schedule;
              try {
                const std::string json = export_deepspeed(q);
                const std::string code = deepspeed_model_code(q);
                const DeepspeedLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers),
                                             code};
                EXPECT_EQ(format_violations(check_deepspeed_config(json, launch)), "")
                    << what << "\n"
                    << json << code;
                ++written[q.model.name];
              } catch (const InputError& e) {
                const std::string reason = e.what();
                EXPECT_EQ(reason.rfind("deepspeed: ", 0), 0u) << what << ": " << reason;
                EXPECT_TRUE(names_a_feature(reason)) << what << ": " << reason;
                ++refused[q.model.name];
              }
            }
  for (const Grid& g : grids) {
    EXPECT_GT(written[g.model], 3) << g.model << " (refused " << refused[g.model] << ")";
    EXPECT_GT(refused[g.model], 0) << g.model;
  }
}

TEST(DeepspeedPresetsExport, Llama70bUnevenSplitIsWrittenInThePipelineModule) {
  ExportRequest q;
  q.model = spec::load_model("llama3-70b");
  q.plan.pp = 8;
  q.plan.dp = 8;
  q.plan.microbatches = 16;
  q.plan.zero_stage = 1;
  q.plan.recompute = spec::Recompute::Full;
  q.plan.layer_split = {10, 11, 10, 10, 10, 10, 10, 9};
  spec::apply_defaults(q.plan);
  q.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), q.plan.world_size());
  ASSERT_NO_THROW(spec::validate(q.model, q.cluster, q.plan));
  const std::string code = deepspeed_model_code(q);
  EXPECT_NE(code.find("DECODER_LAYERS_PER_STAGE = [10, 11, 10, 10, 10, 10, 10, 9]\n"),
            std::string::npos)
      << code;
  const DeepspeedLaunch launch{64, 80, code};
  EXPECT_EQ(format_violations(check_deepspeed_config(export_deepspeed(q), launch)), "");
}

TEST(DeepspeedPresetsExport, MixtralExpertsAreAutoEpOrRefusedNamingExpertTensorParallelism) {
  ExportRequest q;
  q.model = spec::load_model("mixtral-8x7b");
  q.plan.dp = 8;
  q.plan.ep = 8;
  q.plan.zero_stage = 2;
  spec::apply_defaults(q.plan);
  q.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), q.plan.world_size());
  const std::string json = export_deepspeed(q);
  EXPECT_NE(json.find("\"expert_parallel\": {\n    \"enabled\": true,\n    \"autoep_size\": 8"),
            std::string::npos)
      << json;
  EXPECT_EQ(format_violations(
                check_deepspeed_config(json, DeepspeedLaunch{8, 32, deepspeed_model_code(q)})),
            "");
  // Mixtral's experts are gated: tensor-parallel with the rest, which AutoEP cannot do.
  q.plan.tp = 2;
  q.plan.dp = 4;
  q.plan.ep = 4;
  q.plan.global_batch = 0;
  q.plan.microbatches = 0;
  spec::apply_defaults(q.plan);
  try {
    (void)export_deepspeed(q);
    FAIL() << "expert tensor parallelism written";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expert tensor parallelism"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::tuner
