// Pipeline-parallel Nsight Systems exports built from a known schedule: pipetune's simulator
// times a 1F1B schedule, and the export writes what Megatron-LM would leave in a capture of it —
// one process per stage, "forward-compute mb=M" / "backward-compute mb=M" NVTX ranges, a CUDA
// launch call at each op's start and its kernel on the GPU for the op's duration. The importer
// must attribute every kernel to its phase, and the analyses must give back the closed forms:
// per-stage busy time m (f + b), bubble (p - 1)(f + b), bubble ratio (p - 1) / (m + p - 1), mean
// op times f and b; calibration on such exports must recover the efficiencies that timed them.
#include <gtest/gtest.h>

#include <string>

#include "db/import/nsys_sqlite.hpp"
#include "db/import/pipeline_inference.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "profiler/analysis/gpu_op_time.hpp"
#include "profiler/analysis/stage_breakdown.hpp"
#include "tests/db/import/nsys_pipeline_export.hpp"
#include "tests/support/required_data.hpp"
#include "tuner/calibration/calibration.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::db::testing;
using profiler::Span;
using profiler::SpanKind;

// The simulated `trace`'s compute spans (F / BW on each stage's compute lane) as an nsys export.
void write_pipeline_export(const std::filesystem::path& file, const profiler::Trace& trace) {
  std::vector<PipelineOp> ops;
  for (const Span& s : trace.spans)
    if (s.kind == SpanKind::F || s.kind == SpanKind::BW)
      ops.push_back({trace.lanes.at(static_cast<std::size_t>(s.lane)).rank, s.kind == SpanKind::F,
                     s.microbatch, s.start_ns, s.end_ns});
  testing::write_pipeline_export(file, ops);
}

profiler::Trace simulate_1f1b(int p, int m, const schedule::CostTable& costs) {
  schedule::GeneratorParams g;
  g.name = "1f1b";
  g.stages = p;
  g.microbatches = m;
  return sim::simulate(schedule::generate(g), costs).trace;
}

TEST(NsysPipelineExport, OneFOneBBubbleAndOpTimesAreTheClosedForms) {
  const int p = 4, m = 8;
  const double f = 1e-3, b = 2e-3;  // seconds: the simulator's unit
  const profiler::Trace simulated =
      simulate_1f1b(p, m, schedule::CostTable::uniform(p, f, b / 2, b / 2));
  TempFile file(".sqlite");
  write_pipeline_export(file.path(), simulated);
  const ImportedProfile imported = import_nsys_sqlite(file.path());

  ASSERT_EQ(imported.ranks.size(), static_cast<std::size_t>(p));
  ASSERT_EQ(imported.kernels.size(), static_cast<std::size_t>(2 * p * m));
  EXPECT_EQ(imported.attribution.attributed, imported.kernels.size());
  EXPECT_EQ(imported.attribution.in_phase, imported.kernels.size());

  const std::int64_t f_ns = 1'000'000, b_ns = 2'000'000;
  const auto breakdown = profiler::analysis::stage_breakdown(imported.trace);
  ASSERT_EQ(breakdown.stages.size(), static_cast<std::size_t>(p));
  EXPECT_EQ(breakdown.window.length_ns(), (m + p - 1) * (f_ns + b_ns));
  for (const auto& s : breakdown.stages) {
    EXPECT_TRUE(s.gpu_activity) << "rank " << s.rank;
    EXPECT_EQ(s.compute_ns, m * (f_ns + b_ns)) << "rank " << s.rank;
    EXPECT_EQ(s.bubble_ns, (p - 1) * (f_ns + b_ns)) << "rank " << s.rank;
    // 1F1B: stage r waits r forwards before its first and r backwards after its last.
    EXPECT_EQ(s.warmup_ns, s.rank * f_ns) << "rank " << s.rank;
    EXPECT_EQ(s.cooldown_ns, s.rank * b_ns) << "rank " << s.rank;
  }
  EXPECT_DOUBLE_EQ(breakdown.bubble_ratio, static_cast<double>(p - 1) / (m + p - 1));

  for (std::int32_t r = 0; r < p; ++r) {
    const auto mean = profiler::analysis::mean_phase_op_ns(imported.kernels, r);
    EXPECT_DOUBLE_EQ(mean[static_cast<std::size_t>(SpanKind::F)], static_cast<double>(f_ns));
    EXPECT_DOUBLE_EQ(mean[static_cast<std::size_t>(SpanKind::BW)], static_cast<double>(b_ns));
  }
  for (const profiler::KernelRecord& k : imported.kernels) {
    ASSERT_TRUE(k.phase.has_value());
    EXPECT_GE(k.microbatch, 0);
    EXPECT_LT(k.microbatch, m);
    EXPECT_EQ(k.op, std::string(*k.phase == SpanKind::F ? "forward" : "backward") +
                        "-compute mb=" + std::to_string(k.microbatch));
  }
}

// Stages from point-to-point partners: stage s runs on device {2, 0, 3, 1}[s], so the importer's
// device-order ranks are not the stage order; the transfers after each op (F to the next stage,
// BW to the previous) chain the ranks into a line whose first stage sends first. Renumbered,
// every closed form of the 1F1B test holds again.
TEST(NsysPipelineExport, StagesInferredFromPointToPointPartners) {
  const int p = 4, m = 8;
  const profiler::Trace simulated =
      simulate_1f1b(p, m, schedule::CostTable::uniform(p, 1e-3, 1e-3, 1e-3));
  std::vector<PipelineOp> ops;
  std::vector<PipelineTransfer> transfers;
  for (const Span& s : simulated.spans) {
    if (s.kind != SpanKind::F && s.kind != SpanKind::BW) continue;
    const std::int32_t stage = simulated.lanes.at(static_cast<std::size_t>(s.lane)).rank;
    ops.push_back({stage, s.kind == SpanKind::F, s.microbatch, s.start_ns, s.end_ns});
    const std::int32_t peer = s.kind == SpanKind::F ? stage + 1 : stage - 1;
    // Each transfer takes its own time (activations 10 us, gradients 20 us, plus 100 ns per
    // stage index of the pair), as real links and sizes do: transfers of different pairs (or
    // directions) at one moment end apart.
    const std::int64_t took = (s.kind == SpanKind::F ? 10'000 : 20'000) + 100 * (stage + peer);
    if (peer >= 0 && peer < p) transfers.push_back({stage, peer, s.end_ns, s.end_ns + took});
  }
  TempFile file(".sqlite");
  write_pipeline_export(file.path(), ops, transfers, {2, 0, 3, 1});
  ImportedProfile imported = import_nsys_sqlite(file.path());
  ASSERT_EQ(imported.ranks.size(), 4u);
  EXPECT_EQ(imported.ranks[0].pid, 101);  // device 0 holds stage 1

  const auto inferred = infer_pipeline_from_p2p(imported.trace);
  ASSERT_TRUE(inferred.has_value());
  // Stage s is the imported rank of device {2, 0, 3, 1}[s].
  EXPECT_EQ(inferred->stage_ranks, (std::vector<std::int32_t>{2, 0, 3, 1})) << inferred->evidence;
  apply_inferred_pipeline(imported, *inferred);
  for (std::int32_t s = 0; s < p; ++s) {
    EXPECT_EQ(imported.ranks[static_cast<std::size_t>(s)].rank, s);
    EXPECT_EQ(imported.ranks[static_cast<std::size_t>(s)].pid, 100 + s);
  }
  for (std::size_t i = 1; i < imported.trace.lanes.size(); ++i)
    EXPECT_LE(imported.trace.lanes[i - 1].rank, imported.trace.lanes[i].rank);
  const auto breakdown = profiler::analysis::stage_breakdown(imported.trace);
  ASSERT_EQ(breakdown.stages.size(), static_cast<std::size_t>(p));
  for (const auto& s : breakdown.stages) {
    EXPECT_EQ(s.warmup_ns, s.rank * 1'000'000) << "rank " << s.rank;  // r forwards of 1 ms
    EXPECT_EQ(s.compute_ns, m * 3'000'000) << "rank " << s.rank;      // F 1 ms + BW 2 ms
  }
  // Kernel records still line up with their spans, with their new ranks.
  std::size_t k = 0;
  for (const Span& s : imported.trace.spans) {
    const profiler::Lane& lane = imported.trace.lanes[static_cast<std::size_t>(s.lane)];
    if (lane.stream != profiler::Stream::Gpu) continue;
    ASSERT_LT(k, imported.kernels.size());
    EXPECT_EQ(imported.kernels[k].rank, lane.rank);
    EXPECT_EQ(imported.kernels[k].start_ns, s.start_ns);
    ++k;
  }
  EXPECT_EQ(k, imported.kernels.size());
}

// Two ranks exchanging data are no evidence of a pipeline (a sequence-parallel all-to-all is
// point-to-point too): the real two-GPU torchrun capture infers nothing.
TEST(NsysPipelineExport, TwoRanksExchangingDataAreNoPipeline) {
  const auto file = test::shared_path("data/real_traces/nsys-2gpu-torchrun/mfu_2gpu_before.sqlite");
  if (!std::filesystem::exists(file))
    PIPETUNE_SKIP_OR_FAIL("real trace nsys-2gpu-torchrun is absent");
  EXPECT_FALSE(infer_pipeline_from_p2p(import_nsys_sqlite(file).trace).has_value());
}

spec::HardwareEfficiency truth() {
  spec::HardwareEfficiency e;
  e.gemm = 0.62;
  e.gemm_half_flops = 4e9;
  e.attention = 0.41;
  e.memory = 0.7;
  return e;
}

// A plan timed by the cost model with truth(), simulated, written as an nsys export, imported:
// the measurement calibration gets from an imported run.
tuner::Measurement imported_measurement(const std::string& model, int pp, int mbs, int seq) {
  tuner::Measurement m;
  m.name = model + " pp" + std::to_string(pp) + " seq" + std::to_string(seq);
  m.model = spec::load_model(model);
  m.model.seq_len = seq;
  spec::apply_defaults(m.model);
  spec::HardwareSpec hw = spec::load_hardware("h100-sxm");
  hw.efficiency = truth();
  m.cluster = spec::make_cluster(hw, pp);
  m.plan.pp = pp;
  m.plan.micro_batch_size = mbs;
  m.plan.microbatches = 4;
  spec::apply_defaults(m.plan);
  const tuner::OpCosts costs = tuner::op_costs(m.model, m.cluster, m.plan,
                                               schedule::schedule_placement(m.plan.schedule), {});
  TempFile file(".sqlite");
  write_pipeline_export(file.path(), simulate_1f1b(pp, 4, costs.table));
  const ImportedProfile imported = import_nsys_sqlite(file.path());
  m.op_durations = tuner::op_durations_from_kernels(imported.kernels, m.plan, m.name);
  m.cluster.hardware.efficiency = spec::HardwareEfficiency{};  // what is fitted must not leak
  return m;
}

TEST(NsysPipelineExport, CalibrationRecoversTheEfficienciesThatTimedTheProfiles) {
  const std::vector<tuner::Measurement> ms = {
      imported_measurement("gpt3-1.7b", 2, 1, 512), imported_measurement("gpt3-1.7b", 2, 1, 4096),
      imported_measurement("llama2-7b", 4, 2, 2048), imported_measurement("tiny", 2, 1, 32)};
  for (const auto& m : ms) {
    ASSERT_EQ(m.op_durations.size(), static_cast<std::size_t>(m.plan.pp));
    for (const auto& s : m.op_durations) {
      EXPECT_GT(s[schedule::OpKind::F], 0.0) << m.name;
      EXPECT_GT(s[schedule::OpKind::BW], 0.0) << m.name;
    }
  }
  tuner::CalibrationOptions options;
  options.fit = {tuner::EfficiencyParameter::Gemm, tuner::EfficiencyParameter::GemmHalfFlops,
                 tuner::EfficiencyParameter::Attention, tuner::EfficiencyParameter::Memory};
  const tuner::CalibrationResult r = tuner::calibrate(ms, spec::HardwareEfficiency{}, options);
  EXPECT_TRUE(r.converged);
  EXPECT_GT(r.before.mape, 0.05) << "the default start must be off to test anything";
  // Kernel times are whole nanoseconds: the fit is exact up to that rounding.
  EXPECT_LT(r.after.mape, 1e-5);
  const spec::HardwareEfficiency want = truth();
  EXPECT_NEAR(r.efficiency.gemm, want.gemm, 1e-2 * want.gemm);
  EXPECT_NEAR(r.efficiency.attention, want.attention, 1e-2 * want.attention);
  EXPECT_NEAR(r.efficiency.memory, want.memory, 5e-2 * want.memory);
}

TEST(NsysPipelineExport, NoPhaseMeansNothingToCalibrate) {
  std::vector<profiler::KernelRecord> kernels(1);
  spec::ParallelPlan plan;
  spec::apply_defaults(plan);
  try {
    tuner::op_durations_from_kernels(kernels, plan, "run 3 (x)");
    FAIL() << "no phases must be refused";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("run 3 (x): no GPU activity was launched inside a "
                                         "pipeline phase"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::db
