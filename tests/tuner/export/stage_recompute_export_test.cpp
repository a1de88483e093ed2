// Per-stage recomputation (ParallelPlan::stage_recompute) in the exports. Megatron-LM, torchtitan
// (both formats) and DeepSpeed take one recomputation setting for the whole model: a plan whose
// stages differ is refused naming stage_recompute, and one whose stages all agree exports exactly
// as the plan with that mode for every stage (the reference). The pipetune run file keeps the
// stages' modes, and the engine accepts it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_spec.hpp"
#include "tuner/export/exporters.hpp"

namespace pipetune::tuner {
namespace {

using spec::Recompute;

// The default run (llama3-8b, tp=2 pp=4 1F1B on a DGX H100), with `recompute` everywhere.
ExportRequest request(Recompute recompute) {
  const spec::RunSpec r = spec::load_run("default");
  ExportRequest q;
  q.model = r.model;
  q.cluster = r.cluster;
  q.plan = r.plan;
  q.plan.recompute = recompute;
  spec::apply_defaults(q.plan);
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

const std::vector<ExportFormat> kOneSetting = {ExportFormat::Megatron, ExportFormat::Torchtitan,
                                               ExportFormat::TorchtitanToml,
                                               ExportFormat::Deepspeed};

TEST(StageRecomputeExport, StagesThatDifferAreRefusedNamingTheSetting) {
  ExportRequest q = request(Recompute::None);
  q.plan.stage_recompute = {Recompute::Full, Recompute::Full, Recompute::None, Recompute::None};
  for (ExportFormat f : kOneSetting) {
    const std::string framework(export_format_name(f) == "deepspeed"  ? "deepspeed"
                                : export_format_name(f) == "megatron" ? "megatron"
                                                                      : "torchtitan");
    SCOPED_TRACE(std::string(export_format_name(f)));
    const std::string got = exported(f, q);
    EXPECT_EQ(got.rfind("error: " + framework + ": stage_recompute = full,full,none,none", 0), 0u)
        << got;
    EXPECT_NE(got.find("one setting"), std::string::npos) << got;
    EXPECT_EQ(got.find('\n'), std::string::npos) << "one line: " << got;
  }
}

TEST(StageRecomputeExport, StagesThatAgreeExportAsThatModeEverywhere) {
  for (Recompute mode : {Recompute::None, Recompute::Full}) {
    SCOPED_TRACE(std::string(spec::recompute_name(mode)));
    ExportRequest q = request(Recompute::Selective);  // the plan-wide mode is overridden
    q.plan.stage_recompute.assign(4, mode);
    const ExportRequest want = request(mode);
    int written = 0;
    for (ExportFormat f : kOneSetting) {
      SCOPED_TRACE(std::string(export_format_name(f)));
      const std::string text = exported(f, want);
      EXPECT_EQ(exported(f, q), text);
      written += text.rfind("error: ", 0) != 0 ? 1 : 0;
    }
    EXPECT_GE(written, 2) << "most formats refuse the plan: the comparison tests little";
  }
}

TEST(StageRecomputeExport, ThePipetuneRunFileKeepsEachStagesMode) {
  ExportRequest q = request(Recompute::None);
  q.plan.stage_recompute = {Recompute::Full, Recompute::Selective, Recompute::None,
                            Recompute::None};
  const std::string text = export_plan(ExportFormat::Pipetune, q);
  EXPECT_NE(text.find(" recompute=f/s/n/n "), std::string::npos) << text;
  const spec::RunSpec run = spec::parse_run(text, "exported");
  EXPECT_EQ(run.plan.stage_recompute, q.plan.stage_recompute);
  runtime::TrainOptions o;
  o.model = run.model;
  o.plan = run.plan;
  o.steps = 1;
  EXPECT_NO_THROW(runtime::check_train_options(o));
}

}  // namespace
}  // namespace pipetune::tuner
