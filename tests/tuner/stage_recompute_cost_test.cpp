// Per-stage recomputation (ParallelPlan::stage_recompute) in the tuner. References: the uniform
// plans (stage r of a per-stage plan costs, keeps and peaks as stage r of the plan where every
// stage uses r's mode), closed forms (hardware FLOPs of a two-stage [full, none] plan; 1F1B's
// p - r micro-batches in flight in the search's memory estimate), and the evaluator's memory
// model for what the search's candidates choose.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "tuner/cost/analytic_costs.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/work.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/stage_recompute_choice.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {
namespace {

using spec::Recompute;

const std::vector<Recompute> kMixed = {Recompute::Full, Recompute::Selective, Recompute::None,
                                       Recompute::Full};

spec::ModelSpec model() {
  spec::ModelSpec m = spec::load_model("gpt3-1.7b");
  spec::apply_defaults(m);
  return m;
}

spec::ClusterSpec cluster(int gpus) {
  return spec::make_cluster(spec::load_hardware("a100-80gb"), gpus);
}

// tp=2 pp=4 dp=1 on 8 GPUs, 8 micro-batches of 2 sequences.
spec::ParallelPlan plan(const std::string& schedule, int chunks) {
  spec::ParallelPlan p;
  p.tp = 2;
  p.pp = 4;
  p.micro_batch_size = 2;
  p.microbatches = 8;
  p.schedule = schedule;
  p.chunks = chunks;
  p.sequence_parallel = true;
  spec::apply_defaults(p);
  return p;
}

spec::ParallelPlan uniform(spec::ParallelPlan p, Recompute mode) {
  p.recompute = mode;
  p.stage_recompute.clear();
  return p;
}

TEST(StageRecomputeCosts, EachStageCostsAsTheUniformPlanOfItsMode) {
  for (const auto& [name, chunks] : {std::pair<std::string, int>{"1f1b", 1},
                                     std::pair<std::string, int>{"interleaved-1f1b", 2}}) {
    SCOPED_TRACE(name);
    spec::ParallelPlan mixed = plan(name, chunks);
    mixed.stage_recompute = kMixed;
    const schedule::Placement where = schedule::schedule_placement(name);
    const ExecutionOptions exec = default_execution(cluster(8).hardware);
    const OpCosts got = op_costs(model(), cluster(8), mixed, where, exec);
    std::map<Recompute, OpCosts> want;
    for (Recompute m : {Recompute::None, Recompute::Selective, Recompute::Full})
      want[m] = op_costs(model(), cluster(8), uniform(mixed, m), where, exec);
    for (int r = 0; r < mixed.pp; ++r) {
      SCOPED_TRACE("stage " + std::to_string(r));
      const auto i = static_cast<std::size_t>(r);
      const OpCosts& w = want[kMixed[i]];
      for (schedule::OpKind k :
           {schedule::OpKind::F, schedule::OpKind::B, schedule::OpKind::W, schedule::OpKind::BW})
        EXPECT_DOUBLE_EQ(got.table.cost(r, k), w.table.cost(r, k));
      EXPECT_DOUBLE_EQ(got.activation_bytes_per_microbatch[i],
                       w.activation_bytes_per_microbatch[i]);
      EXPECT_DOUBLE_EQ(got.transient_activation_bytes[i], w.transient_activation_bytes[i]);
      EXPECT_DOUBLE_EQ(got.stages[i].executed_flops, w.stages[i].executed_flops);
    }
    // Not vacuous: the modes differ in what the backward costs and what a micro-batch keeps.
    EXPECT_GT(want[Recompute::Full].table.cost(0, schedule::OpKind::B),
              want[Recompute::None].table.cost(0, schedule::OpKind::B));
    EXPECT_LT(want[Recompute::Full].activation_bytes_per_microbatch[0],
              want[Recompute::Selective].activation_bytes_per_microbatch[0]);
  }
}

// 1F1B's schedule does not depend on the costs: each stage peaks at the same micro-batches in
// flight whatever the others recompute, so its activation peak is the uniform plan's.
TEST(StageRecomputeCosts, EachStagesSimulatedPeakIsTheUniformPlans) {
  spec::ParallelPlan mixed = plan("1f1b", 1);
  mixed.stage_recompute = kMixed;
  const PlanEvaluation got = evaluate_plan(model(), cluster(8), mixed);
  std::map<Recompute, PlanEvaluation> want;
  for (Recompute m : {Recompute::None, Recompute::Selective, Recompute::Full})
    want[m] = evaluate_plan(model(), cluster(8), uniform(mixed, m));
  for (std::size_t r = 0; r < kMixed.size(); ++r) {
    SCOPED_TRACE("stage " + std::to_string(r));
    EXPECT_DOUBLE_EQ(got.memory.stages[r].activations,
                     want[kMixed[r]].memory.stages[r].activations);
    EXPECT_DOUBLE_EQ(got.memory.stages[r].total(), want[kMixed[r]].memory.stages[r].total());
  }
  // Less recomputation than everywhere full: never slower, and more work than none everywhere.
  EXPECT_LE(got.iteration_time, want[Recompute::Full].iteration_time);
  EXPECT_GE(got.iteration_time, want[Recompute::None].iteration_time);
}

// Two stages of 12 layers, [full, none]: half the layers recompute their forward, so the hardware
// FLOPs per token are the model's plus half the layers' forward (a third of the model FLOPs
// without the output layer's forward, 2hV).
TEST(StageRecomputeCosts, HardwareFlopsAddEachStagesRecomputation) {
  const spec::ModelSpec m = model();
  spec::ParallelPlan p;
  p.pp = 2;
  p.stage_recompute = {Recompute::Full, Recompute::None};
  const double model_flops = model_flops_per_token(m);
  const double layers_forward =
      model_flops / 3.0 - 2.0 * static_cast<double>(m.hidden) * static_cast<double>(m.vocab);
  EXPECT_DOUBLE_EQ(hardware_flops_per_token(m, p, {12.0, 12.0}),
                   model_flops + 0.5 * layers_forward);
  EXPECT_DOUBLE_EQ(hardware_flops_per_token(m, p, {18.0, 6.0}),
                   model_flops + 0.75 * layers_forward);
  p.stage_recompute.clear();
  p.recompute = Recompute::Selective;
  EXPECT_DOUBLE_EQ(hardware_flops_per_token(m, p, {12.0, 12.0}),
                   hardware_flops_per_token(m, Recompute::Selective));
}

// The search's estimate: stage r of 1F1B holds p - r micro-batches (design: "memory p-r
// micro-batches on stage r"), each keeping its 6 layers' activations in the stage's mode.
TEST(StageRecomputeChoice, EstimateHoldsPMinusRMicroBatchesOnStageR) {
  const spec::ParallelPlan p = plan("1f1b", 1);
  const std::vector<std::array<double, 3>> bytes =
      stage_memory_by_recompute(model(), cluster(8), p);
  ASSERT_EQ(bytes.size(), 4u);
  const ExecutionOptions exec = default_execution(cluster(8).hardware);
  AnalyticAssumptions act;
  act.flash_attention = exec.flash_attention;
  act.stores_attention_probabilities = exec.stores_attention_probabilities;
  act.bytes_per_value = exec.activation_bytes;
  const double none = layer_activation_bytes(model(), uniform(p, Recompute::None), act);
  const double full = layer_activation_bytes(model(), uniform(p, Recompute::Full), act);
  for (int r = 0; r < 4; ++r) {
    const auto& b = bytes[static_cast<std::size_t>(r)];
    EXPECT_NEAR(b[0] - b[2], (4 - r) * 6 * (none - full), 1e-6 * b[0]) << "stage " << r;
  }
}

// For every device size among the estimate's values: no candidate when every stage fits without
// recomputation or some stage does not fit with full; else, when each stage's least mode that
// fits (found here from the estimate) is not one mode for all, the first candidate is exactly
// that, and it recomputes less along the pipeline (Merak's order: full, selective, none) up to
// the last stage, whose output layer's logits may need more. Every candidate fits and is not
// uniform.
TEST(StageRecomputeChoice, EachStageGetsTheLeastRecomputationThatFits) {
  spec::ClusterSpec c = cluster(8);
  const spec::ParallelPlan p = plan("1f1b", 1);
  const std::vector<std::array<double, 3>> bytes = stage_memory_by_recompute(model(), c, p);
  const std::vector<Recompute> all = {Recompute::None, Recompute::Selective, Recompute::Full};
  int mixed_seen = 0;
  for (const auto& sizes : bytes) {
    for (const double size : sizes) {
      c.hardware.hbm_bytes = static_cast<std::int64_t>(std::ceil(size));
      const double room = static_cast<double>(c.hardware.hbm_bytes);
      SCOPED_TRACE("device bytes " + std::to_string(room));
      const auto candidates = stage_recompute_candidates(model(), c, p, all);
      bool none_fits = true, full_fits = true;
      std::vector<Recompute> least;
      for (const auto& b : bytes) {
        none_fits = none_fits && b[0] <= room;
        full_fits = full_fits && b[2] <= room;
        least.push_back(b[0] <= room   ? Recompute::None
                        : b[1] <= room ? Recompute::Selective
                                       : Recompute::Full);
      }
      if (none_fits || !full_fits) {
        EXPECT_TRUE(candidates.empty());
        continue;
      }
      for (const std::vector<Recompute>& modes : candidates) {
        ASSERT_EQ(modes.size(), 4u);
        EXPECT_NE(modes, std::vector<Recompute>(4, modes.front()));
        for (std::size_t r = 0; r < 4; ++r)
          EXPECT_LE(bytes[r][static_cast<std::size_t>(modes[r])], room) << "stage " << r;
      }
      if (least == std::vector<Recompute>(4, least.front())) continue;
      ++mixed_seen;
      ASSERT_FALSE(candidates.empty());
      EXPECT_EQ(candidates.front(), least);
      for (std::size_t r = 1; r < 3; ++r) EXPECT_LE(least[r], least[r - 1]) << "stage " << r;
    }
  }
  EXPECT_GT(mixed_seen, 0) << "no device size made a per-stage candidate: the case tests nothing";
}

// The search scores per-stage plans only where the uniform none does not fit (by the estimate),
// shows them as one letter a stage, and each is as its candidates say.
TEST(StageRecomputeSearch, PerStagePlansAreEnumeratedWhereNoneDoesNotFit) {
  SearchSpace s;
  s.model = model();
  s.cluster = cluster(8);
  s.global_batch = 16;
  s.schedules = {"1f1b"};
  s.vocab_modes = {"none"};
  s.micro_batch_sizes = {2};
  s.zero_stages = {0};
  s.threads = 1;
  const std::vector<std::array<double, 3>> bytes =
      stage_memory_by_recompute(s.model, s.cluster, plan("1f1b", 1));
  // Room for stage 3 without recomputation, not for stage 0.
  s.cluster.hardware.hbm_bytes = static_cast<std::int64_t>((bytes[0][0] + bytes[3][0]) / 2.0);
  std::vector<spec::ParallelPlan> scored;
  const SearchResult r = search_plans(s, PlanScorer([&](const spec::ParallelPlan& p) {
                                        static std::mutex m;
                                        std::lock_guard lock(m);
                                        scored.push_back(p);
                                        CandidateScore c;
                                        c.feasible = true;
                                        c.iteration_time = 1.0;
                                        return c;
                                      }));
  int per_stage = 0;
  for (const spec::ParallelPlan& p : scored) {
    if (p.stage_recompute.empty()) continue;
    ++per_stage;
    spec::ParallelPlan base = p;
    base.stage_recompute.clear();
    const auto candidates = stage_recompute_candidates(s.model, s.cluster, base, s.recomputes);
    EXPECT_NE(std::find(candidates.begin(), candidates.end(), p.stage_recompute), candidates.end());
    EXPECT_NE(plan_summary(p, "none").find(
                  " recompute=" + spec::stage_recompute_letters(p.stage_recompute) + " "),
              std::string::npos);
  }
  EXPECT_GT(per_stage, 0) << "tp=2 pp=4 does not fit without recomputation";
  (void)r;
  s.recomputes = {Recompute::None};  // nothing to choose per stage
  scored.clear();
  search_plans(s, PlanScorer([&](const spec::ParallelPlan& p) {
                 static std::mutex m;
                 std::lock_guard lock(m);
                 scored.push_back(p);
                 return CandidateScore{};
               }));
  for (const spec::ParallelPlan& p : scored) EXPECT_TRUE(p.stage_recompute.empty());
}

}  // namespace
}  // namespace pipetune::tuner
