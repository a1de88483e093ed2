// Placement in the exported files (issue 46 point 1): the tp-pp-dp rank order is Megatron-LM's
// --use-tp-pp-dp-mapping and a DeepSpeed ProcessTopology with axes (data, pipe), and torchtitan,
// whose meshes order ranks tp-dp-pp, refuses it; on a cluster of node groups every launch file
// says which nodes take which node ranks in the plan's node group order, and on one without
// node groups none of them does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_spec.hpp"
#include "tests/tuner/export/export_request_support.hpp"
#include "tuner/export/deepspeed_rules.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/export/megatron_rules.hpp"
#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner {
namespace {

using export_testing::plan_request;

void tp_pp_dp(spec::ParallelPlan& p) {
  p.rank_order = spec::RankOrder::TpPpDp;
}

std::string refusal(ExportFormat f, const ExportRequest& q) {
  try {
    (void)export_plan(f, q);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The file and the file beside it, as `pipetune export` writes them.
std::string written(ExportFormat f, const ExportRequest& q) {
  return export_plan(f, q) + export_side_file(f, q).text;
}

// h100-mixed-nic: node group 0 is nodes 0-1 (50 GB/s NICs), group 1 nodes 2-3 (25 GB/s).
ExportRequest mixed_cluster_request(int tp, int pp, int dp, std::vector<int> node_group_order) {
  ExportRequest q = plan_request("llama3-8b", tp, pp, dp, [&](spec::ParallelPlan& p) {
    p.recompute = spec::Recompute::None;  // DeepSpeed recomputes whole layers only
    p.node_group_order = node_group_order;
  });
  q.cluster = spec::load_cluster("h100-mixed-nic");
  return q;
}

TEST(PlacementExport, MegatronTakesTpPpDpAsItsMappingFlag) {
  const ExportRequest q = plan_request("llama3-8b", 2, 2, 2, tp_pp_dp);
  const std::string script = export_megatron(q);
  EXPECT_TRUE(contains(script, "\n  --use-tp-pp-dp-mapping\n")) << script;
  EXPECT_EQ(format_violations(check_megatron_script(script)), "") << script;
  // The default order is Megatron's own: no flag.
  EXPECT_FALSE(contains(export_megatron(plan_request("llama3-8b", 2, 2, 2)), "mapping"));
}

TEST(PlacementExport, MegatronRefusesTpPpDpWhereItsExpertGridDiffers) {
  // Mixtral's experts are gated: expert tp = tp = 2, so expert tp x ep = 4 != tp with a pipeline.
  ExportRequest q = plan_request("mixtral-8x7b", 2, 2, 2, [](spec::ParallelPlan& p) {
    p.ep = 2;
    p.rank_order = spec::RankOrder::TpPpDp;
  });
  const std::string why = refusal(ExportFormat::Megatron, q);
  EXPECT_TRUE(contains(why, "rank_order tp-pp-dp")) << why;
  EXPECT_TRUE(contains(why, "parallel_state.py@d98e8a6")) << why;
  // The checker finds the same rule in the default order's script given the flag.
  q.plan.rank_order = spec::RankOrder::TpDpPp;
  std::string script = export_megatron(q);
  script.replace(script.find("  --tensor-model-parallel-size"), 0, "  --use-tp-pp-dp-mapping\n");
  EXPECT_TRUE(contains(format_violations(check_megatron_script(script)), "expert TP x EP"))
      << format_violations(check_megatron_script(script));
}

TEST(PlacementExport, DeepspeedTakesTpPpDpAsAProcessTopology) {
  const ExportRequest q = plan_request("llama3-8b", 1, 2, 4, [](spec::ParallelPlan& p) {
    p.recompute = spec::Recompute::None;
    p.rank_order = spec::RankOrder::TpPpDp;
  });
  const std::string code = deepspeed_model_code(q);
  EXPECT_TRUE(contains(code, "from deepspeed.runtime.pipe import ProcessTopology\n")) << code;
  EXPECT_TRUE(
      contains(code, "ProcessTopology(axes=[\"data\", \"pipe\"], dims=[4, PIPELINE_STAGES])"))
      << code;
  EXPECT_TRUE(contains(code, "topology=topology)")) << code;
  const DeepspeedLaunch launch{q.plan.world_size(), static_cast<int>(q.model.layers), code};
  EXPECT_EQ(format_violations(check_deepspeed_config(export_deepspeed(q), launch)), "");
  // A topology whose sizes do not make the world breaks the grid's rule.
  std::string bad = code;
  bad.replace(bad.find("dims=[4,"), 8, "dims=[3,");
  const DeepspeedLaunch bad_launch{q.plan.world_size(), static_cast<int>(q.model.layers), bad};
  EXPECT_TRUE(contains(format_violations(check_deepspeed_config(export_deepspeed(q), bad_launch)),
                       "data x pipe"));
  // The default order is the PipelineModule's own topology.
  ExportRequest d = q;
  d.plan.rank_order = spec::RankOrder::TpDpPp;
  EXPECT_FALSE(contains(deepspeed_model_code(d), "ProcessTopology"));
}

TEST(PlacementExport, TorchtitanRefusesTpPpDpNamingTheSettingAndItsMesh) {
  const ExportRequest q = plan_request("llama3-8b", 2, 2, 2, tp_pp_dp);
  for (const auto& [format, source] :
       {std::pair{ExportFormat::Torchtitan, "parallel_dims.py@b5bcd76"},
        std::pair{ExportFormat::TorchtitanToml, "parallel_dims.py@238fa99"}}) {
    const std::string why = refusal(format, q);
    EXPECT_TRUE(contains(why, "torchtitan: rank_order tp-pp-dp")) << why;
    EXPECT_TRUE(contains(why, source)) << why;
  }
  // Without a pipeline both orders are the same ranks: nothing to refuse.
  const ExportRequest flat = plan_request("llama3-8b", 2, 1, 4, tp_pp_dp);
  EXPECT_NO_THROW((void)export_torchtitan(flat));
  EXPECT_NO_THROW((void)export_torchtitan_toml(flat));
}

TEST(PlacementExport, EveryLaunchFileGivesTheNodeGroupsTheirNodeRanks) {
  const std::string first =
      "node ranks 0-1 -> node group 1 (the cluster's nodes 2-3, 25 GB/s NICs)";
  const std::string second =
      "node ranks 2-3 -> node group 0 (the cluster's nodes 0-1, 50 GB/s NICs)";
  const ExportRequest q = mixed_cluster_request(2, 4, 4, {1, 0});
  const ExportRequest ds = mixed_cluster_request(1, 4, 8, {1, 0});  // DeepSpeed: no TP with PP
  for (const auto& [format, request] :
       {std::pair{ExportFormat::Megatron, &q}, std::pair{ExportFormat::Torchtitan, &q},
        std::pair{ExportFormat::TorchtitanToml, &q}, std::pair{ExportFormat::Deepspeed, &ds}}) {
    const std::string text = written(format, *request);
    const std::string name(export_format_name(format));
    EXPECT_TRUE(contains(text, "# Placement: ")) << name << "\n" << text;
    const std::size_t a = text.find("#   " + first + "\n");
    const std::size_t b = text.find("#   " + second + "\n");
    EXPECT_NE(a, std::string::npos) << name << "\n" << text;
    EXPECT_NE(b, std::string::npos) << name << "\n" << text;
    EXPECT_LT(a, b) << name;
  }
  EXPECT_EQ(format_violations(check_megatron_script(export_megatron(q))), "");
  // The listed order: group 0's nodes first.
  const std::string listed = export_megatron(mixed_cluster_request(2, 4, 4, {}));
  EXPECT_TRUE(contains(listed, "node ranks 0-1 -> node group 0 (the cluster's nodes 0-1"))
      << listed;
  EXPECT_TRUE(contains(listed, "node ranks 2-3 -> node group 1 (the cluster's nodes 2-3"))
      << listed;
}

TEST(PlacementExport, ADefaultPlanOnAHomogeneousClusterWritesNoPlacement) {
  const ExportRequest q = plan_request("llama3-8b", 2, 2, 2);
  const ExportRequest ds = plan_request(
      "llama3-8b", 1, 2, 4, [](spec::ParallelPlan& p) { p.recompute = spec::Recompute::None; });
  for (const auto& [format, request] :
       {std::pair{ExportFormat::Megatron, &q}, std::pair{ExportFormat::Torchtitan, &q},
        std::pair{ExportFormat::TorchtitanToml, &q}, std::pair{ExportFormat::Deepspeed, &ds},
        std::pair{ExportFormat::Pipetune, &q}}) {
    const std::string text = written(format, *request);
    EXPECT_FALSE(contains(text, "Placement")) << export_format_name(format) << "\n" << text;
    EXPECT_FALSE(contains(text, "node rank")) << export_format_name(format) << "\n" << text;
    EXPECT_FALSE(contains(text, "rank_order")) << export_format_name(format) << "\n" << text;
  }
  // A node group order names groups the cluster does not have.
  const ExportRequest stray = plan_request("llama3-8b", 2, 2, 2, [](spec::ParallelPlan& p) {
    p.node_group_order = {1, 0};
  });
  EXPECT_TRUE(contains(refusal(ExportFormat::Megatron, stray), "node_group_order 1,0"));
}

TEST(PlacementExport, PipetuneRunFileKeepsTheRankOrderAndRecordsTheNodeGroupOrder) {
  ExportRequest q = mixed_cluster_request(2, 4, 4, {1, 0});
  q.plan.rank_order = spec::RankOrder::TpPpDp;
  const std::string text = export_pipetune(q);
  EXPECT_TRUE(contains(text, " rank_order=tp-pp-dp node_group_order=1,0.\n")) << text;
  const spec::RunSpec run = spec::parse_run(text, "exported");
  EXPECT_EQ(run.plan.rank_order, spec::RankOrder::TpPpDp);
  EXPECT_TRUE(run.plan.node_group_order.empty());  // the small run's cluster has no node groups
}

}  // namespace
}  // namespace pipetune::tuner
