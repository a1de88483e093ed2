// Offload (KARMA) as a dimension of the search, against references computed apart from it: a
// brute force that evaluates every combination of stage recomputation and offload with the
// evaluator (the search must find its best, and choose between recomputation and activation
// offload as the evaluated times of the two say), KARMA's rule at its extremes (copies that take
// no time hide, copies a thousand times slower than the compute stall: recomputation wins), and
// the search's memory estimate (stage_memory_by_recompute) for where variants are generated.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/offload_options.hpp"
#include "tuner/search/plan_explanation.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/search_request.hpp"
#include "tuner/search/stage_recompute_choice.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {
namespace {

using spec::Recompute;

spec::ModelSpec model() {
  spec::ModelSpec m = spec::load_model("gpt3-1.7b");
  spec::apply_defaults(m);
  return m;
}

// Two A100s, one per node: no tensor parallelism; at an odd global batch no data parallelism
// either, so the search weighs recomputation and offload on one structure, pp=2 (GPipe).
spec::ClusterSpec two_gpus(double host_bandwidth) {
  spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("a100-80gb"), 2);
  c.devices_per_node = 1;
  c.hardware.host_bandwidth = host_bandwidth;
  return c;
}

// gpt3-1.7b through two GPipe stages, 7 micro-batches of one sequence. GPipe, not 1F1B: the first
// 1F1B stage of two holds two micro-batches, and a device that prefetches each reload while the
// op before its backward runs holds two as well, so offload would free nothing there; a GPipe
// stage holds all seven without it.
spec::ParallelPlan two_stages() {
  spec::ParallelPlan p;
  p.schedule = "gpipe";
  p.pp = 2;
  p.micro_batch_size = 1;
  p.microbatches = 7;
  p.global_batch = 7;
  spec::apply_defaults(p);
  return p;
}

spec::ParallelPlan with(spec::ParallelPlan p, Recompute mode, bool activations, bool optimizer) {
  p.recompute = mode;
  p.offload_activations = activations;
  p.offload_optimizer = optimizer;
  return p;
}

SearchSpace two_gpu_space(const spec::ClusterSpec& cluster) {
  SearchSpace s;
  s.model = model();
  s.cluster = cluster;
  s.global_batch = 7;
  s.schedules = {"gpipe"};
  s.vocab_modes = {"none"};
  s.micro_batch_sizes = {1};
  s.recomputes = {Recompute::None, Recompute::Full};
  s.zero_stages = {0};
  s.threads = 2;
  return s;
}

// The device size at which the two-stage plan does not fit without recomputation by the search's
// estimate (with the 10% it keeps free) while it fits with full recomputation.
std::int64_t device_between_none_and_full(const spec::ClusterSpec& cluster) {
  const std::vector<std::array<double, 3>> bytes =
      stage_memory_by_recompute(model(), cluster, two_stages());
  double none = 0.0, full = 0.0;
  for (const auto& stage : bytes) {
    none = std::max(none, stage[static_cast<std::size_t>(Recompute::None)]);
    full = std::max(full, stage[static_cast<std::size_t>(Recompute::Full)]);
  }
  return static_cast<std::int64_t>((none + full) / 2.0 / kOffloadHeadroom);
}

std::string describe(const spec::ParallelPlan& p) {
  return plan_summary(p, "none");
}

// The two-stage plan with every assignment of recomputation to its stages (none, full) and
// every offload: what the search could at most consider.
std::vector<spec::ParallelPlan> brute_force_plans() {
  const std::vector<Recompute> modes = {Recompute::None, Recompute::Full};
  std::vector<spec::ParallelPlan> out;
  for (Recompute first : modes)
    for (Recompute second : modes)
      for (bool activations : {false, true})
        for (bool optimizer : {false, true}) {
          spec::ParallelPlan p = with(two_stages(), first, activations, optimizer);
          if (second != first) p.stage_recompute = {first, second};
          out.push_back(p);
        }
  return out;
}

struct Fastest {
  std::optional<spec::ParallelPlan> plan;
  double time = std::numeric_limits<double>::infinity();
};

// The fastest feasible plans of the brute force: of all, of those that offload activations, of
// those that do not, and of those that offload nothing (recomputation alone).
struct Reference {
  Fastest overall, offloading_activations, keeping_activations, recomputing_only;
};

Reference reference(const spec::ClusterSpec& cluster) {
  Reference r;
  const auto consider = [](Fastest& f, const spec::ParallelPlan& p, double time) {
    if (time < f.time) f = {p, time};
  };
  for (const spec::ParallelPlan& p : brute_force_plans()) {
    const PlanEvaluation e = evaluate_plan(model(), cluster, p);
    if (!e.feasible) continue;
    consider(r.overall, p, e.iteration_time);
    consider(p.offload_activations ? r.offloading_activations : r.keeping_activations, p,
             e.iteration_time);
    if (!p.offload_activations && !p.offload_optimizer)
      consider(r.recomputing_only, p, e.iteration_time);
  }
  return r;
}

std::string describe(const Fastest& f) {
  return f.plan ? describe(*f.plan) + " (" + std::to_string(f.time) + " s)" : "none feasible";
}

// The search (exhaustive, then branch and bound) finds the brute force's best plan, and offloads
// activations exactly when the fastest feasible plan that offloads them beats the fastest
// feasible plan that does not (both evaluated here). Returns the search's best plan.
spec::ParallelPlan expect_search_picks_the_faster(const spec::ClusterSpec& cluster,
                                                  const Reference& want) {
  const SearchSpace space = two_gpu_space(cluster);
  const SearchResult all = search_plans(space, evaluator_scorers(space.model, space.cluster));
  EXPECT_FALSE(all.ranked.empty()) << no_feasible_plan_explanation(all, space.model, cluster);
  if (all.ranked.empty()) return {};
  const ScoredPlan& best = all.ranked.front();
  EXPECT_NEAR(best.score.iteration_time, want.overall.time, 1e-9 * want.overall.time)
      << "search's best: " << describe(best.plan)
      << "\nbrute force's best: " << describe(want.overall);
  const double offload = want.offloading_activations.time, keep = want.keeping_activations.time;
  if (std::abs(offload - keep) > 1e-9 * want.overall.time) {
    EXPECT_EQ(best.plan.offload_activations, offload < keep)
        << "search chose " << describe(best.plan)
        << "\nfastest offloading activations: " << describe(want.offloading_activations)
        << "\nfastest keeping them: " << describe(want.keeping_activations);
  }

  // Branch and bound (an offloading plan bounded by its plan without offload or recomputation)
  // keeps the same best.
  SearchSpace bounded = space;
  bounded.keep = 2;
  const SearchResult bb = search_plans(bounded, evaluator_scorers(space.model, space.cluster));
  EXPECT_FALSE(bb.ranked.empty());
  if (!bb.ranked.empty()) {
    EXPECT_EQ(bb.ranked.front().score.iteration_time, best.score.iteration_time)
        << describe(bb.ranked.front().plan) << " vs " << describe(best.plan);
  }
  return best.plan;
}

// The search's bound of every offloading plan of the brute force stays below its evaluation.
void expect_offload_bounds_hold(const spec::ClusterSpec& cluster) {
  const Scorer scorer = evaluator_scorers(model(), cluster)();
  for (const spec::ParallelPlan& p : brute_force_plans()) {
    if (!p.offload_activations && !p.offload_optimizer) continue;
    const PlanEvaluation e = evaluate_plan(model(), cluster, p);
    const CandidateBound b = scorer.bound(p);
    EXPECT_LE(b.iteration_time, e.iteration_time * (1 + 1e-12)) << describe(p);
    EXPECT_LE(b.peak_memory_bytes, e.memory.peak_bytes * (1 + 1e-12)) << describe(p);
  }
}

// A device between the two-stage plan's simulated peaks with and without activation offload:
// offloading fits, keeping every activation on the device does not.
// The peaks are taken with copies that take no time (on a slow link an activation may wait on
// the device for its copy).
spec::ClusterSpec tight_two_gpus(double host_bandwidth) {
  spec::ClusterSpec c = two_gpus(1e13);
  const spec::ParallelPlan kept = two_stages();
  const double peak_kept = evaluate_plan(model(), c, kept).memory.peak_bytes;
  const double peak_offloaded =
      evaluate_plan(model(), c, with(kept, Recompute::None, true, false)).memory.peak_bytes;
  EXPECT_LT(peak_offloaded, peak_kept)
      << "activation offload frees no device memory on two GPipe stages";
  c.hardware.hbm_bytes = static_cast<std::int64_t>((peak_offloaded + peak_kept) / 2.0);
  c.hardware.host_bandwidth = host_bandwidth;
  return c;
}

TEST(OffloadSearch, OffloadWinsWhereTheCopiesHide) {
  // 10 TB/s to the host: a micro-batch's activations (GBs) travel in well under a millisecond,
  // far less than a stage's forward, so the copies hide and offload costs nothing, while
  // recomputation repeats the forward.
  const spec::ClusterSpec cluster = tight_two_gpus(1e13);
  const Reference want = reference(cluster);
  EXPECT_LT(want.offloading_activations.time, want.recomputing_only.time)
      << "copies this fast should beat recomputation (KARMA: swap when the transfer hides)\n"
      << describe(want.offloading_activations) << " vs " << describe(want.recomputing_only);
  const spec::ParallelPlan best = expect_search_picks_the_faster(cluster, want);
  EXPECT_TRUE(best.offload_activations || best.offload_optimizer) << describe(best);
  expect_offload_bounds_hold(cluster);
}

TEST(OffloadSearch, RecomputationWinsWhereTheCopiesStall) {
  // 100 MB/s: each copy takes tens of seconds, a thousand times a forward: every reload stalls
  // its backward far longer than recomputing the forward takes (KARMA: recompute when the stall
  // exceeds the forward).
  const spec::ClusterSpec cluster = tight_two_gpus(1e8);
  const Reference want = reference(cluster);
  EXPECT_LT(want.recomputing_only.time, want.offloading_activations.time)
      << describe(want.recomputing_only) << " vs " << describe(want.offloading_activations);
  const spec::ParallelPlan best = expect_search_picks_the_faster(cluster, want);
  EXPECT_FALSE(best.offload_activations) << describe(best);
  EXPECT_FALSE(best.offload_optimizer) << describe(best);
  EXPECT_TRUE(best.recompute != Recompute::None || !best.stage_recompute.empty()) << describe(best);
  expect_offload_bounds_hold(cluster);
}

// Records every plan the search scores (the score says nothing: the enumeration is the test).
std::vector<spec::ParallelPlan> scored_plans(const SearchSpace& space) {
  std::mutex mutex;
  std::vector<spec::ParallelPlan> scored;
  search_plans(space, PlanScorer([&](const spec::ParallelPlan& p) {
                 std::lock_guard lock(mutex);
                 scored.push_back(p);
                 CandidateScore c;
                 c.feasible = true;
                 c.iteration_time = 1.0;
                 c.tokens_per_s = 1.0;
                 return c;
               }));
  return scored;
}

std::size_t offloading(const std::vector<spec::ParallelPlan>& plans) {
  return static_cast<std::size_t>(std::count_if(
      plans.begin(), plans.end(),
      [](const spec::ParallelPlan& p) { return p.offload_activations || p.offload_optimizer; }));
}

TEST(OffloadSearch, SwitchedOffNoPlanOffloads) {
  spec::ClusterSpec cluster = two_gpus(64e9);
  cluster.hardware.hbm_bytes = device_between_none_and_full(cluster);
  SearchSpace space = two_gpu_space(cluster);
  const std::vector<spec::ParallelPlan> on = scored_plans(space);
  EXPECT_GT(offloading(on), 0u) << "the two-stage plan does not fit without recomputation: the "
                                   "search should try offload";
  for (std::size_t i = 0; i < on.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      EXPECT_FALSE(on[i] == on[j]) << "scored twice: " << describe(on[i]);
  space.offload = false;
  EXPECT_EQ(offloading(scored_plans(space)), 0u);

  // The request's switch reaches the space.
  SearchRequest request;
  request.target.model = "gpt3-1.7b";
  request.target.hardware = "a100-80gb";
  request.target.gpus = 2;
  request.target.global_batch = 7;
  EXPECT_TRUE(search_space(request).offload);
  request.offload = false;
  EXPECT_FALSE(search_space(request).offload);
}

TEST(OffloadSearch, WithoutAHostLinkNoPlanOffloadsAndNothingThrows) {
  spec::ClusterSpec cluster = two_gpus(0.0);
  cluster.hardware.hbm_bytes = device_between_none_and_full(cluster);
  const SearchSpace space = two_gpu_space(cluster);
  EXPECT_EQ(offloading(scored_plans(space)), 0u);
  SearchResult r;
  EXPECT_NO_THROW(r = search_plans(space, evaluator_scorers(space.model, space.cluster)));
  for (const ScoredPlan& c : r.ranked) EXPECT_EQ(offload_label(c.plan), "") << describe(c.plan);
  for (const auto& [reason, count] : r.pruned)
    EXPECT_EQ(reason.find("host"), std::string::npos) << reason << ": " << count;
}

// Whether every stage's estimate fits `capacity` with `mode`.
bool estimate_fits(const std::vector<StageMemoryParts>& stages, double capacity, Recompute mode) {
  return std::all_of(stages.begin(), stages.end(),
                     [&](const StageMemoryParts& s) { return s.bytes(mode) <= capacity; });
}

// Whether every stage could fit `capacity` holding, besides its fixed bytes, only one
// micro-batch's activations (one chunk per stage here): the least activation offload leaves.
bool fits_offloaded(const std::vector<StageMemoryParts>& stages, double capacity, Recompute mode) {
  return std::all_of(stages.begin(), stages.end(), [&](const StageMemoryParts& s) {
    return s.fixed + s.layers * s.layer_activations[static_cast<std::size_t>(mode)] <= capacity;
  });
}

// Where the variants come from, against the search's estimate of each stage's memory
// (stage_memory_parts) and the rules offload_options.hpp states.
TEST(OffloadVariants, OnlyWhereThePlanNeedsRecomputationOrDoesNotFit) {
  spec::ClusterSpec cluster = two_gpus(64e9);
  const spec::ParallelPlan plan = two_stages();
  const std::vector<Recompute> allowed = {Recompute::None, Recompute::Selective, Recompute::Full};
  EXPECT_TRUE(offload_variants(model(), cluster, plan, allowed).empty())
      << "fits on 80 GB without recomputation";

  cluster.hardware.hbm_bytes = device_between_none_and_full(cluster);
  const std::vector<spec::ParallelPlan> variants =
      offload_variants(model(), cluster, plan, allowed);
  const auto has = [&](Recompute mode, bool activations, bool optimizer) {
    return std::find(variants.begin(), variants.end(), with(plan, mode, activations, optimizer)) !=
           variants.end();
  };
  const std::vector<StageMemoryParts> kept = stage_memory_parts(model(), cluster, plan);
  const std::vector<StageMemoryParts> freed =
      stage_memory_parts(model(), cluster, with(plan, Recompute::None, false, true));
  const auto device = static_cast<double>(cluster.hardware.hbm_bytes);
  const double room = kOffloadHeadroom * device;
  EXPECT_FALSE(estimate_fits(kept, room, Recompute::None));
  for (Recompute mode : allowed) {
    SCOPED_TRACE(std::string(spec::recompute_name(mode)));
    const bool alone = estimate_fits(kept, room, mode);
    EXPECT_EQ(has(mode, true, false),
              (mode == Recompute::None || !alone) && fits_offloaded(kept, device, mode));
    EXPECT_EQ(has(mode, false, true), !alone && estimate_fits(freed, device, mode));
    EXPECT_EQ(has(mode, true, true), !alone && fits_offloaded(freed, device, mode));
  }
  EXPECT_TRUE(has(Recompute::None, true, false)) << "offload instead of recomputation";
  EXPECT_FALSE(has(Recompute::Full, true, false)) << "full fits alone, and faster";
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const spec::ParallelPlan& v = variants[i];
    EXPECT_TRUE(v.offload_activations || v.offload_optimizer) << describe(v);
    for (std::size_t j = 0; j < i; ++j) EXPECT_FALSE(variants[j] == v) << "twice: " << describe(v);
    if (v.stage_recompute.empty()) continue;
    // A per-stage choice comes with the optimizer state offloaded, and does not fit without it.
    EXPECT_TRUE(v.offload_optimizer && !v.offload_activations) << describe(v);
    bool fits = true;
    for (std::size_t r = 0; r < kept.size(); ++r)
      fits = fits && kept[r].bytes(v.stage_recompute[r]) <= room;
    EXPECT_FALSE(fits) << describe(v);
  }

  // One stage: a backward follows its forward at once, so activations are never offloaded.
  spec::ParallelPlan replicas = plan;
  replicas.pp = 1;
  replicas.dp = 2;
  replicas.microbatches = 4;
  replicas.global_batch = 8;
  for (const spec::ParallelPlan& v : offload_variants(model(), cluster, replicas, allowed))
    EXPECT_FALSE(v.offload_activations) << describe(v);
  cluster.hardware.hbm_bytes = 1;  // nothing can fit: nothing is worth scoring
  EXPECT_TRUE(offload_variants(model(), cluster, plan, allowed).empty());

  cluster.hardware.hbm_bytes = device_between_none_and_full(cluster);
  cluster.hardware.host_bandwidth = 0.0;  // offload cannot be priced
  EXPECT_TRUE(offload_variants(model(), cluster, plan, allowed).empty());
}

TEST(OffloadSearch, SummariesAndExplanationsNameTheOffload) {
  const spec::ParallelPlan kept = two_stages();
  EXPECT_EQ(describe(kept).find("offload"), std::string::npos) << describe(kept);
  EXPECT_NE(describe(with(kept, Recompute::None, true, false)).find(" zero=0 offload=act"),
            std::string::npos);
  EXPECT_NE(describe(with(kept, Recompute::None, false, true)).find(" offload=opt"),
            std::string::npos);
  EXPECT_NE(describe(with(kept, Recompute::Full, true, true)).find(" offload=act+opt"),
            std::string::npos);

  const std::vector<SettingDifference> d =
      setting_differences(model(), two_gpus(64e9), with(kept, Recompute::None, true, false),
                          with(kept, Recompute::Full, false, true));
  const std::vector<std::vector<std::string>> expected = {{"recompute", "none", "full"},
                                                          {"offload_activations", "true", "false"},
                                                          {"offload_optimizer", "false", "true"}};
  ASSERT_EQ(d.size(), expected.size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].setting, expected[i][0]);
    EXPECT_EQ(d[i].first, expected[i][1]);
    EXPECT_EQ(d[i].second, expected[i][2]);
  }
}

}  // namespace
}  // namespace pipetune::tuner
