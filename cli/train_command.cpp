// `pipetune train`: train a GPT on the embedded engine's virtual cluster and report loss,
// throughput, and per-stage bubble and memory.
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/stdout_status.hpp"
#include "cli/train_output.hpp"
#include "cli/workspace_cli.hpp"
#include "db/chrome_trace.hpp"
#include "db/store/record_json.hpp"
#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "engine/comm/launcher.hpp"
#include "engine/comm/topology.hpp"
#ifdef PIPETUNE_HAVE_MPI
#include "engine/mpi/mpi_communicator.hpp"
#include "engine/mpi/mpi_failure_notice.hpp"
#include "engine/mpi/mpi_hybrid_communicator.hpp"
#include "engine/mpi/mpi_session.hpp"
#endif
#include "engine/errors.hpp"
#ifdef PIPETUNE_HAVE_CUDA
#include "engine/cuda/cuda_devices.hpp"
#include "engine/cuda/cuda_rank_device.hpp"
#endif
#ifdef PIPETUNE_HAVE_NCCL
#include "engine/nccl/nccl_rank_device.hpp"
#endif
#include "engine/runtime/trainer.hpp"
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
  std::optional<int> tp, pp, dp, ep, chunks, microbatches, micro_batch_size, zero;
  std::optional<std::string> schedule, vocab, recompute;
  int steps = 60;
  std::string seed = "1234";  // parsed strictly: CLI11 saturates numbers past 2^64
  float lr = 3e-3f;
  std::string data;
  std::string checkpoint;
  int checkpoint_every = 0;
  std::string resume;
  bool json = false;
  bool sequence_parallel = false, no_sequence_parallel = false;
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

// `--backend cuda` (or `backend = "cuda"` in the run file): the run's ranks as streams of GPU 0
// (engine/cuda/cuda_rank_device.hpp), with bf16 GEMM inputs when `bf16` (fp32 accumulation and
// master weights), or refused with the reason before anything runs or is written.
#ifdef PIPETUNE_HAVE_CUDA
// The CUDA backend's flash kernels for an attention choice (stored runs no flash kernel).
cuda::FlashVariant flash_variant(spec::EngineAttention attention) {
  switch (attention) {
    case spec::EngineAttention::flash_tc:
      return cuda::FlashVariant::tensor_cores;
    case spec::EngineAttention::flash_mma:
      return cuda::FlashVariant::tensor_core_registers;
    default:
      return cuda::FlashVariant::tiles;
  }
}

cuda::Bf16Operands bf16_operands(const std::optional<std::string>& gemm_inputs) {
  return gemm_inputs == "in-gemm" ? cuda::Bf16Operands::in_gemm : cuda::Bf16Operands::copies;
}
#endif

void use_cuda_backend([[maybe_unused]] runtime::TrainOptions& o, [[maybe_unused]] bool bf16,
                      [[maybe_unused]] spec::EngineAttention attention,
                      [[maybe_unused]] const TrainArgs& a) {
#ifndef PIPETUNE_HAVE_CUDA
  throw InputError(
      "backend cuda: this pipetune was built without the CUDA toolkit (nvcc not found at "
      "configure time); use the cpu backend");
#else
  const cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty())
    throw InputError("backend cuda: no CUDA device is usable (" + q.problem + ")");
  const cuda::DeviceInfo& gpu = q.devices.front();
  o.rank_device = cuda::single_gpu_rank_devices(
      {.device = gpu.id,
       .precision = bf16 ? cuda::Precision::bf16 : cuda::Precision::fp32,
       .flash = flash_variant(attention),
       .bf16_operands = bf16_operands(a.gemm_inputs),
       .gelu_epilogues = a.gelu_epilogue});
  // Every rank's state lives on this one device: a model that cannot fit is refused up front.
  o.device_memory = runtime::TrainOptions::DeviceMemory{
      "GPU " + std::to_string(gpu.id) + " (" + gpu.name + ")", gpu.total_bytes};
#endif
}

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

TrainSetup build_options(const TrainArgs& a) {
  spec::RunSpec run =
      spec::load_run(a.config.empty() ? kDefaultRun : a.config, spec::RunCheck::KeysOnly);
  TrainSetup setup;
  setup.cluster = run.cluster;
  runtime::TrainOptions& o = setup.options;
  o.model = a.model.empty() ? run.model : spec::load_model(a.model);
  o.plan = run.plan;
  // Counts given on the command line are at least 1: never silently replaced by a default.
  for (const auto& [value, flag] :
       {std::pair{a.tp, "--tp"}, std::pair{a.pp, "--pp"}, std::pair{a.dp, "--dp"},
        std::pair{a.ep, "--ep"}, std::pair{a.chunks, "--chunks"},
        std::pair{a.microbatches, "--microbatches"},
        std::pair{a.micro_batch_size, "--micro-batch-size"}})
    if (value && *value < 1)
      throw InputError(std::string(flag) + " must be at least 1, not " + std::to_string(*value));
  if (a.tp) o.plan.tp = *a.tp;
  if (a.pp) o.plan.pp = *a.pp;
  if (a.dp) o.plan.dp = *a.dp;
  if (a.ep) o.plan.ep = *a.ep;
  if (a.chunks) o.plan.chunks = *a.chunks;
  if (a.microbatches) o.plan.microbatches = *a.microbatches;
  if (a.micro_batch_size) o.plan.micro_batch_size = *a.micro_batch_size;
  if (a.zero) o.plan.zero_stage = *a.zero;
  if (a.schedule) o.plan.schedule = *a.schedule;
  // Another schedule without --chunks: that schedule's default, not the run file's chunks.
  if (a.schedule && !a.chunks) o.plan.chunks = 0;
  if (a.vocab) o.plan.vocab = schedule::parse_vocab_mode(*a.vocab);
  if (a.recompute) o.plan.recompute = spec::parse_recompute(*a.recompute);
  if (a.sequence_parallel) o.plan.sequence_parallel = true;
  if (a.no_sequence_parallel) o.plan.sequence_parallel = false;
  // Flags may change the world size: the global batch follows the plan, unless the run file
  // states it (then the plan's validation refuses flags that give another batch, as predict does).
  if ((a.tp || a.pp || a.dp || a.microbatches || a.micro_batch_size) && !run.global_batch_given)
    o.plan.global_batch = 0;
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
    if (o.fault->rank >= o.plan.tp * o.plan.pp * o.plan.dp)
      throw InputError("--fault: rank " + std::to_string(o.fault->rank) + " is not a rank of the " +
                       std::to_string(o.plan.tp * o.plan.pp * o.plan.dp) + "-rank plan");
    if (o.fault->step > a.steps)  // a resumed run's own steps: check_train_options
      throw InputError("--fault: step " + std::to_string(o.fault->step) +
                       " is beyond the run's --steps " + std::to_string(a.steps));
  }
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
  // Checked before the device is: a bad value is the input's error wherever the run would go.
  if (a.gpu_capture_every) {
    o.gpu_capture_every = parse_capture_every(*a.gpu_capture_every);
    if (backend != spec::EngineBackend::cuda)
      throw InputError(
          "--gpu-capture-every is for --backend cuda (the cpu backend captures no GPU)");
    if (a.no_gpu_capture)
      throw InputError(
          "--gpu-capture-every and --no-gpu-capture: choose one (capture off takes nothing)");
  }
  if (backend == spec::EngineBackend::cuda)
    use_cuda_backend(o, precision == spec::EnginePrecision::bf16, attention, a);
  if (a.no_gpu_capture && backend != spec::EngineBackend::cuda)
    throw InputError("--no-gpu-capture is for --backend cuda (the cpu backend captures no GPU)");
  o.capture_gpu_activity = !a.no_gpu_capture;
  if (a.device_cache_mib) {
    constexpr long long kMaxMib = 1LL << 24;  // 16 TiB: past any device
    if (*a.device_cache_mib < 0 || *a.device_cache_mib > kMaxMib)
      throw InputError("--device-cache-mib must be 0 to " + std::to_string(kMaxMib) + ", not " +
                       std::to_string(*a.device_cache_mib));
    if (backend != spec::EngineBackend::cuda)
      throw InputError("--device-cache-mib is for --backend cuda (it caps a GPU rank's cache)");
    o.device_buffer_cache_bytes = static_cast<std::size_t>(*a.device_cache_mib) << 20;
  }
  o.attention = attention == spec::EngineAttention::stored ? tensor::AttentionKernel::stored
                                                           : tensor::AttentionKernel::flash;
  return setup;
}

// The workspace run of a training run, with the options' trace sink streaming into it; null
// with --no-db.
std::unique_ptr<db::RunWriter> open_run_writer(const TrainArgs& a, const db::TrainingEngine& engine,
                                               runtime::TrainOptions& o) {
  if (a.no_db) return nullptr;
  const std::string name = a.name.empty() ? db::training_run_name(o.model, o.plan) : a.name;
  db::WriterOptions options;
  options.check_integrity = true;  // a corrupt workspace fails before training, not after
  auto writer = std::make_unique<db::RunWriter>(
      a.db,
      db::RunInfo{profiler::TraceKind::Measured, name,
                  db::training_plan_json(o.model, o.plan, o.steps, o.seed, engine).dump(),
                  db::training_specs_json(o.model).dump()},
      options);
  db::RunWriter* w = writer.get();
  o.trace_sink = [w](profiler::Trace part) { w->append(std::move(part)); };
  o.kernel_sink = [w](std::vector<profiler::KernelRecord> k) { w->append_kernels(std::move(k)); };
  return writer;
}

// Trains, finishing the workspace run (if any) as complete with its summary, or as failed.
// Each step is reported (on_step) only once rank 0's records of it are committed, so a run killed
// right after printing a step still has it in the workspace.
runtime::TrainResult train_into(runtime::TrainOptions o, db::RunWriter* writer) {
  if (writer != nullptr && o.on_step)
    o.on_step = [report = o.on_step, writer](const runtime::StepResult& s) {
      writer->flush();
      report(s);
    };
  runtime::TrainResult r;
  try {
    r = runtime::train(o);
  } catch (...) {
    if (writer) {
      try {
        writer->finish(db::RunStatus::Failed);
      } catch (...) {  // the training error is the one to report
      }
    }
    throw;
  }
  if (writer) {
    writer->set_summary_json(train_summary_json(r));
    writer->finish(db::RunStatus::Complete);
  }
  return r;
}

// Prints the run's report and where it went (rank 0's process under MPI).
void report_run(const TrainArgs& a, const runtime::TrainOptions& o, const runtime::TrainResult& r,
                const db::RunWriter* writer) {
  if (writer)
    note_kept("the run was stored as run " + std::to_string(writer->run_id()) + " in " + a.db);
  if (a.json) {
    print_train_json(o, r, writer ? writer->run_id() : -1,
                     {a.precision.value_or("fp32"), a.attention.value_or(""),
                      a.gemm_inputs.value_or(""), a.gelu_epilogue});
    return;
  }
  print_train_summary(r);
  if (!a.checkpoint.empty()) std::printf("checkpoint written to %s\n", a.checkpoint.c_str());
  if (!a.trace.empty()) std::printf("trace written to %s\n", a.trace.c_str());
  if (writer)
    std::printf("stored as run %lld in %s\n", static_cast<long long>(writer->run_id()),
                a.db.c_str());
}

void print_header(const runtime::TrainOptions& o, const char* ranks) {
  const spec::ParallelPlan& p = o.plan;
  std::string recompute = p.recompute == spec::Recompute::None
                              ? std::string()
                              : ", recompute " + std::string(spec::recompute_name(p.recompute));
  if (p.sequence_parallel && p.tp > 1) recompute += ", sequence parallel";
  std::printf("training %s on %d %s (tp=%d pp=%d dp=%d ep=%d), schedule %s, vocab %s%s, %d steps\n",
              o.model.name.c_str(), p.tp * p.pp * p.dp, ranks, p.tp, p.pp, p.dp, p.ep,
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

#ifdef PIPETUNE_HAVE_MPI
// How long a failed process waits for rank 0's process to record its failure and end the job.
constexpr int kRootGraceSeconds = 10;

// Ends every process of the job after this process failed: exit 2 for input errors, 1 otherwise.
// Another process than rank 0's first tells rank 0's (`notice`, when it has one), which stores
// its run as failed and ends the job when it next waits; if it never comes to a wait, this
// process ends the job after the grace period and the run is left interrupted.
[[noreturn]] void end_job(const mpi::MpiSession& session, mpi::MpiFailureNotice* notice,
                          const char* what, int code) {
  if (code == 2)
    std::fprintf(stderr, "pipetune: error: %s\n", what);
  else
    std::fprintf(stderr, "pipetune: failed in process %d: %s\n", session.rank(), what);
  std::fflush(stderr);
  if (code != 2 && session.rank() != 0 && notice != nullptr && notice->tell_root(what, 5.0))
    std::this_thread::sleep_for(std::chrono::seconds(kRootGraceSeconds));
  session.abort(code);
}

// Ranks as processes over MPI, one or K (hybrid) per process: rank 0's process prints; any
// failure ends every process (an MPI job whose process returns while the others wait would
// hang), with exit 2 for input errors and 1 otherwise.
void train_as_processes(runtime::TrainOptions o, const TrainArgs& a,
                        const db::TrainingEngine& engine, int ranks_per_process) {
  mpi::MpiSession session(nullptr, nullptr);
  const bool root = session.rank() == 0;
  // Made first, in every process (a collective); outside the try, so that a process failing
  // anywhere in it can tell rank 0's process (end_job).
  std::optional<mpi::MpiFailureNotice> failures;
  try {
    failures.emplace();
    const comm::Topology topology(o.plan.tp, o.plan.pp, o.plan.dp, o.plan.ep);
    const std::vector<comm::ProcessGroup> groups = comm::every_group(topology);
    // One rank per process: MPI's own collectives over a communicator per group. Several: a
    // router of this process's rank threads (mpi_rank_router.hpp), since a process is one
    // member of an MPI communicator.
#ifdef PIPETUNE_HAVE_NCCL
    if (o.rank_device) {  // --backend cuda: each process's rank on its own GPU, over NCCL
      o.rank_device = nccl::nccl_rank_devices(
          {groups, a.precision == "bf16" ? cuda::Precision::bf16 : cuda::Precision::fp32,
           o.watchdog_seconds,
           flash_variant(spec::parse_engine_attention(a.attention.value_or("flash"))),
           bf16_operands(a.gemm_inputs), a.gelu_epilogue, &*failures});
      if (o.device_memory) o.device_memory->name = "each process's GPU";
    }
#endif
    std::optional<mpi::MpiCommunicator> single;
    std::optional<mpi::MpiRankRouter> router;
    std::vector<std::unique_ptr<mpi::MpiHybridCommunicator>> hybrid;
    runtime::TrainOptions::Processes processes;
    if (ranks_per_process == 1) {
      single.emplace(groups, o.watchdog_seconds);
      single->watch_failures(&*failures);
      processes.ranks = {&*single};
      processes.gather_to_root = [&single](comm::Communicator&, const std::string& bytes) {
        return single->gather_bytes(bytes, 0);
      };
    } else {
      router.emplace(ranks_per_process, o.watchdog_seconds);
      router->watch_failures(&*failures);
      for (int k = 0; k < ranks_per_process; ++k) {
        hybrid.push_back(std::make_unique<mpi::MpiHybridCommunicator>(
            *router, router->first_rank() + k, groups));
        processes.ranks.push_back(hybrid.back().get());
      }
      processes.gather_to_root = [](comm::Communicator& c, const std::string& bytes) {
        return static_cast<mpi::MpiHybridCommunicator&>(c).gather_bytes(bytes, 0);
      };
      processes.on_rank_failure = [&router](int rank, const std::string& reason) {
        router->fail(rank, reason);
      };
    }
    o.processes = std::move(processes);
    o.record_trace = false;  // --trace: written from the workspace run, which has every rank's
    std::unique_ptr<db::RunWriter> writer;
    if (root) {
      writer = open_run_writer(a, engine, o);
    } else {
      o.on_step = nullptr;
      // Every process streams (a collective per step); only rank 0's sink receives the parts.
      if (!a.no_db) o.trace_sink = [](profiler::Trace) {};
    }
    if (root && !a.json)
      print_header(o, ranks_per_process == 1
                          ? "processes"
                          : ("ranks: " + std::to_string(session.size()) + " processes x " +
                             std::to_string(ranks_per_process) + " threads")
                                .c_str());
    // A failed run ends the job here, before this scope's communicators are destroyed: their
    // destructors would wait (up to the watchdog) for sends no process will take now.
    runtime::TrainResult r;
    try {
      r = train_into(o, writer.get());
    } catch (const InputError& e) {
      end_job(session, nullptr, e.what(), 2);
    } catch (const std::exception& e) {
      end_job(session, &*failures, e.what(), 1);
    }
    if (!root) return;
    if (!a.trace.empty()) {  // every process's spans, as the workspace run holds them
      db::Workspace ws(a.db);
      db::write_chrome_trace_file(ws.load(writer->run_id()).trace, a.trace);
    }
    report_run(a, o, r, writer.get());
  } catch (const InputError& e) {
    end_job(session, nullptr, e.what(), 2);
  } catch (const std::exception& e) {
    end_job(session, failures ? &*failures : nullptr, e.what(), 1);
  }
}
#endif

void run(const TrainArgs& given) {
  TrainSetup setup = build_options(given);
  TrainArgs a = given;  // with the precision in effect (the flag's, else the run file's)
  a.precision = std::string(spec::engine_precision_name(setup.precision));
  a.attention = std::string(spec::engine_attention_name(setup.attention));
  runtime::TrainOptions& o = setup.options;
  runtime::check_train_options(o);  // the engine's own rules first, with its messages
  // Under mpirun / srun: one rank (or --ranks-per-process K) per process, or a refusal in every
  // process before anything is written (never every process training the whole run into one
  // workspace).
  const int processes = std::max(1, comm::launcher_world_size());
  const int world = o.plan.tp * o.plan.pp * o.plan.dp;
  const int per_process = a.ranks_per_process.value_or(processes > 1 ? 1 : world);
  if (per_process < 1)
    throw InputError("--ranks-per-process must be at least 1, not " + std::to_string(per_process));
  if (processes > 1 || per_process != world) {
    if (static_cast<long long>(processes) * per_process != world)
      throw InputError(
          processes > 1
              ? "started by an MPI launcher with " + std::to_string(processes) +
                    " processes, but the plan has tp*pp*dp = " + std::to_string(world) +
                    " ranks (" + std::to_string(per_process) +
                    " per process; --ranks-per-process runs several)"
              : "--ranks-per-process " + std::to_string(per_process) +
                    " runs ranks as threads of processes started by mpirun or srun (the plan's " +
                    std::to_string(world) + " ranks need " +
                    (world % per_process == 0 ? std::to_string(world / per_process) + " processes"
                                              : "a divisor of " + std::to_string(world)) +
                    "); this is one process");
    if (o.rank_device) {
#ifndef PIPETUNE_HAVE_NCCL
      throw InputError(
          "backend cuda with ranks as processes needs NCCL, and this pipetune was built without "
          "it (nccl.h / libnccl and MPI at configure time): run it without mpirun / srun for "
          "every rank as a stream of one GPU");
#endif
      if (per_process != 1)
        throw InputError(
            "backend cuda with ranks as processes runs one rank per process, each on its own "
            "GPU (NCCL refuses two ranks of a communicator on one device): drop "
            "--ranks-per-process");
    }
#ifndef PIPETUNE_HAVE_MPI
    throw InputError(
        "started by an MPI launcher, but this pipetune was built without MPI "
        "(configure with -DPIPETUNE_MPI=ON), so its ranks can only be threads: run "
        "it without mpirun / srun");
#else
    if (!a.trace.empty() && a.no_db)
      throw InputError(
          "--trace with ranks as processes is written from the workspace run: drop --no-db");
#endif
  }
  // The schedule `simulate --config` and `predict` simulate for this plan: planned with the op
  // costs of the run's hardware, so the measured and the predicted run execute the same ops.
  spec::apply_defaults(o.plan);
  o.schedule = tuner::planned_schedule(
                   o.model, tuner::cluster_for_plan(setup.cluster, o.plan), o.plan,
                   tuner::engine_execution(setup.backend, setup.precision, setup.attention))
                   .schedule;
  if (!a.trace.empty()) check_output_file(a.trace, a.force, a.no_db ? "" : a.db);
  // The run goes into the workspace as it trains: a crash leaves it there, interrupted.
  // (Processes: rank 0's process opens it, once MPI says which process that is.)
  // The engine the workspace records, on `gpus` GPUs when it runs on cuda.
  const auto engine_record = [&](int gpus) {
    return db::TrainingEngine{.backend = setup.backend,
                              .precision = setup.precision,
                              .gpus = setup.backend == spec::EngineBackend::cuda ? gpus : 0,
                              .attention = setup.attention,
                              .gemm_inputs_in_gemm = a.gemm_inputs == "in-gemm",
                              .gelu_epilogue = a.gelu_epilogue};
  };
  std::unique_ptr<db::RunWriter> writer;
  // With cuda in one process, every rank is a stream of GPU 0.
  if (processes <= 1) writer = open_run_writer(a, engine_record(1), o);
  if (!a.json) {
    if (processes <= 1)
      print_header(o, !o.rank_device          ? "ranks"  // processes: rank 0's, once MPI is up
                      : a.precision == "bf16" ? "ranks as streams of one GPU (bf16 GEMMs)"
                                              : "ranks as streams of one GPU");
    o.on_step = [](const runtime::StepResult& s) {
      if (std::ferror(stdout)) return;  // stdout failed: the run goes on without its lines
      std::printf("step %4d  loss %.4f", s.step, s.loss);
      if (s.aux_loss != 0.0) std::printf("  aux %.4f", s.aux_loss);
      std::printf("  norm %7.3f  %8.1f ms  %9.0f tok/s\n", s.grad_norm, s.seconds * 1e3,
                  s.tokens_per_s);
      flush_stdout();
    };
  }
#ifdef PIPETUNE_HAVE_MPI
  if (processes > 1) {
    // With cuda under a launcher: one GPU a process.
    train_as_processes(o, a, engine_record(processes), per_process);
    return;
  }
#endif
  const runtime::TrainResult r = train_into(o, writer.get());
  if (!a.trace.empty()) db::write_chrome_trace_file(r.trace, a.trace);
  report_run(a, o, r, writer.get());
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a GPT on the embedded engine's virtual cluster (one thread per rank)");
  cmd->add_option("--config", args->config,
                  std::string("Run preset or run TOML file (default: ") + kDefaultRun + ")");
  cmd->add_option("--model", args->model, "Model preset or TOML file (replaces the run's model)");
  cmd->add_option("--tp", args->tp, "Tensor-parallel degree");
  cmd->add_option("--pp", args->pp, "Pipeline stages");
  cmd->add_option("--dp", args->dp, "Data-parallel degree");
  cmd->add_option("--ep", args->ep, "Expert-parallel degree (divides dp)");
  cmd->add_option("--schedule", args->schedule, "Pipeline schedule");
  cmd->add_option("--chunks", args->chunks, "Layer groups per pipeline rank");
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
  cmd->add_option("--microbatches", args->microbatches, "Micro-batches per step");
  cmd->add_option("--micro-batch-size", args->micro_batch_size, "Sequences per micro-batch");
  cmd->add_option("--zero", args->zero,
                  "ZeRO stage: 0, 1 (optimizer state sharded over DP), 2 (and gradients) or 3 (and "
                  "parameters)");
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
  cmd->add_option("--gpu-capture-every", args->gpu_capture_every,
                  "With --backend cuda: take the captured GPU activity every N steps (and at the "
                  "last and at checkpoints), each take a CUPTI flush; the records still join the "
                  "trace under their "
                  "ops, only later. auto (the default): as rarely as keeps the takes within 1% "
                  "of the steps' time, at most every 16 steps")
      ->type_name("N|auto");
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
