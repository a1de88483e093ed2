// The tuner's search: enumerate plans for a model on a cluster at a global batch, prune the ones
// that cannot work (and count why), score the rest with an evaluator (the cost model, the
// schedule simulator and the memory model: tuner/predict), rank the feasible ones by predicted
// throughput and keep the Pareto front of throughput against peak memory.
//
// Dimensions: tp (divisors of the GPU count within a node that divide the attention heads and
// KV heads), pp (up to the layer count), dp (what is left), ep (MoE: divisors of dp that divide
// the experts), micro-batch size, schedule with its chunks (interleaved-1f1b: layer groups that
// split the layers evenly, V schedules: 2), vocabulary mode (none; redis: transformer layers
// moved off the stages that hold the vocabulary layers; auto: the split that minimises the
// slowest stage under each stage's memory, Merak's automatic partitioning, auto_layer_split.hpp,
// enumerated when it is not the even split; vocab-1, vocab-2, interlaced where the schedule
// supports them), recomputation (each mode for every stage, and per stage where a plan fits only
// with some: stage_recompute_choice.hpp), ZeRO stage (0 to 3: optimizer state, then also
// gradients, then also weights sharded over dp), placement on a cluster of several node groups
// (the rank order and the node groups' order, placement_options.hpp), and offload (KARMA:
// activations and optimizer state in host memory, weighed against recomputation where a plan does
// not fit without recomputation and the host link is known: offload_options.hpp), and per-stage
// layouts (SearchSpace::stage_layouts: one end of the pipeline with twice the TP degree, devices
// taken from other stages, layers split in proportion: stage_layout_options.hpp). Sequence
// parallelism is on whenever tp > 1 (the same communication volume, less activation memory),
// except in per-stage layouts, whose resharding moves whole activations.
//
// Each list of the space names an entry once (InputError naming a repeated one). A combination
// of a vocabulary mode asked for that cannot exist (a schedule that does not support it, no
// pipeline) is counted among the pruned with that reason.
//
// Before scoring, a plan is pruned when it breaks a plan rule (spec::validate, the schedule's
// micro-batch minimum) or when its weights, gradients and optimizer state alone exceed the
// device's memory; plans whose result would not change with a knob (the ZeRO stage at dp = 1)
// are not enumerated twice.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

// What the evaluator predicts for one plan.
struct CandidateScore {
  bool feasible = false;
  std::string infeasible_reason;  // a short key for the pruned counts ("out of memory")
  double iteration_time = 0.0;    // seconds
  double tokens_per_s = 0.0;
  double mfu = 0.0;
  double peak_memory_bytes = 0.0;  // the stage with the most
  // terapipe: the token slices the evaluator chose (TeraPipe's dynamic programming), which the
  // ranked plan then names, so a run file of it trains what was scored.
  std::vector<int> slice_tokens;
};

// Thread-safe: the search calls it from several threads. May throw InputError for a plan the
// schedule generators refuse; the search counts that as pruned with the error's reason.
using PlanScorer = std::function<CandidateScore(const spec::ParallelPlan&)>;

// A lower bound on a plan's score, cheap next to scoring it: no plan can be faster than
// `iteration_time` or need less than `peak_memory_bytes`. Same thread-safety and errors as
// PlanScorer.
struct CandidateBound {
  double iteration_time = 0.0;
  double peak_memory_bytes = 0.0;
  // False when the plan cannot fit the device's memory whatever it is scored at: the search
  // counts it out of memory without scoring it.
  bool fits = true;
  // Token slices the bounder chose for the plan, which its scorer then takes as given (empty:
  // none, or let the scorer choose).
  std::vector<int> slice_tokens;
};
using PlanBounder = std::function<CandidateBound(const spec::ParallelPlan&)>;
// Plans the given one is never faster than (each the same schedule order with costs at least as
// high); empty: none known.
using PlanLowering = std::function<std::vector<spec::ParallelPlan>(const spec::ParallelPlan&)>;

// A tighter lower bound on a plan's iteration time than its bound, dearer to work out (a
// simulation of part of its schedule) but cheaper than scoring it; nullopt: none known.
using PlanRefiner = std::function<std::optional<double>(const spec::ParallelPlan&)>;

// What each scoring thread uses: the scorer, and optionally a bounder. With a bounder the search
// is a branch and bound: plans are scored in order of their bound, and a plan is skipped when
// SearchSpace::keep scored plans are already at least as fast as its bound AND a scored plan is
// at least as fast and as small as its bound (so it could neither enter the `keep` best nor the
// Pareto front).
struct Scorer {
  Scorer() = default;
  Scorer(PlanScorer s) : score(std::move(s)) {}  // NOLINT: a scorer alone is a Scorer
  Scorer(PlanScorer s, PlanBounder b) : score(std::move(s)), bound(std::move(b)) {}
  Scorer(PlanScorer s, PlanBounder b, PlanLowering l)
      : score(std::move(s)), bound(std::move(b)), lower(std::move(l)) {}
  PlanScorer score;
  PlanBounder bound;  // empty: score every plan
  // With a bounder: once a plan's lower plans are scored, their times bound the plan's too, and
  // the plan is skipped where that bound cannot make the results. Empty: bounds alone.
  PlanLowering lower;
  // With a bounder: asked of a plan its bound did not skip, just before it is scored; the plan
  // is skipped where the refined time cannot make the results. Empty: bounds alone.
  PlanRefiner refine;
};

struct SearchSpace {
  spec::ModelSpec model;  // seq_len is the training sequence length
  spec::ClusterSpec cluster;
  std::int64_t global_batch = 0;       // sequences per iteration
  std::vector<std::string> schedules;  // empty = every schedule
  // Empty = every mode (none, redis, vocab-1, vocab-2, interlaced), each where it can exist;
  // named ones: a combination that cannot exist is counted among the pruned with its reason.
  std::vector<std::string> vocab_modes;
  std::vector<int> micro_batch_sizes = {1, 2, 4, 8};
  std::vector<spec::Recompute> recomputes = {spec::Recompute::None, spec::Recompute::Selective,
                                             spec::Recompute::Full};
  std::vector<int> zero_stages = {0, 1, 2, 3};
  // Offload variants (offload_options.hpp) beside the plans that keep everything on the device;
  // false: no plan offloads.
  bool offload = true;
  // Per-stage layout variants (stage_layout_options.hpp) beside each uniform plan they apply to.
  // Off here, so a space built field by field searches uniform layouts; a SearchRequest (what
  // the front ends send) turns them on by default.
  bool stage_layouts = false;
  // MoE plans with ep > 1 also try the all-to-all in 2 and 4 chunks (ParallelPlan::moe_chunks);
  // false: one all-to-all each way, as the frameworks the exports write for run it.
  bool moe_chunks = true;
  // MoE plans with tp > 1 also try each EP rank's experts whole, divided among the TP ranks
  // (ParallelPlan::expert_layouts = {whole}: PPMoE); false: experts sharded over TP.
  bool whole_experts = true;
  // MoE plans with tp > 1 and ep > 1 also try the experts sharded and deduplicated: each TP rank
  // sending its share of the slots (ParallelPlan::expert_layouts = {dedup}: Parm); false: none.
  bool dedup_experts = true;
  // MoE plans whose EP group spans nodes also try Tutel's two-phase all-to-all, in nodes of the
  // EP ranks a node holds (ParallelPlan::moe_a2a_node_ranks); false: one flat all-to-all.
  bool two_phase_all_to_all = true;
  // Plans with dp > 1 and an untied input table also try EmbRace's sparse embedding gradient
  // where its rows move fewer bytes than the table (ParallelPlan::sparse_embedding_gradient);
  // false: every plan reduces the table dense.
  bool sparse_embedding = true;
  // What the sparse gradient's rows are priced at (ExecutionOptions::embedding_rows_factor), so
  // that the search tries it where the measured rows pay.
  double embedding_rows_factor = 1.0;
  int max_chunks = 4;               // interleaved-1f1b layer groups per stage, at most
  std::int64_t max_candidates = 0;  // stop enumerating after this many plans; 0 = no limit
  // With a bounder: the best `keep` plans (and the Pareto front) are exact; plans that provably
  // cannot be among them are skipped, and the results hold just those (the same every run,
  // whatever the threads' timing). 0 = score every plan and rank them all. Either way a plan whose
  // bound's least memory already overflows the device is counted out of memory unscored (with no
  // feasible plan, those closest to fitting are scored to find the smallest).
  std::int64_t keep = 0;
  int threads = 0;  // scoring threads; 0 = hardware concurrency
};

// The pruned-count key of plans skipped by their bound.
inline constexpr std::string_view kBoundPrunedReason =
    "cannot reach the best results or the Pareto front (lower bound)";
// The pruned-count key of plans that do not fit the device's memory: scored, or skipped where
// their bound already overflows it (CandidateBound::fits).
inline constexpr std::string_view kOutOfMemoryReason = "out of memory";

struct ScoredPlan {
  spec::ParallelPlan plan;
  std::string vocab_label;  // "none", "redis", "vocab-1", ...
  CandidateScore score;
};

struct SearchResult {
  std::int64_t candidates_enumerated = 0;
  std::int64_t candidates_evaluated = 0;       // scored by the evaluator
  std::map<std::string, std::int64_t> pruned;  // reason -> count (before and after scoring)
  std::vector<ScoredPlan> ranked;  // feasible, by tokens/s descending (ties: less memory)
  std::vector<ScoredPlan> pareto;  // feasible, not beaten on both tokens/s and peak memory
  // Of the plans that did not fit, the one needing the least memory per device (its
  // score.peak_memory_bytes: the simulated peak, or weights + gradients + optimizer state alone
  // when those already did not fit): what "no feasible plan" reports. Empty when none.
  std::optional<ScoredPlan> smallest_infeasible;
  bool cancelled = false;
};

// Progress: (plans scored, plans to score); called from the search's calling thread.
using SearchProgress = std::function<void(std::int64_t done, std::int64_t total)>;

// Makes one scorer per scoring thread (for evaluators that keep per-thread caches).
using ScorerFactory = std::function<Scorer()>;

// Throws InputError when the GPU count has no valid factorisation at all (naming why).
// `cancel` (may be null) stops the search early; the result then holds what was scored.
SearchResult search_plans(const SearchSpace& space, const ScorerFactory& make_scorer,
                          const SearchProgress& progress = {},
                          const std::atomic<bool>* cancel = nullptr);
// The same with one thread-safe scorer shared by every thread.
SearchResult search_plans(const SearchSpace& space, const PlanScorer& score,
                          const SearchProgress& progress = {},
                          const std::atomic<bool>* cancel = nullptr);

// The search's vocabulary options, in the order it tries them: none, redis, vocab-1, vocab-2,
// interlaced (SearchSpace::vocab_modes names some of these).
const std::vector<std::string>& vocab_options();

// The "redis" layer split: pp stages, the first holding the input embedding and the last the
// output layer, each worth `*_layers` transformer layers of work; transformer layers are moved
// off those two stages so every stage carries about the same work (the Vocabulary Parallelism
// paper's redistribution baseline). Returns layers per stage; sums to model.layers.
std::vector<int> redistributed_layer_split(std::int64_t layers, int pp, double input_layers,
                                           double output_layers);

// Work of the vocabulary layers in transformer-layer units for the model (forward + backward
// FLOPs, reference/tuners.md 3.1: output layer 6bshV, input embedding ~0, a layer
// bsh(72h + 12s) halved for causal attention).
double output_layer_in_layers(const spec::ModelSpec& model);

}  // namespace pipetune::tuner
