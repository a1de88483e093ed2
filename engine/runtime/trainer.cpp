#include "engine/runtime/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>
#include <vector>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/comm/thread_cluster.hpp"
#include "engine/comm/topology.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/data/synthetic_corpus.hpp"
#include "engine/errors.hpp"
#include "engine/model/buffer_cache.hpp"
#include "engine/model/model_config.hpp"
#include "engine/runtime/capture_cadence.hpp"
#include "engine/runtime/optimizer.hpp"
#include "engine/runtime/rank_threads.hpp"
#include "engine/runtime/rank_training.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/validate.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "profiler/recorder/merge_recorders.hpp"
#include "profiler/recorder/rank_recorder.hpp"

namespace pipetune::runtime {

namespace {

using checkpoint::CheckpointManifest;
using checkpoint::NamedBuffer;
using checkpoint::RankCheckpoint;
using checkpoint::read_checkpoint_manifest;
using checkpoint::read_rank_checkpoint;
using checkpoint::write_checkpoint;
using Clock = std::chrono::steady_clock;

// The embedded engine's own limits, on top of spec::validate(model, plan) (which holds the rules
// every consumer of a plan shares): every layer group holds at least one layer, micro-batch and
// layer-group counts fit the span fields, and the vocabulary has a row for every shard.
void check_engine_limits(const model::ModelConfig& c, const spec::ParallelPlan& p,
                         const schedule::Schedule& sched, const std::vector<int>& split) {
  const int groups = sched.groups();
  for (int s : split)
    if (s < 1)
      throw InputError({"plan.layer_split"},
                       "layer_split entries must be at least 1 for the engine (an empty layer "
                       "group has nothing to run)");
  if (static_cast<int>(split.size()) != groups)
    throw InputError({"plan.layer_split", "plan.pp", "plan.chunks"},
                     "layer_split has " + std::to_string(static_cast<std::int64_t>(split.size())) +
                         " entries, the schedule has " + std::to_string(groups) + " layer groups");
  if (p.microbatches > 65535)
    throw InputError({"plan.microbatches"},
                     "microbatches=" + std::to_string(p.microbatches) + " is over 65535");
  if (groups > 2047) throw InputError({"plan.pp", "plan.chunks"}, "more than 2047 layer groups");
  // Without vocabulary parallelism the tables are split over the tp of the stages holding the
  // first and the last layer group (per-stage layouts: each its own).
  const int shards = p.vocab != schedule::VocabMode::None
                         ? p.tp * p.pp
                         : std::max(spec::tp_of_stage(p, sched.rank_of_group(0)),
                                    spec::tp_of_stage(p, sched.rank_of_group(groups - 1)));
  if (c.vocab < shards) {
    std::vector<std::string> fields{"model.vocab", "plan.tp"};
    if (!p.stage_tp.empty()) fields.emplace_back("plan.stage_tp");
    if (p.vocab != schedule::VocabMode::None)
      fields.insert(fields.end(), {"plan.pp", "plan.vocab"});
    throw InputError(fields, "vocab=" + std::to_string(c.vocab) + " is smaller than its " +
                                 std::to_string(shards) + " shards");
  }
}

}  // namespace

std::string describe_plan(const spec::ParallelPlan& p) {
  std::ostringstream s;
  s << "tp=" << p.tp << " pp=" << p.pp << " dp=" << p.dp << " ep=" << p.ep
    << " schedule=" << p.schedule << " chunks=" << p.chunks
    << " vocab=" << schedule::vocab_mode_name(p.vocab) << " microbatches=" << p.microbatches
    << " micro_batch_size=" << p.micro_batch_size << " zero=" << p.zero_stage << " split=";
  for (std::size_t i = 0; i < p.layer_split.size(); ++i) s << (i ? "," : "") << p.layer_split[i];
  // Only when given, so that checkpoints of plans without it keep their description.
  if (!p.stage_tp.empty()) s << " stage_tp=" << spec::stage_tp_text(p.stage_tp, ',');
  return s.str();
}

namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / static_cast<double>(1 << 30));
  return text;
}

// The state every rank keeps whatever the schedule (fp32 weights, gradients and Adam's two
// moments: 16 bytes per parameter, each replica holding its share; ZeRO-1 shards the moments,
// ZeRO-2 the gradients and ZeRO-3 the weights over DP) against this machine's memory, before
// anything is allocated: a model too large fails here with the numbers, not with std::bad_alloc or
// the kernel's OOM killer halfway through start-up.
void check_memory_fits(const TrainOptions& options, const spec::ParallelPlan& plan) {
  spec::ModelSpec model = options.model;
  spec::apply_defaults(model);
  const double parameters = static_cast<double>(spec::total_parameters(model));
  const double dp = plan.dp;
  const double weight_copies = plan.zero_stage >= 3 ? 1.0 : dp;
  const double gradient_copies = plan.zero_stage >= 2 ? 1.0 : dp;
  const double moment_copies = plan.zero_stage >= 1 ? 1.0 : dp;
  // Ranks as processes: this process holds its share of the ranks.
  const double share = options.processes ? static_cast<double>(options.processes->ranks.size()) /
                                               std::max(1, plan.world_size())
                                         : 1.0;
  const double needed =
      (4.0 * weight_copies + 4.0 * gradient_copies + 8.0 * moment_copies) * parameters * share;
  const std::string why = " for weights, gradients and Adam state (4 + 4 + 8 bytes x " +
                          std::to_string(static_cast<long long>(parameters)) +
                          " parameters, over dp=" + std::to_string(plan.dp) +
                          " replicas with zero_stage=" + std::to_string(plan.zero_stage) + ")";
  if (options.device_memory) {
    // The ranks' state lives on the device; the host holds staging buffers only.
    const double device = static_cast<double>(options.device_memory->bytes);
    if (needed > device)
      throw InputError({"plan.zero_stage", "plan.dp"},
                       "training " + model.name + " needs at least " + gib(needed) +
                           " of device memory" + why + ", more than " +
                           options.device_memory->name + " has (" + gib(device) + ")");
    return;
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return;  // unknown: nothing to compare with
  const double physical = static_cast<double>(pages) * static_cast<double>(page);
  if (needed > physical)
    throw InputError({"plan.zero_stage", "plan.dp"},
                     "training " + model.name + " needs at least " + gib(needed) + why +
                         ", more than this machine's " + gib(physical));
}

// The optimizer's and the run's numbers: a non-finite one (an inf learning rate, a nan clip)
// would train nan weights and store them as a complete run.
void check_training_numbers(const TrainOptions& o) {
  const auto require = [](bool ok, const char* what, double value, const char* rule) {
    if (ok) return;
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", value);
    throw InputError(std::string(what) + " must be " + rule + ", not " + shown);
  };
  const tensor::AdamWConfig& a = o.adamw;
  require(std::isfinite(a.lr) && a.lr >= 0.0f, "the learning rate", a.lr, "a finite number >= 0");
  require(a.beta1 >= 0.0f && a.beta1 < 1.0f, "AdamW's beta1", a.beta1, "in [0, 1)");
  require(a.beta2 >= 0.0f && a.beta2 < 1.0f, "AdamW's beta2", a.beta2, "in [0, 1)");
  require(std::isfinite(a.eps) && a.eps > 0.0f, "AdamW's epsilon", a.eps, "a finite number > 0");
  require(std::isfinite(a.weight_decay) && a.weight_decay >= 0.0f, "the weight decay",
          a.weight_decay, "a finite number >= 0");
  require(std::isfinite(o.grad_clip), "the gradient clipping norm", o.grad_clip,
          "a finite number (<= 0: no clipping)");
  require(std::isfinite(o.capacity_factor), "the expert capacity factor", o.capacity_factor,
          "a finite number (<= 0: no token dropping)");
  require(std::isfinite(o.aux_loss_coef) && o.aux_loss_coef >= 0.0f,
          "the load-balancing loss weight", o.aux_loss_coef, "a finite number >= 0");
  require(std::isfinite(o.watchdog_seconds) && o.watchdog_seconds > 0.0,
          "the communication watchdog", o.watchdog_seconds, "a finite number of seconds > 0");
  if (o.checkpoint_every < 0)
    throw InputError("checkpoint_every must be >= 0, not " + std::to_string(o.checkpoint_every));
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    throw InputError("checkpoints every " + std::to_string(o.checkpoint_every) +
                     " steps need a checkpoint directory to be written to");
}

// An injected fault fires before a step this run trains (resumed runs: after the checkpoint's),
// on one of its ranks; any other never fires, and the check it was for would pass unseen.
void check_injected_fault(const TrainOptions& o, const spec::ParallelPlan& plan,
                          std::int64_t resumed_step) {
  if (!o.fault) return;
  const InjectedFault& f = *o.fault;
  if (f.rank < 0 || f.rank >= plan.world_size())
    throw InputError({"fault", "plan.tp", "plan.pp", "plan.dp"}, "injected fault",
                     "rank " + std::to_string(f.rank) + " is not a rank of the " +
                         std::to_string(plan.world_size()) + "-rank plan");
  if (f.step <= resumed_step || f.step > o.steps)
    throw InputError({"fault", "steps"}, "injected fault",
                     "step " + std::to_string(f.step) + " is not a step this run trains (" +
                         std::to_string(resumed_step + 1) + " to " + std::to_string(o.steps) + ")");
}

// A plan the engine cannot carry out is refused, never trained without: a sequence-parallel
// split of a micro-batch's rows over tp, the memory it needs, more ranks than the engine runs.
void check_plan_can_run(const TrainOptions& options, const spec::ParallelPlan& plan) {
  if (plan.sequence_parallel && plan.tp > 1 &&
      (plan.micro_batch_size * options.model.seq_len) % plan.tp != 0)
    throw InputError({"plan.sequence_parallel", "plan.micro_batch_size", "plan.tp"},
                     "sequence_parallel=true splits a micro-batch's micro_batch_size x seq_len = " +
                         std::to_string(plan.micro_batch_size * options.model.seq_len) +
                         " rows over tp=" + std::to_string(plan.tp) +
                         ", which does not divide them");
  check_memory_fits(options, plan);
  if (plan.world_size() > kMaxTrainRanks)
    throw InputError({"plan.tp", "plan.pp", "plan.dp"},
                     "world = tp*pp*dp = " + std::to_string(plan.world_size()) +
                         " ranks is more than the " + std::to_string(kMaxTrainRanks) +
                         " rank threads the embedded engine runs");
}

// The manifest of the checkpoint options.resume_dir names, which this run must continue: the
// same model, plan, world and seed, at a step before the run's last.
CheckpointManifest resume_manifest(const TrainOptions& options, const model::ModelConfig& config,
                                   const spec::ParallelPlan& run_plan) {
  CheckpointManifest m = read_checkpoint_manifest(options.resume_dir);
  const std::string who = "checkpoint '" + options.resume_dir + "'";
  const std::string plan = describe_plan(run_plan);
  if (m.model != config.name)
    throw InputError(who + " is of model '" + m.model + "', not '" + config.name + "'");
  if (m.plan != plan)
    throw InputError(who + " was written by plan [" + m.plan + "], this run is [" + plan + "]");
  if (m.world != run_plan.world_size())
    throw InputError(who + " has " + std::to_string(m.world) + " ranks, the plan " +
                     std::to_string(run_plan.world_size()));
  if (m.seed != options.seed)
    throw InputError(who + " was written with seed " + std::to_string(m.seed) + ", not " +
                     std::to_string(options.seed));
  if (m.step >= options.steps)
    throw InputError({"steps"}, who + " is at step " + std::to_string(m.step) + ", so a run of " +
                                    std::to_string(options.steps) +
                                    " steps leaves nothing to train");
  return m;
}

// A destination that cannot take a checkpoint fails here, before the first step, not when the
// first checkpoint is due (rank 0's process writes it).
void check_checkpoint_dir(const TrainOptions& options) {
  const bool writes_checkpoints =
      !options.processes ||
      std::any_of(options.processes->ranks.begin(), options.processes->ranks.end(),
                  [](const comm::Communicator* c) { return c != nullptr && c->rank() == 0; });
  if (!options.checkpoint_dir.empty() && writes_checkpoints) {
    try {
      checkpoint::check_checkpoint_destination(options.checkpoint_dir);
    } catch (const std::runtime_error& e) {
      throw InputError(e.what());
    }
  }
}

// Token slices: each cuts whole tokens of the sequence, and under sequence parallelism its
// micro_batch_size x tokens rows split evenly over tp, as a whole micro-batch's must.
void check_token_slices(const schedule::Schedule& s, const spec::ParallelPlan& plan,
                        std::int64_t seq) {
  if (s.slices <= 1) return;
  const std::vector<std::int64_t> tokens = schedule::slice_token_counts(s, seq);
  if (!plan.sequence_parallel || plan.tp <= 1) return;
  for (std::size_t j = 0; j < tokens.size(); ++j)
    if ((plan.micro_batch_size * tokens[j]) % plan.tp != 0)
      throw InputError({"plan.slices", "plan.sequence_parallel", "plan.tp"},
                       "sequence_parallel=true splits token slice " + std::to_string(j) + "'s " +
                           std::to_string(plan.micro_batch_size) + " x " +
                           std::to_string(tokens[j]) + " rows over tp=" + std::to_string(plan.tp) +
                           ", which does not divide them");
}

PreparedRun prepare(const TrainOptions& options) {
  check_training_numbers(options);
  if (const std::string problem =
          CaptureCadence::problem(options.gpu_capture_every, options.gpu_capture_budget);
      !problem.empty())
    throw InputError(problem);
  PreparedRun p;
  p.config = model::engine_model_config(options.model);
  p.config.capacity_factor = options.capacity_factor;
  p.config.aux_loss_coef = options.aux_loss_coef;
  p.plan = options.plan;
  spec::apply_defaults(p.plan);
  p.config.recompute = p.plan.recompute;  // each rank's RankRuntime applies its stage's own
  p.config.moe_chunks = p.plan.moe_chunks;
  p.config.expert_layouts = p.plan.expert_layouts;
  {
    spec::ModelSpec model = options.model;
    spec::apply_defaults(model);
    spec::validate(model, p.plan);
  }
  if (options.steps < 1)
    throw InputError("steps must be at least 1 (got " + std::to_string(options.steps) + ")");
  check_plan_can_run(options, p.plan);
  // The schedule the caller planned (with the cost model of the run's hardware, as simulate and
  // predict do), or the plan's generator with unit costs.
  if (options.schedule) {
    spec::check_schedule_matches(*options.schedule, p.plan);
    schedule::validate(*options.schedule);
    p.sched = *options.schedule;
  } else {
    p.sched = spec::plan_schedule(p.plan);
  }
  check_token_slices(p.sched, p.plan, p.config.seq_len);
  p.split = p.plan.layer_split.empty() ? spec::even_layer_split(p.config.layers, p.sched.groups())
                                       : p.plan.layer_split;
  check_engine_limits(p.config, p.plan, p.sched, p.split);
  p.plan.layer_split = p.split;
  if (!options.data_shards.empty())  // opened once here so a bad shard fails before any thread
    (void)data::make_shard_loader(options.data_shards, p.config.vocab,
                                  {p.plan.micro_batch_size, p.config.seq_len, 0, p.plan.dp});
  if (!options.resume_dir.empty()) p.resume = resume_manifest(options, p.config, p.plan);
  check_injected_fault(options, p.plan, p.resume ? static_cast<std::int64_t>(p.resume->step) : 0);
  check_checkpoint_dir(options);
  return p;
}

// The last step's pipeline iteration (first op start to last op end over all ranks) and each
// rank's compute and bubble in it.
void summarise_last_iteration(const std::vector<StepTiming>& last_timing, TrainResult& result) {
  std::int64_t begin = std::numeric_limits<std::int64_t>::max(), end = 0;
  for (const StepTiming& t : last_timing) {
    begin = std::min(begin, t.first_start_ns);
    end = std::max(end, t.last_end_ns);
  }
  const std::int64_t iteration = std::max<std::int64_t>(0, end - begin);
  result.iteration_seconds = static_cast<double>(iteration) * 1e-9;
  for (std::size_t r = 0; r < last_timing.size(); ++r) {
    RankSummary& k = result.ranks[r];
    const StepTiming& t = last_timing[r];
    k.compute_seconds = static_cast<double>(t.compute_ns) * 1e-9;
    k.bubble_seconds = std::max(0.0, result.iteration_seconds - k.compute_seconds);
    k.bubble_ratio = iteration > 0 ? k.bubble_seconds / result.iteration_seconds : 0.0;
  }
}

// The whole run's trace from every rank's recorder, keeping the step metrics rank 0 recorded.
void merge_trace(const std::vector<std::unique_ptr<profiler::RankRecorder>>& recorders,
                 TrainResult& result) {
  std::vector<const profiler::RankRecorder*> list;
  for (const auto& r : recorders) list.push_back(r.get());
  std::vector<profiler::StepMetric> steps = std::move(result.trace.steps);
  result.trace = profiler::merge_recorders(list);
  result.trace.steps = std::move(steps);
}

// Each rank's GPU activity of the run (engine clock) as GPU lanes of the merged trace, under
// the ops that launched it; counted here unless the streamed parts already were.
void add_gpu_activity(std::vector<profiler::GpuCapture> captures, bool count, TrainResult& result) {
  for (std::size_t r = 0; r < captures.size(); ++r) {
    if (captures[r].activities.empty()) continue;
    profiler::GpuAttribution a = profiler::add_gpu_capture(
        result.trace, static_cast<std::int32_t>(r), std::move(captures[r]), 0);
    if (count) {
      TrainResult::GpuCaptureCounts& n = result.gpu_capture;
      n.activities += a.records.size();
      n.attributed += a.attributed;
      n.outside_ops += a.outside_ops;
      n.without_launch += a.without_launch;
    }
    result.kernels.insert(result.kernels.end(), std::make_move_iterator(a.records.begin()),
                          std::make_move_iterator(a.records.end()));
  }
}

}  // namespace

double steady_tokens_per_s(const TrainResult& r) {
  if (r.steps.empty()) return 0.0;
  const std::size_t from = r.steps.size() > 1 ? 1 : 0;
  double seconds = 0.0;
  for (std::size_t i = from; i < r.steps.size(); ++i) seconds += r.steps[i].seconds;
  return seconds > 0.0 ? static_cast<double>(r.tokens_per_step) *
                             static_cast<double>(r.steps.size() - from) / seconds
                       : 0.0;
}

void check_train_options(const TrainOptions& options) {
  (void)prepare(options);
}

namespace {

// What rank 0's process needs from every other process for the run's summary, as bytes.
struct RankReport {
  StepTiming timing;
  RankSummary summary;
};
static_assert(std::is_trivially_copyable_v<RankReport>);

void check_process_options(const TrainOptions& o, const spec::ParallelPlan& plan) {
  const TrainOptions::Processes& p = *o.processes;
  if (p.ranks.empty() || !p.gather_to_root)
    throw std::logic_error("train: TrainOptions::processes needs its ranks and a gather");
  for (const comm::Communicator* c : p.ranks)
    if (c == nullptr || c->world() != p.ranks.front()->world())
      throw std::logic_error("train: TrainOptions::processes ranks of different worlds");
  const int world = p.ranks.front()->world();
  if (world != plan.world_size())
    throw InputError("the run has " + std::to_string(world) + " ranks over its processes (" +
                     std::to_string(p.ranks.size()) +
                     " per process), the plan tp*pp*dp = " + std::to_string(plan.world_size()));
  const auto refuse = [](bool set, const char* what) {
    if (set) throw InputError(std::string(what) + " is not available yet with ranks as processes");
  };
  refuse(o.record_trace, "recording the run's trace");
  refuse(o.capture_gradients || o.capture_parameters, "capturing tensors");
}

// Runs fn(comm) for each of this process's ranks on a thread of its own (one rank: on the
// calling thread); rank_threads.hpp says how a failure is reported and which one is rethrown.
void run_process_ranks(const TrainOptions::Processes& p,
                       const std::function<void(comm::Communicator&)>& fn) {
  if (p.ranks.size() == 1) {
    fn(*p.ranks.front());
    return;
  }
  run_rank_threads(
      static_cast<int>(p.ranks.size()), [&](int i) { fn(*p.ranks[static_cast<std::size_t>(i)]); },
      [&](int i, const std::string& what) {
        if (p.on_rank_failure)
          p.on_rank_failure(p.ranks[static_cast<std::size_t>(i)]->rank(), what);
      });
}

// The synthetic corpus of a run without data shards (null with them).
std::shared_ptr<const data::SyntheticCorpus> synthetic_corpus(const TrainOptions& options,
                                                              const model::ModelConfig& config) {
  data::SyntheticCorpusConfig corpus_config;
  corpus_config.vocab_size = config.vocab;
  corpus_config.seed = options.seed;
  std::shared_ptr<const data::SyntheticCorpus> corpus;
  if (options.data_shards.empty())
    corpus = std::make_shared<const data::SyntheticCorpus>(corpus_config);
  return corpus;
}

// Trains this process's ranks, each then sending its timing and memory to rank 0, whose process
// puts every rank's into shared's last_timing and result. True in rank 0's process.
bool train_process_ranks(SharedTraining& shared, int world) {
  const TrainOptions& options = shared.options;
  bool root = false;
  run_process_ranks(*options.processes, [&](comm::Communicator& comm) {
    train_rank(shared, comm);
    const auto me = static_cast<std::size_t>(comm.rank());
    const RankReport mine{shared.last_timing[me], shared.result.ranks[me]};
    const std::vector<std::string> all = options.processes->gather_to_root(
        comm, std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
    if (comm.rank() != 0) return;
    root = true;
    if (all.size() != static_cast<std::size_t>(world))
      throw std::logic_error("train: gathered " + std::to_string(all.size()) + " rank reports");
    for (std::size_t r = 0; r < all.size(); ++r) {
      RankReport report;
      if (all[r].size() != sizeof report)
        throw std::logic_error("train: rank report of " + std::to_string(all[r].size()) + " bytes");
      std::memcpy(&report, all[r].data(), sizeof report);
      std::lock_guard lock(shared.mutex);
      shared.last_timing[r] = report.timing;
      shared.result.ranks[r] = report.summary;
    }
  });
  return root;
}

}  // namespace

TrainResult train(const TrainOptions& options) {
  PreparedRun prepared = prepare(options);
  if (options.processes) check_process_options(options, prepared.plan);
  const model::ModelConfig& config = prepared.config;
  const spec::ParallelPlan& plan = prepared.plan;
  const schedule::Schedule& sched = prepared.sched;

  const comm::Topology topology(plan);
  const int world = topology.world();
  const std::int64_t B = plan.micro_batch_size, T = config.seq_len;

  const std::shared_ptr<const data::SyntheticCorpus> corpus = synthetic_corpus(options, config);

  const int hw = std::max(1u, std::thread::hardware_concurrency());
  const int threads =
      options.threads_per_rank > 0 ? options.threads_per_rank : std::max(1, hw / world);
  tensor::set_blas_threads(threads);

  TrainResult result;
  result.schedule = sched.name;
  result.chunks = sched.chunks;
  result.microbatches = sched.data_microbatches();
  result.tokens_per_step = B * T * plan.microbatches * plan.dp;
  result.ranks.resize(static_cast<std::size_t>(world));
  std::mutex mutex;

  comm::ClusterOptions cluster_options;
  cluster_options.watchdog_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(options.watchdog_seconds * 1000.0));
  comm::ThreadCluster cluster(topology, cluster_options);
  // Processes take their clock's zero right after a barrier, so their spans line up (to the
  // barrier's skew, microseconds on one machine) as one timeline.
  if (options.processes)
    run_process_ranks(*options.processes,
                      [&](comm::Communicator& c) { c.barrier(topology.world_group()); });
  const auto epoch = Clock::now();
  std::vector<std::unique_ptr<profiler::RankRecorder>> recorders;
  for (int r = 0; r < world; ++r)
    recorders.push_back(std::make_unique<profiler::RankRecorder>(r, epoch, true));
  std::vector<StepTiming> last_timing(static_cast<std::size_t>(world));
  std::vector<RankCheckpoint> checkpoint_slots(static_cast<std::size_t>(world));
  result.first_step = prepared.resume ? static_cast<int>(prepared.resume->step) + 1 : 1;

  std::vector<profiler::GpuCapture> gpu_captures(static_cast<std::size_t>(world));
  SharedTraining shared{options,     prepared,         topology, corpus, threads,     recorders,
                        last_timing, checkpoint_slots, result,   mutex,  gpu_captures};
  if (!options.processes) {
    cluster.run([&](comm::Communicator& comm) { train_rank(shared, comm); });
  } else if (!train_process_ranks(shared, world)) {
    return result;
  }

  summarise_last_iteration(last_timing, result);
  if (options.record_trace) {
    merge_trace(recorders, result);
    add_gpu_activity(std::move(gpu_captures), !options.trace_sink, result);
  }
  return result;
}

}  // namespace pipetune::runtime
