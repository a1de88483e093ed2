// Per-stage layouts (ParallelPlan::stage_tp, issue 46 point 5) in the exports. Megatron-LM,
// torchtitan (both formats) and DeepSpeed give every pipeline stage the same tensor-parallel
// size: a plan whose stages differ is refused naming stage_tp and the framework's one setting,
// and a list that gives every stage the same tp exports exactly as the plan without it (the
// reference). The pipetune run file keeps the stages' layout, shrunk to the engine's scale.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_spec.hpp"
#include "tuner/export/exporters.hpp"

namespace pipetune::tuner {
namespace {

// The default run (llama3-8b, tp=2 pp=4 dp=1, 1F1B on a DGX H100, sequence parallel).
ExportRequest default_request() {
  const spec::RunSpec r = spec::load_run("default");
  ExportRequest q;
  q.model = r.model;
  q.cluster = r.cluster;
  q.plan = r.plan;
  spec::apply_defaults(q.plan);
  return q;
}

// The default run with the stages' TP degrees `stage_tp` (llama3-8b: 32 heads, 8 KV heads and
// FFN 14336 take 1, 2, 4 and 8), on dp x sum(stage_tp) GPUs, without sequence parallelism.
ExportRequest layered_request(const std::vector<int>& stage_tp) {
  ExportRequest q = default_request();
  q.plan.stage_tp = stage_tp;
  q.plan.tp = stage_tp.front();
  q.plan.sequence_parallel = false;
  q.cluster.devices = q.plan.world_size();
  return q;
}

// The file's text, or "error: " and the error.
std::string exported(ExportFormat f, const ExportRequest& q) {
  try {
    return export_plan(f, q);
  } catch (const InputError& e) {
    return std::string("error: ") + e.what();
  }
}

struct Framework {
  ExportFormat format;
  const char* name;     // the exporter's name for itself, first in its errors
  const char* setting;  // the framework's one tensor-parallel setting
};

const std::vector<Framework> kOneTensorParallelSize = {
    {ExportFormat::Megatron, "megatron", "--tensor-model-parallel-size"},
    {ExportFormat::Torchtitan, "torchtitan", "ParallelismConfig.tensor_parallel_degree"},
    {ExportFormat::TorchtitanToml, "torchtitan", "[parallelism] tensor_parallel_degree"},
    {ExportFormat::Deepspeed, "deepspeed", "tensor_parallel.autotp_size"},
};

TEST(StageLayoutExport, StagesThatDifferAreRefusedNamingStageTpAndTheSetting) {
  for (const std::vector<int>& stage_tp :
       {std::vector<int>{4, 2, 1, 1}, std::vector<int>{2, 2, 2, 4}}) {
    const ExportRequest q = layered_request(stage_tp);
    const std::string listed = spec::stage_tp_text(stage_tp);
    for (const Framework& fw : kOneTensorParallelSize) {
      SCOPED_TRACE(std::string(export_format_name(fw.format)) + " stage_tp=" + listed);
      const std::string got = exported(fw.format, q);
      EXPECT_EQ(got.rfind(std::string("error: ") + fw.name + ": stage_tp=" + listed +
                              " (per-stage tensor parallel sizes): " + fw.setting +
                              " is one value for every pipeline stage",
                          0),
                0u)
          << got;
      EXPECT_EQ(got.find('\n'), std::string::npos) << "one line: " << got;
    }
  }
}

// The refusal comes before the framework's other rules: a layout that also breaks one (here
// differing recomputation per stage) is still named by stage_tp.
TEST(StageLayoutExport, TheLayoutIsNamedFirst) {
  ExportRequest q = layered_request({4, 2, 1, 1});
  q.plan.stage_recompute = {spec::Recompute::Full, spec::Recompute::None, spec::Recompute::None,
                            spec::Recompute::None};
  for (const Framework& fw : kOneTensorParallelSize) {
    SCOPED_TRACE(std::string(export_format_name(fw.format)));
    const std::string got = exported(fw.format, q);
    EXPECT_NE(got.find(": stage_tp=4/2/1/1 "), std::string::npos) << got;
  }
}

TEST(StageLayoutExport, AUniformListExportsAsPlainTp) {
  const ExportRequest plain = default_request();  // tp=2 on every stage, sequence parallel
  ExportRequest listed = plain;
  listed.plan.stage_tp.assign(static_cast<std::size_t>(plain.plan.pp), plain.plan.tp);
  int written = 0;
  for (const Framework& fw : kOneTensorParallelSize) {
    SCOPED_TRACE(std::string(export_format_name(fw.format)));
    const std::string text = exported(fw.format, plain);
    EXPECT_EQ(exported(fw.format, listed), text);
    written += text.rfind("error: ", 0) != 0 ? 1 : 0;
    if (text.rfind("error: ", 0) != 0) {  // the file beside it (torchtitan's CSV, DeepSpeed's code)
      const ExportSideFile side = export_side_file(fw.format, plain);
      const ExportSideFile listed_side = export_side_file(fw.format, listed);
      EXPECT_EQ(listed_side.name, side.name);
      EXPECT_EQ(listed_side.text, side.text);
    }
  }
  EXPECT_GE(written, 2) << "most formats refuse the plan: the comparison tests little";
  // A one-stage pipeline's list is uniform too.
  ExportRequest one = plain;
  one.plan.pp = 1;
  one.plan.microbatches = 2;
  one.plan.global_batch = 0;
  one.plan.dp = 4;
  spec::apply_defaults(one.plan);
  one.cluster.devices = one.plan.world_size();
  ExportRequest one_listed = one;
  one_listed.plan.stage_tp = {2};
  for (const Framework& fw : kOneTensorParallelSize) {
    SCOPED_TRACE(std::string(export_format_name(fw.format)) + " pp=1");
    EXPECT_EQ(exported(fw.format, one_listed), exported(fw.format, one));
  }
}

// The written run file, loaded as a user would (spec::load_run of the file).
spec::RunSpec load_written(const std::string& text, const std::string& name) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) /
                                     (name + "-" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << text;
  spec::RunSpec run = spec::load_run(path.string());
  std::filesystem::remove(path);
  return run;
}

// Entries the engine's scale takes (at most 2-way TP) stay as they are.
TEST(StageLayoutExport, ThePipetuneRunFileRoundTripsTheLayout) {
  const ExportRequest q = layered_request({2, 1, 2, 1});
  const std::string text = export_plan(ExportFormat::Pipetune, q);
  EXPECT_NE(text.find(": tp=2 stage_tp=2/1/2/1 pp=4 "), std::string::npos) << text;
  EXPECT_NE(text.find("\nstage_tp = [2, 1, 2, 1]\n"), std::string::npos) << text;
  const spec::RunSpec run = load_written(text, "layout");
  EXPECT_EQ(run.plan.stage_tp, (std::vector<int>{2, 1, 2, 1}));
  EXPECT_EQ(run.plan.tp, 2);
  EXPECT_EQ(run.cluster.devices, 6);  // dp 1 x (2+1+2+1)
}

// Wider stages shrink to the engine's 2-way TP keeping which stages are the widest: stage 0 of
// 4/2/1/1 keeps 2 ranks, the others 1, so the small run still reshards between stages.
TEST(StageLayoutExport, ThePipetuneRunFileKeepsWhichStagesAreWidest) {
  const ExportRequest q = layered_request({4, 2, 1, 1});
  const std::string text = export_plan(ExportFormat::Pipetune, q);
  EXPECT_NE(text.find(": tp=4 stage_tp=4/2/1/1 pp=4 "), std::string::npos) << text;
  const spec::RunSpec run = load_written(text, "layout-wide");
  EXPECT_EQ(run.plan.stage_tp, (std::vector<int>{2, 1, 1, 1}));
  EXPECT_EQ(run.plan.tp, 2);
  EXPECT_EQ(run.plan.world_size(), 5);
  // A uniform list shrinks as tp does, and stays uniform.
  ExportRequest uniform = default_request();
  uniform.plan.stage_tp = {2, 2, 2, 2};
  const spec::RunSpec small = load_written(export_plan(ExportFormat::Pipetune, uniform), "uniform");
  EXPECT_EQ(small.plan.stage_tp, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(small.plan.tp, 2);
}

TEST(StageLayoutExport, ThePipetuneRunFileWithoutALayoutHasNone) {
  const std::string text = export_plan(ExportFormat::Pipetune, default_request());
  EXPECT_EQ(text.find("stage_tp"), std::string::npos) << text;
}

}  // namespace
}  // namespace pipetune::tuner
