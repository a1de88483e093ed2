// difference_from_run_file: a stored run matches a run file only with its model, plan and
// hardware, and the first difference is named with both sides (stored vs run file).
#include "db/store/run_match.hpp"

#include <gtest/gtest.h>

#include <string>

#include "db/store/record_json.hpp"
#include "engine/errors.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::db {
namespace {

// tiny-train's model and plan on the CPU engine's hardware, as `train --config` records it.
spec::RunSpec cpu_run() {
  return spec::parse_run(
      "model = \"tiny\"\n[cluster]\nhardware = \"cpu-dev-2core\"\ndevices = 8\n[plan]\n"
      "tp = 2\npp = 2\ndp = 2\nmicro_batch_size = 4\nmicrobatches = 8\nschedule = \"1f1b\"\n",
      "cpu.toml");
}

RunRecord measured(const spec::RunSpec& run, const TrainingEngine& engine = {}) {
  RunRecord r;
  r.id = 7;
  r.kind = profiler::TraceKind::Measured;
  r.plan_json = training_plan_json(run.model, run.plan, 2, 1234, engine).dump();
  r.specs_json = training_specs_json(run.model).dump();
  return r;
}

TEST(RunMatch, ARunOfTheRunFileMatches) {
  const spec::RunSpec run = cpu_run();
  EXPECT_EQ(difference_from_run_file(measured(run), run), "");
}

TEST(RunMatch, TheModelIsComparedNameFirstThenEveryField) {
  const spec::RunSpec run = cpu_run();
  spec::RunSpec other = run;
  other.model = spec::load_model("llama3-8b");
  EXPECT_EQ(difference_from_run_file(measured(run), other), "model: tiny vs llama3-8b");
  other = run;
  other.model.seq_len *= 2;
  EXPECT_EQ(difference_from_run_file(measured(run), other),
            "model seq_len: " + std::to_string(run.model.seq_len) + " vs " +
                std::to_string(other.model.seq_len));
  // Older workspaces kept the model's name only.
  RunRecord old = measured(run);
  old.specs_json = R"({"model": "tiny"})";
  EXPECT_EQ(difference_from_run_file(old, run), "");
  old.specs_json = "";
  EXPECT_EQ(difference_from_run_file(old, run), "model: not recorded vs tiny");
}

TEST(RunMatch, ThePlanIsComparedKeyByKey) {
  const spec::RunSpec run = cpu_run();
  const auto with = [&](auto change) {
    spec::RunSpec other = run;
    change(other.plan);
    return difference_from_run_file(measured(run), other);
  };
  EXPECT_EQ(with([](spec::ParallelPlan& p) { p.schedule = "zb-h1"; }), "schedule: 1f1b vs zb-h1");
  EXPECT_EQ(with([](spec::ParallelPlan& p) { p.microbatches = 4; }), "microbatches: 8 vs 4");
  EXPECT_EQ(with([](spec::ParallelPlan& p) { p.zero_stage = 1; }), "zero_stage: 0 vs 1");
  EXPECT_EQ(with([](spec::ParallelPlan& p) { p.recompute = spec::Recompute::Full; }),
            "recompute: none vs full");
  EXPECT_EQ(with([](spec::ParallelPlan& p) { p.sequence_parallel = true; }),
            "sequence_parallel: false vs true");
  EXPECT_EQ(with([](spec::ParallelPlan& p) {
              p.stage_recompute = {spec::Recompute::Full, spec::Recompute::None};
            }),
            R"(stage_recompute: [] vs ["full","none"])");
  // Per-stage layouts: a run file with stage_tp is another plan than the stored run's plain tp
  // (tp itself, stage 0's, is the same 2 on both sides).
  EXPECT_EQ(with([](spec::ParallelPlan& p) { p.stage_tp = {2, 1}; }), "stage_tp: [] vs [2,1]");
  // The same list on both sides matches; a different one is named with both.
  spec::RunSpec layered = run;
  layered.plan.stage_tp = {2, 1};
  EXPECT_EQ(difference_from_run_file(measured(layered), layered), "");
  spec::RunSpec other_layout = run;
  other_layout.plan.stage_tp = {2, 2};
  EXPECT_EQ(difference_from_run_file(measured(layered), other_layout), "stage_tp: [2,1] vs [2,2]");
  // The even split written out is the even split.
  spec::RunSpec even = run;
  even.plan.layer_split = spec::even_layer_split(run.model.layers, run.plan.layer_groups());
  EXPECT_EQ(difference_from_run_file(measured(run), even), "");
  spec::RunSpec uneven = run;
  uneven.plan.layer_split = even.plan.layer_split;
  uneven.plan.layer_split[0] += 1;
  uneven.plan.layer_split[1] -= 1;
  EXPECT_EQ(difference_from_run_file(measured(run), uneven), "layer_split: [4,4] vs [5,3]");
}

TEST(RunMatch, AMeasuredRunIsTheRunFilesEngineOnADeviceOfItsKind) {
  const spec::RunSpec run = cpu_run();
  spec::RunSpec gpu = spec::parse_run(
      "model = \"tiny\"\n[cluster]\nhardware = \"a100-80gb\"\ndevices = 8\n[plan]\n"
      "tp = 2\npp = 2\ndp = 2\nmicro_batch_size = 4\nmicrobatches = 8\nschedule = \"1f1b\"\n",
      "gpu.toml");
  EXPECT_EQ(difference_from_run_file(measured(run), gpu),
            "hardware: the cpu engine vs a100-80gb, a GPU");
  gpu.backend = spec::EngineBackend::cuda;
  EXPECT_EQ(difference_from_run_file(measured(run), gpu), "backend: cpu vs cuda");
  TrainingEngine cuda;
  cuda.backend = spec::EngineBackend::cuda;
  cuda.attention = spec::EngineAttention::flash;
  EXPECT_EQ(difference_from_run_file(measured(gpu, cuda), gpu), "");
  spec::RunSpec cpu_backend_cuda = run;
  cpu_backend_cuda.backend = spec::EngineBackend::cuda;
  EXPECT_EQ(difference_from_run_file(measured(cpu_backend_cuda, cuda), cpu_backend_cuda),
            "hardware: the cuda engine vs cpu-dev-2core, a CPU");
}

TEST(RunMatch, AnImportedRunIsTheHardwareItWasImportedWith) {
  const spec::RunSpec run = cpu_run();
  RunRecord r;
  r.id = 3;
  r.kind = profiler::TraceKind::Imported;
  r.plan_json = plan_to_json(run.plan, "none").dump();
  r.specs_json =
      nlohmann::json{{"model", model_to_json(run.model)}, {"hardware", "h100-sxm"}}.dump();
  EXPECT_EQ(difference_from_run_file(r, run), "hardware: h100-sxm vs cpu-dev-2core");
  r.specs_json =
      nlohmann::json{{"model", model_to_json(run.model)}, {"hardware", "cpu-dev-2core"}}.dump();
  EXPECT_EQ(difference_from_run_file(r, run), "");
}

TEST(RunMatch, ASimulationOrACostUnitPlanIsNoRunOfAnything) {
  const spec::RunSpec run = cpu_run();
  RunRecord sim = measured(run);
  sim.kind = profiler::TraceKind::Simulated;
  EXPECT_NE(difference_from_run_file(sim, run), "");
  RunRecord units = measured(run);
  auto plan = nlohmann::json::parse(units.plan_json);
  plan["time_unit"] = "cost units";
  units.plan_json = plan.dump();
  EXPECT_EQ(difference_from_run_file(units, run), "time unit: cost units vs s");
  RunRecord broken = measured(run);
  broken.plan_json = "[1, 2]";
  EXPECT_THROW(difference_from_run_file(broken, run), InputError);
}

TEST(RunMatch, RunsInUnlikeTimeUnitsAreNamedWithBoth) {
  RunRecord units, seconds, plain;
  units.id = 1;
  units.plan_json = R"({"pp": 2, "time_unit": "cost units"})";
  seconds.id = 2;
  seconds.plan_json = R"({"pp": 2, "time_unit": "s"})";
  plain.id = 3;  // an import without a plan counts in seconds
  EXPECT_EQ(unlike_time_units(units, seconds),
            "run 1 counts time in cost units, run 2 in s: unlike units do not compare");
  EXPECT_EQ(unlike_time_units(seconds, plain), "");
  EXPECT_EQ(unlike_time_units(units, units), "");
}

}  // namespace
}  // namespace pipetune::db
