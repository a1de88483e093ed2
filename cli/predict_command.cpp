// `pipetune predict`: the cost model, schedule simulator and memory model on one given plan.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/measured_embedding_rows.hpp"
#include "cli/moe_imbalance_flags.hpp"
#include "cli/plan_flags.hpp"
#include "cli/predict_against.hpp"
#include "cli/tuning_target.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/record_json.hpp"
#include "engine/errors.hpp"
#include "engine/spec/run_spec.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/run_setup.hpp"
#include "tuner/search/auto_layer_split.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::cli {

namespace {

struct PredictArgs {
  TargetArgs target;
  std::string config, against, db;
  PlanFlags plan;  // dp default: gpus / (tp*pp); chunks: the schedule's own
  std::string schedule = "1f1b", vocab = "none", recompute = "none";
  std::optional<double> skip_ratio;  // skippipe
  bool layered_reduction = false;    // an R op per layer group
  bool modular = false;              // one layer per group (chunks = layers / pp)
  bool reroute = false;              // SWARM re-routing of the cluster's faults
  std::string rank_order = "tp-dp-pp", node_group_order;
  std::string stage_recompute;  // comma list, one mode per pipeline rank; empty = recompute
  std::string stage_tp;         // comma list, one TP degree per pipeline rank; empty = tp
  bool sequence_parallel = false;
  bool offload_activations = false, offload_optimizer = false;
  MoeImbalanceArgs moe_imbalance;
  EmbeddingRowsArgs embedding_rows;
  bool json = false;
};

// The prediction of one plan, as text or one JSON object.
void print_prediction(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                      std::int64_t global_batch, const spec::ParallelPlan& given,
                      const std::string& vocab, const tuner::PlanEvaluation& e, bool json) {
  // The plan as simulated: terapipe's token slices as the dynamic programming chose them.
  spec::ParallelPlan p = given;
  if (p.slice_tokens.empty()) p.slice_tokens = e.slice_tokens;
  if (json) {
    nlohmann::json stages = nlohmann::json::array();
    for (std::size_t i = 0; i < e.memory.stages.size(); ++i) {
      const auto& m = e.memory.stages[i];
      nlohmann::json s = {{"stage", m.stage},
                          {"parameter_bytes", m.parameters},
                          {"gradient_bytes", m.gradients},
                          {"optimizer_bytes", m.optimizer},
                          {"activation_bytes", m.activations},
                          {"peak_memory_bytes", m.total()},
                          {"host_bytes", m.host()}};
      if (i < e.stages.size()) {
        s["busy"] = e.stages[i].busy;
        s["bubble"] = e.stages[i].bubble;
        s["bubble_ratio"] = e.stages[i].bubble_ratio;
        s["copy_stall"] = e.stages[i].copy_stall;
        s["overlap_hidden"] = e.stages[i].overlap_hidden;
        if (e.stages[i].fault_stall > 0.0) s["fault_stall"] = e.stages[i].fault_stall;
      }
      stages.push_back(s);
    }
    const nlohmann::json j = {{"model", model.name},
                              {"hardware", cluster.hardware.name},
                              {"gpus", cluster.devices},
                              {"plan", db::plan_to_json(p, vocab)},
                              {"iteration_time", e.iteration_time},
                              {"tokens_per_s", e.tokens_per_s},
                              {"mfu", e.mfu},
                              {"tflops_per_gpu", e.tflops_per_gpu},
                              {"hfu_tflops_per_gpu", e.hfu_tflops_per_gpu},
                              {"bubble_ratio", e.bubble_ratio},
                              {"peak_memory_bytes", e.memory.peak_bytes},
                              {"feasible", e.feasible},
                              {"infeasible_reason", e.infeasible_reason},
                              {"stages", stages}};
    print_json_value(j);
    return;
  }
  std::printf("%s on %d x %s, global batch %lld, sequence %lld\n%s\n\n", model.name.c_str(),
              cluster.devices, cluster.hardware.name.c_str(), static_cast<long long>(global_batch),
              static_cast<long long>(model.seq_len), plan_summary(p, vocab).c_str());
  std::printf("iteration      %s  (pipeline %s, data-parallel %s, optimizer %s)\n",
              human_time(e.iteration_time).c_str(), human_time(e.pipeline_time).c_str(),
              human_time(e.data_parallel_time).c_str(), human_time(e.optimizer_time).c_str());
  std::printf(
      "throughput     %.0f tokens/s, MFU %.1f%%, %.1f TFLOP/s per GPU (%.1f with "
      "recomputation)\n",
      e.tokens_per_s, 100.0 * e.mfu, e.tflops_per_gpu, e.hfu_tflops_per_gpu);
  std::printf("bubble         %.1f%%\n", 100.0 * e.bubble_ratio);
  // Overlapped pairs (DualPipeV's F & B): communication inside ops hidden behind the other op.
  std::size_t most = 0;
  for (std::size_t i = 0; i < e.stages.size(); ++i)
    if (e.stages[i].overlap_hidden > e.stages[most].overlap_hidden) most = i;
  if (!e.stages.empty() && e.stages[most].overlap_hidden > 0.0)
    std::printf("overlap        F&B pairs hide %s of communication per iteration on stage %zu\n",
                human_time(e.stages[most].overlap_hidden).c_str(), most);
  // Unreliable peers: what each slow or failing stage costs.
  const schedule::CostTable& t = e.costs.table;
  for (std::size_t i = 0; i < t.stages.size() && i < e.stages.size(); ++i) {
    const schedule::StageCosts& c = t.stages[i];
    const bool pool = t.reroute_pool >= 2;
    if (c.slowdown > 1.0)
      std::printf("slow           stage %zu at %.3gx its passes' time%s\n", i, c.slowdown,
                  pool ? (" on " + std::to_string(c.slow_replicas) + " of its " +
                          std::to_string(t.reroute_pool) +
                          " replicas (they share the load by "
                          "throughput)")
                             .c_str()
                       : "");
    for (const schedule::StageCosts::Failure& f : c.failures)
      std::printf(
          "failure        stage %zu at %s, %s\n", i, human_time(f.at).c_str(),
          pool && c.most_replicas_down() < t.reroute_pool
              ? (std::to_string(f.new_replicas) + " more of its " + std::to_string(t.reroute_pool) +
                 " replicas, re-routed to the others until back after " +
                 human_time(f.restart_delay))
                    .c_str()
              : ("back after " + human_time(f.restart_delay)).c_str());
    if (c.fails())
      std::printf("failure        stage %zu lost %s\n", i,
                  human_time(e.stages[i].fault_stall).c_str());
  }
  std::printf("memory         %s peak on stage %d of %s per GPU: %s\n",
              human_bytes(e.memory.peak_bytes).c_str(), e.memory.peak_stage,
              human_bytes(e.memory.device_bytes).c_str(),
              e.feasible ? "fits" : ("does not fit: " + e.infeasible_reason).c_str());
  if (e.memory.peak_host_bytes > 0.0) {  // offloaded activations or optimizer state
    std::printf("host memory    %s peak on stage %d of %s per GPU\n",
                human_bytes(e.memory.peak_host_bytes).c_str(), e.memory.peak_host_stage,
                e.memory.host_bytes > 0.0 ? human_bytes(e.memory.host_bytes).c_str() : "unknown");
  }
  std::printf("\n");
  std::printf("%-6s %11s %11s %11s %11s %11s %9s\n", "stage", "weights", "grads", "optimizer",
              "activations", "total", "bubble%");
  for (std::size_t i = 0; i < e.memory.stages.size(); ++i) {
    const auto& m = e.memory.stages[i];
    std::printf("%-6d %11s %11s %11s %11s %11s %8.1f%%\n", m.stage,
                human_bytes(m.parameters).c_str(), human_bytes(m.gradients).c_str(),
                human_bytes(m.optimizer).c_str(), human_bytes(m.activations).c_str(),
                human_bytes(m.total()).c_str(),
                i < e.stages.size() ? 100.0 * e.stages[i].bubble_ratio : 0.0);
  }
}

void run_flags(const PredictArgs& a) {
  const auto require = [](bool given, const char* flag) {
    if (!given) throw InputError(std::string(flag) + " is required (or --config RUN)");
  };
  require(!a.target.model.empty(), "--model");
  require_target_options(a.target, ", or --config RUN");
  require(a.target.global_batch != 0, "--global-batch");
  if (a.stage_tp.empty()) require(a.plan.tp.has_value(), "--tp (or --stage-tp)");
  require(a.plan.pp.has_value(), "--pp");
  const Target t = resolve_target(a.target);
  spec::ParallelPlan p;
  p.chunks = schedule::default_chunks(a.schedule);
  p.dp = 0;  // the devices left over by tp*pp (sum(stage_tp)) unless given
  a.plan.apply_to(p);
  apply_stage_tp_flag(a.stage_tp, a.plan.tp, p);  // tp: --stage-tp's first entry
  if (p.dp == 0) {
    // Devices per data-parallel replica: tp*pp, or sum(stage_tp) with per-stage layouts.
    std::int64_t per_replica = std::int64_t{p.tp} * p.pp;
    if (!p.stage_tp.empty()) {
      per_replica = 0;
      for (int tp : p.stage_tp) per_replica += tp;
    }
    const char* what = p.stage_tp.empty() ? "tp*pp = " : "sum(--stage-tp) = ";
    if (t.cluster.devices % per_replica != 0)
      throw InputError(what + std::to_string(per_replica) + " does not divide --gpus " +
                       std::to_string(t.cluster.devices));
    p.dp = static_cast<int>(t.cluster.devices / per_replica);
  }
  p.global_batch = t.global_batch;
  p.schedule = a.schedule;
  if (a.skip_ratio) p.skip_ratio = *a.skip_ratio;
  if (a.vocab == "redis") {
    p.layer_split = tuner::redistributed_layer_split(t.model.layers, p.pp, 0.0,
                                                     tuner::output_layer_in_layers(t.model));
  } else if (a.vocab != "auto") {
    p.vocab = schedule::parse_vocab_mode(a.vocab);
  }
  p.recompute = spec::parse_recompute(a.recompute);
  p.stage_recompute = parse_stage_recompute_flag(a.stage_recompute, p.pp);
  p.sequence_parallel = a.sequence_parallel;
  p.offload_activations = a.offload_activations;
  p.offload_optimizer = a.offload_optimizer;
  p.layered_reduction = a.layered_reduction;
  if (a.modular) p.chunks = spec::modular_chunks(t.model, p);
  try {
    p.rank_order = spec::parse_rank_order(a.rank_order);
  } catch (const SpecError&) {
    throw InputError("--rank-order '" + a.rank_order + "' is not a rank order (valid: tp-dp-pp, " +
                     "tp-pp-dp)");
  }
  try {
    p.node_group_order = spec::parse_node_group_order(a.node_group_order);
  } catch (const SpecError& e) {
    throw InputError("--node-group-order: " + std::string(e.what()));
  }
  if (t.global_batch % (static_cast<std::int64_t>(p.micro_batch_size) * p.dp) != 0)
    throw InputError("--global-batch " + std::to_string(t.global_batch) +
                     " is not divisible by micro-batch " + std::to_string(p.micro_batch_size) +
                     " x dp " + std::to_string(p.dp));
  p.microbatches = static_cast<int>(t.global_batch / (p.micro_batch_size * p.dp));
  if (a.vocab == "auto") {
    // The split the tuner's auto mode picks for this plan (Merak's partitioning).
    if (p.pp < 2) throw InputError("--vocab auto needs a pipeline (--pp at least 2)");
    spec::validate(t.model, t.cluster, p);
    const std::optional<std::vector<int>> split = tuner::auto_layer_split(t.model, t.cluster, p);
    if (!split)
      throw InputError("--vocab auto: no layer split fits every stage's memory on " +
                       t.cluster.hardware.name);
    p.layer_split = *split;
  }
  tuner::EvaluateOptions options;
  if (a.reroute) {
    options.execution = tuner::default_execution(t.cluster.hardware);
    options.execution->reroute_failures = true;
  }
  if (const auto u = moe_imbalance(a.moe_imbalance, t.model.experts, a.db))
    tuner::set_moe_imbalance(options, t.cluster.hardware, *u);
  if (const auto rows = embedding_rows_factor(a.embedding_rows, a.db))
    tuner::set_embedding_rows_factor(options, t.cluster.hardware, *rows);
  print_prediction(t.model, t.cluster, t.global_batch, p, a.vocab,
                   tuner::evaluate_plan(t.model, t.cluster, p, options), a.json);
}

// `predict --config RUN [--against STORED_RUN]`: the run file's prediction, or its per-stage
// error against a measured or imported run of the same plan.
void run_config(const PredictArgs& a) {
  const std::optional<tuner::MoeImbalance> imbalance =
      moe_imbalance(a.moe_imbalance, spec::load_run(a.config).model.experts, a.db);
  const tuner::SimulationSetup setup = tuner::setup_from_run_file(
      a.config, a.reroute, imbalance, embedding_rows_factor(a.embedding_rows, a.db));
  if (!a.against.empty()) {
    print_prediction_against(setup, a.db, a.against, a.json);
    return;
  }
  const spec::RunSpec& run = *setup.run;
  print_prediction(run.model, run.cluster, run.plan.global_batch, run.plan,
                   std::string(schedule::vocab_mode_name(run.plan.vocab)), *setup.iteration,
                   a.json);
}

void run(const PredictArgs& a) {
  if (!a.config.empty()) {
    run_config(a);
    return;
  }
  if (!a.against.empty())
    throw InputError("--against compares a run file's prediction: give --config RUN");
  run_flags(a);
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto a = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand(
      "predict", "Predict one plan: iteration time, throughput, MFU and memory per stage");
  add_target_options(cmd, a->target);
  add_plan_flags(cmd, a->plan,
                 {.tp = "Tensor-parallel degree",
                  .pp = "Pipeline stages",
                  .dp = "Data-parallel degree (default: gpus / (tp*pp), or gpus / "
                        "sum(stage-tp))",
                  .ep = "Expert-parallel degree",
                  .chunks = "Layer groups per stage (interleaved, V schedules)",
                  .micro_batch_size = "Sequences per micro-batch",
                  .zero = "ZeRO stage 0-3 (1: distributed optimizer)",
                  .slices = "terapipe: token slices per micro-batch (default: TeraPipe's dynamic "
                            "programming over uneven slices)",
                  .moe_chunks = kMoeChunksHelp,
                  .moe_a2a_node_ranks = kMoeA2aNodeRanksHelp,
                  .expert_layout = kExpertLayoutHelp,
                  .sparse_embedding_gradient = kSparseEmbeddingHelp});
  cmd->add_option("--schedule", a->schedule, "Pipeline schedule")->capture_default_str();
  cmd->add_option(
      "--skip-ratio", a->skip_ratio,
      "skippipe, skippipe-ca: share of the stages each micro-batch skips (default 1/3)");
  cmd->add_option(
         "--vocab", a->vocab,
         "Vocabulary layers: none, redis, auto (the tuner's automatic layer split), vocab-1, "
         "vocab-2, interlaced")
      ->capture_default_str();
  cmd->add_option("--recompute", a->recompute, "none, selective or full")->capture_default_str();
  cmd->add_option("--stage-recompute", a->stage_recompute,
                  "Recomputation per pipeline stage, comma-separated (full,selective,none,...: pp "
                  "entries; overrides --recompute)");
  cmd->add_option("--stage-tp", a->stage_tp,
                  "Per-stage layouts: the tensor-parallel degree of each pipeline stage, "
                  "comma-separated (4,2,2: pp entries; dp is shared, stage s holds stage-tp[s]*dp "
                  "GPUs; --tp defaults to the first)");
  cmd->add_flag("--sequence-parallel", a->sequence_parallel, "Sequence parallelism (with TP)");
  add_moe_imbalance_options(cmd, a->moe_imbalance);
  add_embedding_rows_options(cmd, a->embedding_rows);
  cmd->add_flag("--reroute", a->reroute,
                "Unreliable peers (a cluster's [[faults]]): each stage's data-parallel replicas "
                "share its micro-batches by throughput and take over a failed one's (SWARM)");
  cmd->add_flag("--layered-reduction", a->layered_reduction,
                "Reduce each layer group's gradients over data parallelism as soon as its "
                "backward is complete (ZeRO-0)");
  cmd->add_flag("--modular", a->modular,
                "Modular placement: one layer per layer group, layer l on pipeline rank l mod pp "
                "(chunks = layers / pp; linear schedules)");
  cmd->add_flag("--offload-activations", a->offload_activations,
                "Offload: move each forward's activations to host memory until its backward");
  cmd->add_flag("--offload-optimizer", a->offload_optimizer,
                "Offload: keep the optimizer state in host memory and update there");
  cmd->add_option("--rank-order", a->rank_order,
                  "Placement: tp-dp-pp (DP groups on neighbouring devices) or tp-pp-dp (each "
                  "replica's pipeline on neighbouring devices)")
      ->capture_default_str();
  cmd->add_option("--node-group-order", a->node_group_order,
                  "Placement: the cluster's node groups in the order they take the ranks, e.g. "
                  "1,0 (default: as the cluster lists them)");
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout");
  // A run file instead of the flags, and what to compare its prediction with.
  std::vector<CLI::Option*> flags;
  // --reroute, the MoE imbalance and the embedding rows are how a plan is priced, not the plan:
  // they go with either.
  for (CLI::Option* o : cmd->get_options())
    if (o->get_name() != "--json" && o->get_name() != "--help" && o->get_name() != "--reroute" &&
        o->get_name() != "--moe-imbalance" && o->get_name() != "--moe-imbalance-from" &&
        o->get_name() != "--embedding-rows" && o->get_name() != "--embedding-rows-from")
      flags.push_back(o);
  CLI::Option* config =
      cmd->add_option("--config", a->config, "Predict a run file (model, cluster, plan) instead");
  for (CLI::Option* o : flags) config->excludes(o);
  cmd->add_option("--against", a->against,
                  "With --config: the per-stage error against this stored run (id or name)");
  add_db_option(cmd, a->db);
  // The target's flags are required unless --config is given (checked in run_flags).
  for (const char* name : {"--model", "--global-batch"}) cmd->get_option(name)->required(false);
  cmd->callback([a] { run(*a); });
}

}  // namespace pipetune::cli
