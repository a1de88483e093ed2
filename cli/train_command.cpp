// `pipetune train`: train a GPT on the embedded engine's virtual cluster and report loss,
// throughput, and per-stage bubble and memory.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "cli/count_flags.hpp"
#include "cli/error_wording.hpp"
#include "cli/format.hpp"
#include "cli/plan_flags.hpp"
#include "cli/stdout_status.hpp"
#include "cli/train_output.hpp"
#include "cli/workspace_cli.hpp"
#include "db/chrome_trace.hpp"
#include "db/store/training_run_sink.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "engine/session/training_session.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/run_spec.hpp"
#include "tuner/predict/planned_schedule.hpp"

namespace pipetune::cli {

namespace {

// The run `pipetune train` trains when no --config is given.
constexpr const char* kDefaultRun = "tiny-train";

struct TrainArgs {
  std::string config;
  std::string model;
  PlanFlags plan;
  std::optional<std::string> schedule, vocab, recompute;
  std::optional<double> skip_ratio;            // skippipe
  bool layered_reduction = false;              // an R op per layer group
  bool modular = false;                        // one layer per group (chunks = layers / pp)
  std::optional<std::string> stage_recompute;  // comma list, one mode per pipeline rank
  std::optional<std::string> stage_tp;         // comma list, one TP degree per pipeline rank
  int steps = 60;
  std::string seed = "1234";  // parsed strictly: CLI11 saturates numbers past 2^64
  float lr = 3e-3f;
  std::string data;
  std::string checkpoint;
  int checkpoint_every = 0;
  std::string resume;
  bool json = false;
  bool sequence_parallel = false, no_sequence_parallel = false;
  bool offload_activations = false, offload_optimizer = false;
  std::string trace;
  bool force = false;
  int threads = 0;
  double watchdog = 300.0;
  std::optional<int> ranks_per_process;
  std::optional<std::string> backend;
  std::optional<std::string> precision;  // unset: the run file's (fp32 by default)
  std::optional<std::string> attention;
  std::optional<std::string> gemm_inputs;  // with cuda bf16: copies (default) or in-gemm
  bool gelu_epilogue = false;              // with cuda: the MLP's GELU in cuBLASLt's epilogues
  std::string fault;
  std::string db;
  bool no_db = false;
  bool no_gpu_capture = false;
  bool serial_pairs = false;  // with cuda: an overlapped pair's ops one after the other
  std::optional<std::string> gpu_capture_every;
  std::optional<long long> device_cache_mib;
  std::string name;
};

struct TrainSetup {
  runtime::TrainOptions options;
  spec::ClusterSpec cluster;  // the run file's: its hardware's cost model plans the schedule
  spec::EngineBackend backend = spec::EngineBackend::cpu;
  spec::EnginePrecision precision = spec::EnginePrecision::fp32;
  spec::EngineAttention attention = spec::EngineAttention::stored;
};

std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t seed = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, seed);
  if (text.empty() || ec != std::errc() || ptr != end)
    throw InputError("--seed must be an integer from 0 to 18446744073709551615, not '" + text +
                     "'");
  return seed;
}

// --gpu-capture-every: "auto" (0) or a whole number of steps, at least 1.
int parse_capture_every(const std::string& text) {
  if (text == "auto") return 0;
  int every = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, every);
  if (text.empty() || ec != std::errc() || ptr != end || every < 1)
    throw InputError("--gpu-capture-every must be auto or a number of steps, at least 1, not '" +
                     text + "'");
  return every;
}

// The run file's plan with the plan flags and the schedule, vocabulary, recomputation and
// sequence-parallel choices given on the command line.
spec::ParallelPlan plan_with_flags(const TrainArgs& a, const spec::RunSpec& run) {
  spec::ParallelPlan plan = run.plan;
  a.plan.apply_to(plan);
  // --tp alone: one TP degree for every stage, whatever the run file says per stage; with
  // --stage-tp, tp is its first entry.
  if (a.plan.tp && !a.stage_tp) plan.stage_tp.clear();
  if (a.stage_tp) {
    plan.stage_tp.clear();
    apply_stage_tp_flag(*a.stage_tp, a.plan.tp, plan);
  }
  if (a.schedule) plan.schedule = *a.schedule;
  if (a.skip_ratio) plan.skip_ratio = *a.skip_ratio;
  // Another schedule without --chunks: that schedule's default, not the run file's chunks.
  if (a.schedule && !a.plan.chunks) plan.chunks = 0;
  if (a.vocab) plan.vocab = schedule::parse_vocab_mode(*a.vocab);
  if (a.recompute) {  // one mode for every stage, whatever the run file says per stage
    plan.recompute = spec::parse_recompute(*a.recompute);
    plan.stage_recompute.clear();
  }
  if (a.stage_recompute)
    plan.stage_recompute = parse_stage_recompute_flag(*a.stage_recompute, plan.pp);
  if (a.sequence_parallel) plan.sequence_parallel = true;
  if (a.no_sequence_parallel) plan.sequence_parallel = false;
  if (a.offload_activations) plan.offload_activations = true;
  if (a.offload_optimizer) plan.offload_optimizer = true;
  if (a.layered_reduction) plan.layered_reduction = true;
  if (a.modular) plan.chunks = spec::modular_chunks(run.model, plan);
  // Flags may change the world size: the global batch follows the plan, unless the run file
  // states it (then the plan's validation refuses flags that give another batch, as predict does).
  const PlanFlags& f = a.plan;
  if ((f.tp || f.pp || f.dp || f.microbatches || f.micro_batch_size || a.stage_tp) &&
      !run.global_batch_given)
    plan.global_batch = 0;
  return plan;
}

// Steps, seed, learning rate, data, checkpoints, threads, watchdog and the injected fault.
void apply_run_flags(const TrainArgs& a, runtime::TrainOptions& o) {
  if (a.steps < 1)
    throw InputError("--steps must be at least 1 (got " + std::to_string(a.steps) + ")");
  if (!(a.lr > 0.0f) || !std::isfinite(a.lr)) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", static_cast<double>(a.lr));
    throw InputError(std::string("--lr must be a finite positive number, not ") + shown);
  }
  if (a.threads < 0 || a.threads > 1024)
    throw InputError("--threads must be 0 (cores / ranks) to 1024 per rank, not " +
                     std::to_string(a.threads));
  if (a.checkpoint_every < 0) throw InputError("--checkpoint-every must be >= 0");
  if (a.checkpoint_every > 0 && a.checkpoint.empty())
    throw InputError("--checkpoint-every needs --checkpoint DIR (where to write the checkpoints)");
  o.steps = a.steps;
  o.seed = parse_seed(a.seed);
  o.adamw.lr = a.lr;
  o.data_shards = a.data;
  o.checkpoint_dir = a.checkpoint;
  o.checkpoint_every = a.checkpoint_every;
  o.resume_dir = a.resume;
  o.record_trace = !a.trace.empty();  // the store gets the records step by step instead
  o.threads_per_rank = a.threads;
  if (!(a.watchdog > 0.0) || !std::isfinite(a.watchdog))
    throw InputError("--watchdog must be a positive number of seconds");
  o.watchdog_seconds = a.watchdog;
  if (!a.fault.empty()) {
    o.fault = runtime::parse_injected_fault(a.fault);
    const int world = o.plan.world_size();
    if (o.fault->rank >= world)
      throw InputError("--fault: rank " + std::to_string(o.fault->rank) + " is not a rank of the " +
                       std::to_string(world) + "-rank plan");
    if (o.fault->step > a.steps)  // a resumed run's own steps: check_train_options
      throw InputError("--fault: step " + std::to_string(o.fault->step) +
                       " is beyond the run's --steps " + std::to_string(a.steps));
  }
}

// Backend, precision and attention kernel: each flag's, else the run file's, else the default;
// the GEMM options only where they apply.
void choose_engine(const TrainArgs& a, const spec::RunSpec& run, TrainSetup& setup) {
  const spec::EngineBackend backend =
      a.backend ? spec::parse_engine_backend(*a.backend) : run.backend;
  spec::EnginePrecision precision = run.precision;
  if (a.precision) {
    if (*a.precision != "fp32" && *a.precision != "bf16")
      throw InputError("--precision must be fp32 or bf16, not '" + *a.precision + "'");
    precision = spec::parse_engine_precision(*a.precision);
  }
  if (precision == spec::EnginePrecision::bf16 && backend != spec::EngineBackend::cuda)
    throw InputError(
        std::string(a.precision ? "--precision bf16" : "the run file's precision bf16") +
        " is for --backend cuda (the cpu backend computes in fp32 only)");
  setup.backend = backend;
  setup.precision = precision;
  // The attention kernel: the flag's, else the run file's, else the backend and precision's
  // default (flash-mma, bf16 products on tensor cores, for bf16 runs on GPUs).
  spec::EngineAttention attention =
      run.attention.value_or(spec::default_engine_attention(backend, precision));
  if (a.attention) {
    try {
      attention = spec::parse_engine_attention(*a.attention);
    } catch (const SpecError&) {
      throw InputError("--attention must be one of " + spec::engine_attention_names() + ", not '" +
                       *a.attention + "'");
    }
  }
  if (const std::string problem = spec::engine_attention_problem(attention, backend, precision);
      !problem.empty())
    throw InputError(std::string(a.attention ? "--attention " : "the run file's attention ") +
                     problem);
  setup.attention = attention;
  if (a.gemm_inputs) {
    if (*a.gemm_inputs != "copies" && *a.gemm_inputs != "in-gemm")
      throw InputError("--gemm-inputs must be copies or in-gemm, not '" + *a.gemm_inputs + "'");
    if (backend != spec::EngineBackend::cuda || precision != spec::EnginePrecision::bf16)
      throw InputError(
          "--gemm-inputs is for --backend cuda --precision bf16 (how the bf16 GEMM "
          "inputs are made)");
  }
  if (a.gelu_epilogue && backend != spec::EngineBackend::cuda)
    throw InputError("--gelu-epilogue is for --backend cuda (cuBLASLt's GEMM epilogues)");
}

// GPU capture and the device cache: checked before the device is, so a bad value is the
// input's error wherever the run would go.
void apply_gpu_flags(const TrainArgs& a, spec::EngineBackend backend, runtime::TrainOptions& o) {
  if (a.gpu_capture_every) {
    o.gpu_capture_every = parse_capture_every(*a.gpu_capture_every);
    if (backend != spec::EngineBackend::cuda)
      throw InputError(
          "--gpu-capture-every is for --backend cuda (the cpu backend captures no GPU)");
    if (a.no_gpu_capture)
      throw InputError(
          "--gpu-capture-every and --no-gpu-capture: choose one (capture off takes nothing)");
  }
  if (a.no_gpu_capture && backend != spec::EngineBackend::cuda)
    throw InputError("--no-gpu-capture is for --backend cuda (the cpu backend captures no GPU)");
  o.capture_gpu_activity = !a.no_gpu_capture;
  if (a.serial_pairs && backend != spec::EngineBackend::cuda)
    throw InputError(
        "--serial-pairs is for --backend cuda (the cpu backend runs a pair's ops one "
        "after the other anyway)");
  o.overlap_pairs = !a.serial_pairs;
  if (a.device_cache_mib) {
    constexpr long long kMaxMib = 1LL << 24;  // 16 TiB: past any device
    if (*a.device_cache_mib < 0 || *a.device_cache_mib > kMaxMib)
      throw InputError("--device-cache-mib must be 0 to " + std::to_string(kMaxMib) + ", not " +
                       std::to_string(*a.device_cache_mib));
    if (backend != spec::EngineBackend::cuda)
      throw InputError("--device-cache-mib is for --backend cuda (it caps a GPU rank's cache)");
    o.device_buffer_cache_bytes = static_cast<std::size_t>(*a.device_cache_mib) << 20;
  }
}

TrainSetup build_options(const TrainArgs& a) {
  const spec::RunSpec run =
      spec::load_run(a.config.empty() ? kDefaultRun : a.config, spec::RunCheck::KeysOnly);
  TrainSetup setup;
  setup.cluster = run.cluster;
  runtime::TrainOptions& o = setup.options;
  o.model = a.model.empty() ? run.model : spec::load_model(a.model);
  o.plan = plan_with_flags(a, run);
  apply_run_flags(a, o);
  choose_engine(a, run, setup);
  apply_gpu_flags(a, setup.backend, o);
  return setup;
}

// Prints the run's report and where it went (rank 0's process under MPI); run_id < 0: not stored.
void report_run(const TrainArgs& a, const runtime::TrainOptions& o, const runtime::TrainResult& r,
                std::int64_t run_id) {
  if (run_id >= 0) note_kept("the run was stored as run " + std::to_string(run_id) + " in " + a.db);
  if (a.json) {
    print_train_json(o, r, run_id,
                     {a.precision.value_or("fp32"), a.attention.value_or(""),
                      a.gemm_inputs.value_or(""), a.gelu_epilogue});
    return;
  }
  print_train_summary(r);
  if (!a.checkpoint.empty()) std::printf("checkpoint written to %s\n", a.checkpoint.c_str());
  if (!a.trace.empty()) std::printf("trace written to %s\n", a.trace.c_str());
  if (run_id >= 0)
    std::printf("stored as run %lld in %s\n", static_cast<long long>(run_id), a.db.c_str());
}

void print_header(const runtime::TrainOptions& o, const char* ranks) {
  const spec::ParallelPlan& p = o.plan;
  std::string recompute =
      !p.stage_recompute.empty()
          ? ", recompute per stage " + spec::stage_recompute_letters(p.stage_recompute)
      : p.recompute == spec::Recompute::None
          ? std::string()
          : ", recompute " + std::string(spec::recompute_name(p.recompute));
  if (!p.stage_tp.empty()) recompute += ", tp per stage " + spec::stage_tp_text(p.stage_tp);
  if (p.sequence_parallel && p.tp > 1) recompute += ", sequence parallel";
  if (p.offload_activations) recompute += ", activations offloaded";
  if (p.offload_optimizer) recompute += ", optimizer offloaded";
  std::printf("training %s on %d %s (tp=%d pp=%d dp=%d ep=%d), schedule %s, vocab %s%s, %d steps\n",
              o.model.name.c_str(), p.world_size(), ranks, p.tp, p.pp, p.dp, p.ep,
              p.schedule.c_str(), std::string(schedule::vocab_mode_name(p.vocab)).c_str(),
              recompute.c_str(), o.steps);
  if (o.model.vocab_divisible_by > 1) {
    const std::int64_t shards = p.vocab_shards();
    std::printf("vocabulary %lld padded to %lld rows (a multiple of %lld x %lld shards)\n",
                static_cast<long long>(o.model.vocab),
                static_cast<long long>(spec::padded_vocab(o.model, shards)),
                static_cast<long long>(o.model.vocab_divisible_by), static_cast<long long>(shards));
  }
  flush_stdout();
}

void print_step(const runtime::StepResult& s) {
  if (std::ferror(stdout)) return;  // stdout failed: the run goes on without its lines
  std::printf("step %4d  loss %.4f", s.step, s.loss);
  if (s.aux_loss != 0.0) std::printf("  aux %.4f", s.aux_loss);
  std::printf("  norm %7.3f  %8.1f ms  %9.0f tok/s\n", s.grad_norm, s.seconds * 1e3,
              s.tokens_per_s);
  flush_stdout();
}

// A process of a job that failed, before the job ends (ranks as processes).
void print_process_failure(const session::ProcessFailure& f) {
  std::string text = f.what;  // worded as the CLI words every error, where the error is known
  if (f.error) {
    try {
      std::rethrow_exception(f.error);
    } catch (const InputError& e) {
      text = worded(e);
    } catch (const std::exception& e) {
      text = worded_failure(e);
    } catch (...) {
    }
  }
  if (f.exit_code == 2)
    std::fprintf(stderr, "pipetune: error: %s\n", text.c_str());
  else
    std::fprintf(stderr, "pipetune: failed in process %d: %s\n", f.process, text.c_str());
  std::fflush(stderr);
}

void run(const TrainArgs& given) {
  TrainSetup setup = build_options(given);
  TrainArgs a = given;  // with the precision in effect (the flag's, else the run file's)
  a.precision = std::string(spec::engine_precision_name(setup.precision));
  a.attention = std::string(spec::engine_attention_name(setup.attention));
  require_counts_at_least_one({{a.ranks_per_process, "--ranks-per-process"}});
  session::TrainingRequest request;
  request.train = setup.options;
  request.engine = {.backend = setup.backend,
                    .precision = setup.precision,
                    .attention = setup.attention,
                    .gemm_inputs_in_gemm = a.gemm_inputs == "in-gemm",
                    .gelu_epilogue = a.gelu_epilogue};
  request.ranks_per_process = a.ranks_per_process;
  // The schedule `simulate --config` and `predict` simulate for this plan: planned with the op
  // costs of the run's hardware, so the measured and the predicted run execute the same ops.
  request.plan_schedule = tuner::training_schedule_planner(setup.cluster);
  if (!a.no_db) request.open_run = db::training_run_opener(a.db, a.name);
  request.on_process_failure = print_process_failure;
  runtime::TrainOptions shown = setup.options;  // the run as reported: plan defaults applied
  spec::apply_defaults(shown.plan);
  if (!a.json) {
    request.train.on_step = print_step;
    request.on_start = [&shown](std::int64_t, const session::RankLayout& layout) {
      print_header(shown, layout.describe().c_str());
    };
  }
  session::TrainingSession session(std::move(request));
  const bool processes = session.layout().processes > 1;
  // A trace of ranks as processes is written from the workspace run, which has every rank's.
  if (processes && !a.trace.empty() && a.no_db)
    throw InputError(
        "--trace with ranks as processes is written from the workspace run: drop --no-db");
  if (!a.trace.empty()) check_output_file(a.trace, a.force, a.no_db ? "" : a.db);
  const session::TrainingOutcome out = session.run();
  if (!out.reports) return;  // rank 0's process reports the run
  if (!a.trace.empty()) {
    if (processes)
      db::write_chrome_trace_file(db::Workspace(a.db).load(out.run_id).trace, a.trace);
    else
      db::write_chrome_trace_file(out.result.trace, a.trace);
  }
  report_run(a, shown, out.result, out.run_id);
}
// The run: its file, model and plan, and what the schedule, vocabulary, recomputation and
// sequence parallelism change in it.
void add_plan_options(CLI::App* cmd, TrainArgs* args) {
  cmd->add_option("--config", args->config,
                  std::string("Run preset or run TOML file (default: ") + kDefaultRun + ")");
  cmd->add_option("--model", args->model, "Model preset or TOML file (replaces the run's model)");
  add_plan_flags(cmd, args->plan,
                 {.tp = "Tensor-parallel degree",
                  .pp = "Pipeline stages",
                  .dp = "Data-parallel degree",
                  .ep = "Expert-parallel degree (divides dp)",
                  .chunks = "Layer groups per pipeline rank",
                  .microbatches = "Micro-batches per step",
                  .micro_batch_size = "Sequences per micro-batch",
                  .zero = "ZeRO stage: 0, 1 (optimizer state sharded over DP), 2 (and gradients) "
                          "or 3 (and parameters)",
                  .slices = "terapipe: token slices per micro-batch (default: the cost model's "
                            "choice)",
                  .moe_chunks = kMoeChunksHelp,
                  .moe_a2a_node_ranks = kMoeA2aNodeRanksHelp,
                  .expert_layout = kExpertLayoutHelp,
                  .sparse_embedding_gradient = kSparseEmbeddingHelp});
  cmd->add_option("--schedule", args->schedule, "Pipeline schedule");
  cmd->add_option(
      "--skip-ratio", args->skip_ratio,
      "skippipe, skippipe-ca: share of the stages each micro-batch skips (default 1/3)");
  cmd->add_option("--vocab", args->vocab, "Vocabulary parallelism: none, vocab-1, vocab-2");
  auto* sp =
      cmd->add_flag("--sequence-parallel", args->sequence_parallel,
                    "Sequence parallelism (with TP): LayerNorms and residuals on 1/tp of the "
                    "rows, all-gathers and reduce-scatters for the TP sums");
  cmd->add_flag("--no-sequence-parallel", args->no_sequence_parallel,
                "Without sequence parallelism, whatever the run file says")
      ->excludes(sp);
  cmd->add_option("--recompute", args->recompute,
                  "Activation recomputation: none, selective (the attention probabilities) or "
                  "full (each block from its input)");
  cmd->add_option("--stage-recompute", args->stage_recompute,
                  "Recomputation per pipeline stage, comma-separated (full,selective,none,...: pp "
                  "entries; empty: every stage as --recompute)");
  cmd->add_option("--stage-tp", args->stage_tp,
                  "Per-stage layouts: the tensor-parallel degree of each pipeline stage, "
                  "comma-separated (4,2,2: pp entries; dp is shared, stage s holds stage-tp[s]*dp "
                  "ranks; --tp defaults to the first; empty: every stage as --tp)");
  cmd->add_flag("--layered-reduction", args->layered_reduction,
                "Reduce each layer group's gradients over data parallelism as soon as its "
                "backward is complete (ZeRO-0)");
  cmd->add_flag("--modular", args->modular,
                "Modular placement: one layer per layer group, layer l on pipeline rank l mod pp "
                "(chunks = layers / pp; linear schedules)");
  cmd->add_flag("--offload-activations", args->offload_activations,
                "Offload: each forward's activations to host memory until its backward, on a "
                "copy stream");
  cmd->add_flag("--offload-optimizer", args->offload_optimizer,
                "Offload: the optimizer state in host memory, its update run there");
}

// Steps, seed, learning rate, data, checkpoints, the trace file and threads.
void add_run_options(CLI::App* cmd, TrainArgs* args) {
  cmd->add_option("--steps", args->steps, "Training steps")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the initialisation and the synthetic corpus")
      ->capture_default_str();
  cmd->add_option("--lr", args->lr, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--data", args->data,
                  "llm.c token shards (glob pattern); default: the synthetic corpus");
  cmd->add_option("--checkpoint", args->checkpoint, "Write a checkpoint to DIR at the end")
      ->check(non_empty_path());
  cmd->add_option("--checkpoint-every", args->checkpoint_every, "Also write it every N steps");
  cmd->add_option("--resume", args->resume, "Resume from the checkpoint in DIR")
      ->check(non_empty_path());
  cmd->add_flag("--json", args->json, "Print one JSON object on stdout");
  cmd->add_option("--trace", args->trace, "Write a Chrome trace JSON (Perfetto) to FILE")
      ->check(non_empty_path());
  cmd->add_flag("--force", args->force, "Overwrite the --trace file if it exists");
  cmd->add_option("--threads", args->threads, "Compute threads per rank (0 = cores / ranks)");
}

// Where the engine computes and how: backend, precision, attention, GEMMs and GPU capture.
void add_engine_options(CLI::App* cmd, TrainArgs* args) {
  cmd->add_option("--backend", args->backend,
                  "Where the engine computes: cpu or cuda (default: the run file's, else cpu)");
  cmd->add_option("--precision", args->precision,
                  "With --backend cuda: fp32, or bf16 GEMM inputs with fp32 accumulation and "
                  "master weights (default: the run file's precision, else fp32)");
  cmd->add_option("--attention", args->attention,
                  "Attention kernel: stored (keeps the T x T probabilities; the cpu default), "
                  "flash (no T x T matrix; the default on cuda in fp32), flash-tc (flash with "
                  "bf16 WMMA products on tensor cores) or flash-mma (flash with bf16 mma.sync "
                  "products, the scores kept in registers; the default on cuda in bf16)");
  cmd->add_option("--gemm-inputs", args->gemm_inputs,
                  "With --backend cuda --precision bf16: how the GEMMs get bf16 inputs: copies "
                  "(rounded by a kernel into scratch; the default) or in-gemm (cuBLASLt rounds the "
                  "fp32 operands itself, CUBLAS_COMPUTE_32F_FAST_16BF)");
  cmd->add_flag("--gelu-epilogue", args->gelu_epilogue,
                "With --backend cuda: the MLP's GELU (and its gradient) in cuBLASLt's GEMM "
                "epilogues instead of element-wise kernels after the GEMMs");
  cmd->add_option("--device-cache-mib", args->device_cache_mib,
                  "With --backend cuda: freed activation blocks each GPU rank keeps for reuse, in "
                  "MiB (default: no limit; ranks sharing one GPU each keep their own, so a plan "
                  "near the GPU's memory may need a cap)");
  cmd->add_flag("--no-gpu-capture", args->no_gpu_capture,
                "With --backend cuda: NVTX ranges only, no CUPTI capture of kernels and copies");
  cmd->add_flag("--serial-pairs", args->serial_pairs,
                "With --backend cuda: run the two ops of each overlapped pair (dualpipe-v's F & B) "
                "one after the other on the rank's stream, not at once on two streams (to "
                "compare)");
  cmd->add_option("--gpu-capture-every", args->gpu_capture_every,
                  "With --backend cuda: take the captured GPU activity every N steps (and at the "
                  "last and at checkpoints), each take a CUPTI flush; the records still join the "
                  "trace under their "
                  "ops, only later. auto (the default): as rarely as keeps the takes within 1% "
                  "of the steps' time, at most every 16 steps")
      ->type_name("N|auto");
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a GPT on the embedded engine's virtual cluster (one thread per rank)");
  add_plan_options(cmd, args.get());
  add_run_options(cmd, args.get());
  add_engine_options(cmd, args.get());
  cmd->add_option("--ranks-per-process", args->ranks_per_process,
                  "Under mpirun / srun: ranks run as threads in each process (hybrid; default 1)");
  cmd->add_option("--fault", args->fault,
                  "Check failure handling: rank=R,step=S,kind=throw|hang|slow[,seconds=T] makes "
                  "rank R fail that way at step S (never in a real run)");
  cmd->add_option("--watchdog", args->watchdog,
                  "Seconds a rank may wait in one communication before the run fails")
      ->default_val(300.0);
  add_db_option(cmd, args->db);
  CLI::Option* no_db = cmd->add_flag("--no-db", args->no_db, "Do not store the run in a workspace");
  // A name with --no-db would name nothing (it was taken and ignored).
  cmd->add_option("--name", args->name, "Run name in the workspace (default: model and plan)")
      ->excludes(no_db);
  cmd->callback([args] { run(*args); });
}

}  // namespace pipetune::cli
