// `pipetune tune`: search plans for a model on N GPUs and print the best predicted ones.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/explanation_json.hpp"
#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/measured_embedding_rows.hpp"
#include "cli/moe_imbalance_flags.hpp"
#include "cli/stdout_status.hpp"
#include "cli/tuning_target.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/record_json.hpp"
#include "db/store/search_records.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/plan_explanation.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/search_request.hpp"

namespace pipetune::cli {

namespace {

struct TuneArgs {
  TargetArgs target;
  std::string schedules;    // comma-separated; empty = all
  std::string vocab_modes;  // comma-separated; empty = all
  std::int64_t max_candidates = 0;
  bool no_offload = false;
  bool no_moe_chunks = false;
  bool no_whole_experts = false;
  bool no_dedup_experts = false;
  bool no_two_phase_a2a = false;
  bool no_sparse_embedding = false;
  bool no_stage_layouts = false;
  int top = 10;
  std::int64_t keep = 100;
  int threads = 0;
  bool json = false;
  bool explain = false;
  double failure_rate = 0.0;     // failures per device-hour
  double restart_delay = 600.0;  // seconds until a failed device is back
  bool reroute = false;          // SWARM re-routing over each stage's replicas
  MoeImbalanceArgs moe_imbalance;
  EmbeddingRowsArgs embedding_rows;
  std::string db;
  bool no_db = false;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The flag a request's field is given by: "keep" -> "--keep", "vocab_modes" -> "--vocab-modes".
std::string flag_of(std::string field) {
  std::replace(field.begin(), field.end(), '_', '-');
  return "--" + field;
}

tuner::SearchSpace make_space(const TuneArgs& a) {
  // A list given that names nothing is not "every one" (the default when it is not given).
  for (const auto& [flag, list] :
       {std::pair{"--schedules", &a.schedules}, std::pair{"--vocab-modes", &a.vocab_modes}})
    if (!list->empty() && split_list(*list).empty())
      throw InputError(std::string(flag) + " names nothing ('" + *list + "')");
  if (a.top < 1) throw InputError("--top must be positive (got " + std::to_string(a.top) + ")");
  require_target_options(a.target);
  const tuner::SearchRequest request{.target = a.target,
                                     .schedules = split_list(a.schedules),
                                     .vocab_modes = split_list(a.vocab_modes),
                                     .max_candidates = a.max_candidates,
                                     .offload = !a.no_offload,
                                     .stage_layouts = !a.no_stage_layouts,
                                     .moe_chunks = !a.no_moe_chunks,
                                     .whole_experts = !a.no_whole_experts,
                                     .dedup_experts = !a.no_dedup_experts,
                                     .two_phase_all_to_all = !a.no_two_phase_a2a,
                                     .sparse_embedding = !a.no_sparse_embedding,
                                     .keep = a.keep,
                                     .threads = a.threads};
  tuner::SearchSpace s;
  try {
    s = tuner::search_space(request);
  } catch (const tuner::SearchRequestError& e) {
    throw InputError(flag_of(e.field()) + " " + e.rule());
  }
  if (s.keep > 0) s.keep = std::max<std::int64_t>(s.keep, a.top);  // the printed ones exactly
  return s;
}

nlohmann::json result_json(const tuner::ScoredPlan& r) {
  return {{"plan", db::plan_to_json(r.plan, r.vocab_label)},
          {"iteration_time", r.score.iteration_time},
          {"tokens_per_s", r.score.tokens_per_s},
          {"mfu", r.score.mfu},
          {"peak_memory_bytes", r.score.peak_memory_bytes},
          {"feasible", r.score.feasible}};
}

void progress_bar(std::int64_t done, std::int64_t total) {
  const int width = 40;
  const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%s%s] %lld/%lld plans", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), static_cast<long long>(done),
               static_cast<long long>(total));
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// The ranked plans as one search in the workspace (what `pipetune export --rank N` reads).
std::int64_t store_search(const TuneArgs& a, const tuner::SearchResult& r) {
  return db::store_search(a.db, a.target, r);
}

// --explain: rank 1 against rank 2 (none when the search found one feasible plan).
std::optional<tuner::PlanExplanation> explain(const Target& t, const tuner::SearchResult& r) {
  if (r.ranked.size() < 2) return std::nullopt;
  return tuner::explain_plans(t.model, t.cluster, r.ranked[0].plan, r.ranked[1].plan);
}

// What the scorers evaluate with: the failure rate the plans are ranked under, if any, and
// re-routing for it and for the cluster's own faults.
tuner::EvaluateOptions evaluate_options(const TuneArgs& a, const spec::ClusterSpec& cluster,
                                        std::int64_t experts,
                                        std::optional<double> embedding_rows) {
  for (const auto& [flag, v] :
       {std::pair{"--failure-rate", a.failure_rate}, std::pair{"--restart-delay", a.restart_delay}})
    if (!(v >= 0.0) || !std::isfinite(v))
      throw InputError(std::string(flag) + " must be a finite number >= 0");
  tuner::EvaluateOptions o =
      tuner::search_options(cluster, {a.failure_rate, a.restart_delay, a.reroute});
  if (const auto u = moe_imbalance(a.moe_imbalance, experts, a.db))
    tuner::set_moe_imbalance(o, cluster.hardware, *u);
  if (embedding_rows) tuner::set_embedding_rows_factor(o, cluster.hardware, *embedding_rows);
  return o;
}

void run(const TuneArgs& a) {
  tuner::SearchSpace space = make_space(a);
  // The measured rows price the sparse gradient's candidates and decide which are tried.
  const std::optional<double> rows = embedding_rows_factor(a.embedding_rows, a.db);
  space.embedding_rows_factor = rows.value_or(1.0);
  const Target t{space.model, space.cluster, space.global_batch};
  const bool bar = isatty(STDERR_FILENO) != 0;
  const tuner::SearchResult r = tuner::search_plans(
      space,
      tuner::evaluator_scorers(t.model, t.cluster,
                               evaluate_options(a, t.cluster, t.model.experts, rows)),
      bar ? progress_bar : tuner::SearchProgress{});
  if (r.ranked.empty())
    throw InputError(tuner::no_feasible_plan_explanation(r, t.model, t.cluster));
  const std::size_t top = std::min<std::size_t>(static_cast<std::size_t>(a.top), r.ranked.size());
  const std::int64_t search_id = a.no_db ? -1 : store_search(a, r);
  if (search_id >= 0) note_kept("stored as search " + std::to_string(search_id) + " in " + a.db);
  const std::optional<tuner::PlanExplanation> explanation =
      a.explain ? explain(t, r) : std::nullopt;

  if (a.json) {
    nlohmann::json results = nlohmann::json::array(), pareto = nlohmann::json::array();
    for (std::size_t i = 0; i < top; ++i) results.push_back(result_json(r.ranked[i]));
    for (const auto& p : r.pareto) pareto.push_back(result_json(p));
    nlohmann::json j = {{"model", t.model.name},
                        {"hardware", t.cluster.hardware.name},
                        {"gpus", t.cluster.devices},
                        {"global_batch", t.global_batch},
                        {"seq_len", t.model.seq_len},
                        {"candidates_enumerated", r.candidates_enumerated},
                        {"candidates_evaluated", r.candidates_evaluated},
                        {"feasible", r.ranked.size()},
                        {"pruned", r.pruned},
                        {"results", results},
                        {"pareto", pareto}};
    if (search_id >= 0) j["search_id"] = search_id;
    if (a.failure_rate > 0.0)
      j["failures"] = {{"rate_per_device_hour", a.failure_rate},
                       {"restart_delay", a.restart_delay},
                       {"reroute", a.reroute},
                       {"ranked_by", "expected iteration time"}};
    if (a.explain)
      j["explanation"] = explanation ? explanation_json(*explanation) : no_runner_up_json();
    print_json_value(j);
    return;
  }
  std::printf(
      "%s on %d x %s, global batch %lld, sequence %lld: %lld plans, %lld simulated, "
      "%zu feasible\n\n",
      t.model.name.c_str(), t.cluster.devices, t.cluster.hardware.name.c_str(),
      static_cast<long long>(t.global_batch), static_cast<long long>(t.model.seq_len),
      static_cast<long long>(r.candidates_enumerated),
      static_cast<long long>(r.candidates_evaluated), r.ranked.size());
  if (a.failure_rate > 0.0)
    std::printf(
        "ranked by expected iteration and throughput: devices failing at %g per device-hour, "
        "each back after %s%s\n\n",
        a.failure_rate, human_time(a.restart_delay).c_str(),
        a.reroute ? ", a failed one's micro-batches re-routed to its stage's other replicas"
                  : ", the step waiting for it");
  int width = 4;
  for (std::size_t i = 0; i < top; ++i)
    width = std::max(
        width, static_cast<int>(plan_summary(r.ranked[i].plan, r.ranked[i].vocab_label).size()));
  std::printf("%-4s %-*s %11s %11s %6s %11s\n", "rank", width, "plan", "iteration", "tokens/s",
              "MFU", "peak mem");
  for (std::size_t i = 0; i < top; ++i) {
    const auto& c = r.ranked[i];
    std::printf("%-4zu %-*s %11s %11.0f %5.1f%% %11s\n", i + 1, width,
                plan_summary(c.plan, c.vocab_label).c_str(),
                human_time(c.score.iteration_time).c_str(), c.score.tokens_per_s,
                100.0 * c.score.mfu, human_bytes(c.score.peak_memory_bytes).c_str());
  }
  std::printf("\nPareto front (throughput against peak memory): %zu plans\n", r.pareto.size());
  std::printf("pruned:\n");
  for (const auto& [reason, n] : r.pruned)
    std::printf("  %8lld  %s\n", static_cast<long long>(n), reason.c_str());
  if (search_id >= 0)
    std::printf(
        "\nstored as search %lld in %s (pipetune export --format megatron -o "
        "FILE)\n",
        static_cast<long long>(search_id), a.db.c_str());
  if (a.explain)
    std::printf("\nrank 1 (best) against rank 2 (runner-up):\n%s",
                explanation ? tuner::explanation_text(*explanation).c_str()
                            : (std::string(kNoRunnerUp) + "\n").c_str());
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "Search TP/PP/DP/EP, schedules, vocabulary layers, recomputation, offload and ZeRO");
  add_target_options(cmd, a->target);
  cmd->add_option("--schedules", a->schedules, "Schedules to try, comma-separated (default all)");
  cmd->add_option("--vocab-modes", a->vocab_modes,
                  "none, redis, auto, vocab-1, vocab-2, interlaced (comma-separated; default all)");
  cmd->add_option("--max-candidates", a->max_candidates, "Stop after this many plans (0 = all)");
  cmd->add_flag("--no-offload", a->no_offload,
                "Keep activations and optimizer state on the device (by default plans that need "
                "recomputation also try offload to host memory where the hardware gives "
                "host_bandwidth)");
  cmd->add_flag("--no-stage-layouts", a->no_stage_layouts,
                "Give every pipeline stage the plan's tp (by default each plan with a pipeline and "
                "an even tp also tries one end of the pipeline at twice the tp, the devices taken "
                "from other stages, layers split in proportion)");
  cmd->add_flag(
      "--no-moe-chunks", a->no_moe_chunks,
      "One all-to-all each way in every MoE layer (by default MoE plans with ep > 1 also "
      "try it in 2 and 4 chunks overlapped with the experts' GEMMs, which the Megatron-LM, "
      "torchtitan and DeepSpeed exports refuse)");
  cmd->add_flag("--no-whole-experts", a->no_whole_experts,
                "Keep every MoE layer's experts sharded over TP (by default MoE plans with tp > 1 "
                "also try each EP rank's experts whole, divided among the TP ranks: PPMoE's "
                "layout, which the Megatron-LM, torchtitan and DeepSpeed exports refuse)");
  cmd->add_flag("--no-dedup-experts", a->no_dedup_experts,
                "Never deduplicate sharded experts over TP (by default MoE plans with tp > 1 and "
                "ep > 1 also try expert_layout dedup, Parm's schedule: each TP rank sends its "
                "share of the slots through the all-to-all)");
  cmd->add_flag("--no-two-phase-a2a", a->no_two_phase_a2a,
                "Keep every MoE all-to-all flat (by default MoE plans whose EP group spans nodes "
                "also try Tutel's two-phase all-to-all, moe_a2a_node_ranks: among a node's EP "
                "ranks, then across nodes; the Megatron-LM, torchtitan and DeepSpeed exports "
                "refuse it)");
  cmd->add_flag("--no-sparse-embedding", a->no_sparse_embedding,
                "Reduce every plan's embedding gradient dense (by default plans with dp > 1 also "
                "try EmbRace's sparse embedding gradient where its touched rows move fewer bytes "
                "than the table, sparse_embedding_gradient; the Megatron-LM, torchtitan and "
                "DeepSpeed exports refuse it)");
  cmd->add_option("--top", a->top, "Results to print")->capture_default_str();
  cmd->add_option("--failure-rate", a->failure_rate,
                  "Unreliable peers: rank by expected throughput with devices failing at this "
                  "rate per device-hour (0: none)")
      ->capture_default_str();
  cmd->add_option("--restart-delay", a->restart_delay,
                  "Unreliable peers: seconds until a failed device is back")
      ->capture_default_str();
  cmd->add_flag("--reroute", a->reroute,
                "Unreliable peers: each stage's data-parallel replicas take a failed or slow "
                "one's micro-batches (SWARM), for --failure-rate and the cluster's faults");
  cmd->add_option("--keep", a->keep,
                  "Results ranked exactly (at least --top); plans whose lower bound cannot reach "
                  "them or the Pareto front are not simulated (0 = simulate every plan that can "
                  "fit the memory)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Scoring threads (0 = all cores)");
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout");
  cmd->add_flag("--explain", a->explain,
                "Explain why rank 1 beat rank 2: the binding stage, the busiest link, the "
                "difference by part and the settings that differ");
  add_moe_imbalance_options(cmd, a->moe_imbalance);
  add_embedding_rows_options(cmd, a->embedding_rows);
  add_db_option(cmd, a->db);
  cmd->add_flag("--no-db", a->no_db, "Do not store the results in a workspace");
  cmd->callback([a] { run(*a); });
}

}  // namespace pipetune::cli
