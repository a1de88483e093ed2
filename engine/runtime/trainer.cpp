#include "engine/runtime/trainer.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/comm/thread_cluster.hpp"
#include "engine/comm/topology.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/data/synthetic_corpus.hpp"
#include "engine/errors.hpp"
#include "engine/model/buffer_cache.hpp"
#include "engine/model/model_config.hpp"
#include "engine/runtime/optimizer.hpp"
#include "engine/runtime/rank_runtime.hpp"
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
void check_engine_limits(const model::ModelConfig& c, const spec::ParallelPlan& p, int groups,
                         const std::vector<int>& split) {
  for (int s : split)
    if (s < 1)
      throw InputError(
          "layer_split entries must be at least 1 for the engine (an empty layer "
          "group has nothing to run)");
  if (static_cast<int>(split.size()) != groups)
    throw InputError("layer_split has " + std::to_string(static_cast<std::int64_t>(split.size())) +
                     " entries, the schedule has " + std::to_string(groups) + " layer groups");
  if (p.microbatches > 65535)
    throw InputError("microbatches=" + std::to_string(p.microbatches) + " is over 65535");
  if (groups > 2047) throw InputError("more than 2047 layer groups");
  const int shards = p.vocab != schedule::VocabMode::None ? p.tp * p.pp : p.tp;
  if (c.vocab < shards)
    throw InputError("vocab=" + std::to_string(c.vocab) + " is smaller than its " +
                     std::to_string(shards) + " shards");
}

// Writes this rank's elements [lo, hi) of `flat` into full-model tensors.
void export_full(const model::ParameterSet& set, const std::vector<float>& flat, std::int64_t lo,
                 std::int64_t hi, std::map<std::string, tensor::Tensor>& out, std::mutex& mutex) {
  std::lock_guard lock(mutex);
  for (const model::ParamEntry& e : set.entries()) {
    const auto off = static_cast<std::int64_t>(e.offset);
    const std::int64_t a = std::max(lo, off), b = std::min(hi, off + e.numel());
    if (a >= b) continue;
    auto it = out.find(e.name);
    if (it == out.end()) {
      const tensor::Shape shape = e.layout.full_cols == 1
                                      ? tensor::Shape{e.layout.full_rows}
                                      : tensor::Shape{e.layout.full_rows, e.layout.full_cols};
      it = out.emplace(e.name, tensor::Tensor(shape)).first;
    }
    for (std::int64_t i = a; i < b; ++i)
      it->second[e.layout.full_index(i - off)] = flat[static_cast<std::size_t>(i)];
  }
}

// Overwrites this rank's shards with the elements of the given full-model tensors.
void import_full(model::ParameterSet& set, const std::map<std::string, tensor::Tensor>& full) {
  for (const model::ParamEntry& e : set.entries()) {
    auto it = full.find(e.name);
    if (it == full.end()) continue;
    if (it->second.numel() != e.layout.full_numel())
      throw InputError("initial parameter '" + e.name + "' has " +
                       std::to_string(it->second.numel()) + " elements, the model " +
                       std::to_string(e.layout.full_numel()));
    float* p = set.flat_params().data() + e.offset;
    for (std::int64_t i = 0; i < e.numel(); ++i) p[i] = it->second[e.layout.full_index(i)];
  }
}

// Parameter and gradient bytes of the vocabulary layers (embedding, position embedding, output
// layer) and of everything else.
struct ParameterBytes {
  std::int64_t vocabulary = 0;
  std::int64_t other = 0;
};

ParameterBytes parameter_bytes(const model::ParameterSet& set) {
  ParameterBytes b;
  for (const model::ParamEntry& e : set.entries()) {
    const bool vocab = e.name == "wte" || e.name == "wpe" || e.name == "head.w";
    (vocab ? b.vocabulary : b.other) += e.numel() * static_cast<std::int64_t>(sizeof(float));
  }
  b.other += (set.padded_size() - set.size()) * static_cast<std::int64_t>(sizeof(float));
  return b;
}

// One step of one rank as its spans show it.
struct StepTiming {
  std::int64_t first_start_ns = 0;
  std::int64_t last_end_ns = 0;
  std::int64_t compute_ns = 0;  // inside ops, minus their waits for messages and collectives
};

StepTiming step_timing(const profiler::RankRecorder& recorder, std::size_t first_span) {
  StepTiming t;
  t.first_start_ns = std::numeric_limits<std::int64_t>::max();
  const auto& spans = recorder.spans();
  for (std::size_t i = first_span; i < spans.size(); ++i) {
    const profiler::RecordedSpan& sp = spans[i];
    const std::int64_t d = sp.end_ns - sp.start_ns;
    if (sp.stream == profiler::Stream::Compute && sp.parent == profiler::kNoSpan) {
      t.compute_ns += d;
      t.first_start_ns = std::min(t.first_start_ns, sp.start_ns);
      t.last_end_ns = std::max(t.last_end_ns, sp.end_ns);
    } else if (sp.stream != profiler::Stream::Compute && sp.parent != profiler::kNoSpan &&
               spans[sp.parent].stream == profiler::Stream::Compute) {
      t.compute_ns -= d;
    }
  }
  if (t.first_start_ns == std::numeric_limits<std::int64_t>::max()) t.first_start_ns = 0;
  return t;
}

}  // namespace

std::string describe_plan(const spec::ParallelPlan& p) {
  std::ostringstream s;
  s << "tp=" << p.tp << " pp=" << p.pp << " dp=" << p.dp << " ep=" << p.ep
    << " schedule=" << p.schedule << " chunks=" << p.chunks
    << " vocab=" << schedule::vocab_mode_name(p.vocab) << " microbatches=" << p.microbatches
    << " micro_batch_size=" << p.micro_batch_size << " zero=" << p.zero_stage << " split=";
  for (std::size_t i = 0; i < p.layer_split.size(); ++i) s << (i ? "," : "") << p.layer_split[i];
  return s.str();
}

namespace {

// Everything train() derives from its options before starting a thread; every input error is
// raised here.
struct PreparedRun {
  std::optional<CheckpointManifest> resume;
  model::ModelConfig config;
  spec::ParallelPlan plan;
  schedule::Schedule sched;
  std::vector<int> split;
};

PreparedRun prepare(const TrainOptions& options) {
  PreparedRun p;
  p.config = model::engine_model_config(options.model);
  p.config.capacity_factor = options.capacity_factor;
  p.config.aux_loss_coef = options.aux_loss_coef;
  p.plan = options.plan;
  spec::apply_defaults(p.plan);
  {
    spec::ModelSpec model = options.model;
    spec::apply_defaults(model);
    spec::validate(model, p.plan);
  }
  if (options.steps < 1)
    throw InputError("steps must be at least 1 (got " + std::to_string(options.steps) + ")");
  // Plan settings the engine does not carry out are refused, never trained without (issue 12).
  // The simulator and predict model them; the engine keeps every activation and replicates
  // layer-norm and dropout work across the TP group.
  if (p.plan.zero_stage > 1)
    throw InputError("zero_stage=" + std::to_string(p.plan.zero_stage) +
                     ": the engine implements ZeRO-1 (optimizer state sharding) only; set "
                     "zero_stage = 0 or 1 to train (predict and simulate model stages 2 and 3)");
  if (p.plan.recompute != spec::Recompute::None)
    throw InputError("recompute=\"" + std::string(spec::recompute_name(p.plan.recompute)) +
                     "\": the engine does not recompute activations; set recompute = \"none\" to "
                     "train (predict and simulate model recomputation)");
  if (p.plan.sequence_parallel)
    throw InputError(
        "sequence_parallel=true: the engine does not implement sequence parallelism; "
        "set sequence_parallel = false to train (predict and simulate model it)");
  if (p.plan.world_size() > kMaxTrainRanks)
    throw InputError("world = tp*pp*dp = " + std::to_string(p.plan.world_size()) +
                     " ranks is more than the " + std::to_string(kMaxTrainRanks) +
                     " rank threads the embedded engine runs");
  // The schedule the caller planned (with the cost model of the run's hardware, as simulate and
  // predict do), or the plan's generator with unit costs.
  if (options.schedule) {
    spec::check_schedule_matches(*options.schedule, p.plan);
    schedule::validate(*options.schedule);
    p.sched = *options.schedule;
  } else {
    p.sched = spec::plan_schedule(p.plan);
  }
  p.split = p.plan.layer_split.empty() ? spec::even_layer_split(p.config.layers, p.sched.groups())
                                       : p.plan.layer_split;
  check_engine_limits(p.config, p.plan, p.sched.groups(), p.split);
  p.plan.layer_split = p.split;
  if (!options.data_shards.empty())  // opened once here so a bad shard fails before any thread
    (void)data::make_shard_loader(options.data_shards, p.config.vocab,
                                  {p.plan.micro_batch_size, p.config.seq_len, 0, p.plan.dp});
  if (!options.resume_dir.empty()) {
    CheckpointManifest m = read_checkpoint_manifest(options.resume_dir);
    const std::string who = "checkpoint '" + options.resume_dir + "'";
    const std::string plan = describe_plan(p.plan);
    if (m.model != p.config.name)
      throw InputError(who + " is of model '" + m.model + "', not '" + p.config.name + "'");
    if (m.plan != plan)
      throw InputError(who + " was written by plan [" + m.plan + "], this run is [" + plan + "]");
    if (m.world != p.plan.world_size())
      throw InputError(who + " has " + std::to_string(m.world) + " ranks, the plan " +
                       std::to_string(p.plan.world_size()));
    if (m.seed != options.seed)
      throw InputError(who + " was written with seed " + std::to_string(m.seed) + ", not " +
                       std::to_string(options.seed));
    if (m.step >= options.steps)
      throw InputError(who + " is at step " + std::to_string(m.step) + ": --steps " +
                       std::to_string(options.steps) + " leaves nothing to train");
    p.resume = std::move(m);
  }
  return p;
}

}  // namespace

void check_train_options(const TrainOptions& options) {
  (void)prepare(options);
}

TrainResult train(const TrainOptions& options) {
  PreparedRun prepared = prepare(options);
  const model::ModelConfig& config = prepared.config;
  const spec::ParallelPlan& plan = prepared.plan;
  const schedule::Schedule& sched = prepared.sched;
  const std::vector<int>& split = prepared.split;

  const comm::Topology topology(plan.tp, plan.pp, plan.dp, plan.ep);
  const int world = topology.world();
  const std::int64_t B = plan.micro_batch_size, T = config.seq_len;

  data::SyntheticCorpusConfig corpus_config;
  corpus_config.vocab_size = config.vocab;
  corpus_config.seed = options.seed;
  std::shared_ptr<const data::SyntheticCorpus> corpus;
  if (options.data_shards.empty())
    corpus = std::make_shared<const data::SyntheticCorpus>(corpus_config);

  const int hw = std::max(1u, std::thread::hardware_concurrency());
  const int threads =
      options.threads_per_rank > 0 ? options.threads_per_rank : std::max(1, hw / world);
  tensor::set_blas_threads(threads);

  TrainResult result;
  result.schedule = sched.name;
  result.chunks = sched.chunks;
  result.microbatches = sched.microbatches;
  result.tokens_per_step = B * T * plan.microbatches * plan.dp;
  result.ranks.resize(static_cast<std::size_t>(world));
  std::mutex mutex;

  comm::ClusterOptions cluster_options;
  cluster_options.watchdog_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(options.watchdog_seconds * 1000.0));
  comm::ThreadCluster cluster(topology, cluster_options);
  const auto epoch = Clock::now();
  std::vector<std::unique_ptr<profiler::RankRecorder>> recorders;
  for (int r = 0; r < world; ++r)
    recorders.push_back(std::make_unique<profiler::RankRecorder>(r, epoch, true));
  std::vector<StepTiming> last_timing(static_cast<std::size_t>(world));
  std::vector<RankCheckpoint> checkpoint_slots(static_cast<std::size_t>(world));
  result.first_step = prepared.resume ? static_cast<int>(prepared.resume->step) + 1 : 1;

  cluster.run([&](comm::Communicator& comm) {
    const int rank = comm.rank();
    const comm::RankCoordinates at = topology.coordinates(rank);
    tensor::CpuBackend backend(threads);
    profiler::RankRecorder& recorder = *recorders[static_cast<std::size_t>(rank)];
    // Before the runtime: its buffers go back to the cache while it is still bound.
    model::BufferCache buffer_cache(options.buffer_cache_bytes);
    model::ScopedBufferCache bind_buffer_cache(buffer_cache);
    RankRuntime runtime(config, plan, split, sched, topology, comm, backend, &recorder);
    model::RankModel& m = runtime.model();
    const comm::ProcessGroup dp_group = topology.dp_group(rank);
    const comm::ProcessGroup edp_group = topology.expert_dp_group(rank);
    const bool zero1 = plan.zero_stage == 1;
    m.dense.allocate(zero1 ? dp_group.size() : 1);
    m.expert.allocate(zero1 ? edp_group.size() : 1);
    m.dense.initialize(options.seed);
    m.expert.initialize(options.seed);
    if (options.initial_parameters != nullptr) {
      import_full(m.dense, *options.initial_parameters);
      import_full(m.expert, *options.initial_parameters);
    }
    DataParallelOptimizer dense_opt(m.dense, comm, dp_group, at.tp_rank, zero1, backend);
    DataParallelOptimizer expert_opt(m.expert, comm, edp_group, at.tp_rank, zero1, backend);
    {
      profiler::MemoryLedger& ledger = recorder.memory();
      const ParameterBytes dense_bytes = parameter_bytes(m.dense);
      const ParameterBytes expert_bytes = parameter_bytes(m.expert);
      const std::int64_t other = dense_bytes.other + expert_bytes.other;
      ledger.allocate(profiler::MemoryCategory::Parameters, other);
      ledger.allocate(profiler::MemoryCategory::Gradients, other);
      ledger.allocate(profiler::MemoryCategory::VocabularyLayers, 2 * dense_bytes.vocabulary);
      ledger.allocate(
          profiler::MemoryCategory::OptimizerState,
          static_cast<std::int64_t>(2 * (dense_opt.moment1().size() + expert_opt.moment1().size()) *
                                    sizeof(float)));
    }
    const profiler::NameId reduce_name = recorder.intern("gradient reduce");
    const profiler::NameId gather_name = recorder.intern("optimizer step");

    data::LoaderConfig lc{B, T, at.dp_rank, plan.dp};
    data::DataLoader loader = options.data_shards.empty()
                                  ? data::make_synthetic_loader(corpus, lc)
                                  : data::make_shard_loader(options.data_shards, config.vocab, lc);
    const comm::ProcessGroup world_group = topology.world_group();
    std::vector<data::Batch> batches(static_cast<std::size_t>(plan.microbatches));
    const int first_step = prepared.resume ? static_cast<int>(prepared.resume->step) + 1 : 1;
    if (prepared.resume) {
      const RankCheckpoint c = read_rank_checkpoint(options.resume_dir, rank);
      auto restore = [&](const std::string& name, std::vector<float>& into) {
        const NamedBuffer* b = c.find(name);
        if (b == nullptr || b->values.size() != into.size())
          throw InputError("checkpoint '" + options.resume_dir + "' rank " + std::to_string(rank) +
                           ": buffer '" + name + "' is missing or has the wrong size");
        into = b->values;
      };
      restore("dense.params", m.dense.flat_params());
      restore("dense.m", dense_opt.moment1());
      restore("dense.v", dense_opt.moment2());
      restore("expert.params", m.expert.flat_params());
      restore("expert.m", expert_opt.moment1());
      restore("expert.v", expert_opt.moment2());
      loader.restore(c.loader);
    }

    profiler::RecorderMark streamed;  // how much of the recorder trace_sink has had
    for (int step = first_step; step <= options.steps; ++step) {
      const auto t0 = Clock::now();
      if (!options.record_trace) {
        recorder.clear();  // keep only the step being measured
        streamed = {};
      }
      for (auto& b : batches) loader.next(b);
      const std::size_t first_span = recorder.spans().size();
      const IterationLosses losses = runtime.run_schedule(batches, step);
      last_timing[static_cast<std::size_t>(rank)] = step_timing(recorder, first_span);
      {
        profiler::ScopedSpan span(recorder, profiler::SpanKind::AllReduce, profiler::Stream::Comm,
                                  -1, -1, -1, reduce_name);
        dense_opt.reduce_gradients();
        expert_opt.reduce_gradients();
      }
      if (options.capture_gradients && step == first_step) {
        export_full(m.dense, m.dense.flat_grads(), dense_opt.owned_lo(), dense_opt.owned_hi(),
                    result.first_step_gradients, mutex);
        export_full(m.expert, m.expert.flat_grads(), expert_opt.owned_lo(), expert_opt.owned_hi(),
                    result.first_step_gradients, mutex);
      }
      // One world all-reduce for the norm and the losses: [sum of squares, loss, aux].
      const bool counts = at.tp_rank == 0;
      std::vector<float> totals = {
          static_cast<float>(dense_opt.owned_sum_squares() + expert_opt.owned_sum_squares()),
          counts ? static_cast<float>(losses.loss_sum) : 0.0f,
          counts ? static_cast<float>(losses.aux_sum) : 0.0f,
          // Rank 0 alone reads the stop request, so every rank learns it from this reduction
          // and stops after the same step.
          rank == 0 && options.stop != nullptr && options.stop->load() ? 1.0f : 0.0f};
      comm.all_reduce(world_group, totals);
      const bool stop_after_this_step = totals[3] > 0.0f && step < options.steps;
      const double norm = std::sqrt(static_cast<double>(totals[0]));
      const float coef =
          options.grad_clip > 0.0f ? tensor::clip_coefficient(norm, options.grad_clip) : 1.0f;
      {
        profiler::ScopedSpan span(recorder, profiler::SpanKind::Other, profiler::Stream::Comm, -1,
                                  -1, -1, gather_name);
        dense_opt.step(options.adamw, step, coef);
        expert_opt.step(options.adamw, step, coef);
      }
      dense_opt.zero_grad();
      expert_opt.zero_grad();
      profiler::StepMetric step_metric;
      if (rank == 0) {
        StepResult r;
        r.step = step;
        const double mbs = static_cast<double>(plan.microbatches) * plan.dp;
        r.loss = totals[1] / mbs;
        r.aux_loss = totals[2] / mbs;
        r.grad_norm = norm;
        r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        r.tokens_per_s = static_cast<double>(result.tokens_per_step) / r.seconds;
        step_metric = {step, recorder.now_ns(), r.loss, r.tokens_per_s};
        {
          std::lock_guard lock(mutex);
          result.steps.push_back(r);
          result.trace.steps.push_back(step_metric);
        }
        if (options.on_step) options.on_step(r);
      }
      if (options.trace_sink) {
        profiler::Trace part = profiler::take_recorder_part(recorder, streamed);
        if (rank == 0) part.steps.push_back(step_metric);
        options.trace_sink(std::move(part));
      }
      const bool save = !options.checkpoint_dir.empty() &&
                        (step == options.steps ||
                         (options.checkpoint_every > 0 && step % options.checkpoint_every == 0));
      if (save) {
        RankCheckpoint c;
        c.rank = rank;
        c.buffers = {
            {"dense.params", m.dense.flat_params()}, {"dense.m", dense_opt.moment1()},
            {"dense.v", dense_opt.moment2()},        {"expert.params", m.expert.flat_params()},
            {"expert.m", expert_opt.moment1()},      {"expert.v", expert_opt.moment2()}};
        c.loader = loader.state();
        {
          std::lock_guard lock(mutex);
          checkpoint_slots[static_cast<std::size_t>(rank)] = std::move(c);
        }
        comm.barrier(world_group);
        if (rank == 0) {
          CheckpointManifest manifest;
          manifest.step = step;
          manifest.world = world;
          manifest.model = config.name;
          manifest.plan = describe_plan(plan);
          manifest.seed = options.seed;
          write_checkpoint(options.checkpoint_dir, manifest, checkpoint_slots);
          checkpoint_slots.assign(checkpoint_slots.size(), {});
        }
        comm.barrier(world_group);
      }
      if (stop_after_this_step) {
        if (rank == 0) {
          std::lock_guard lock(mutex);
          result.stopped = true;
        }
        break;
      }
    }
    if (options.capture_parameters) {
      export_full(m.dense, m.dense.flat_params(), 0, m.dense.padded_size(), result.final_parameters,
                  mutex);
      export_full(m.expert, m.expert.flat_params(), 0, m.expert.padded_size(),
                  result.final_parameters, mutex);
    }
    RankSummary mem;
    mem.rank = rank;
    mem.pp_rank = at.pp_rank;
    mem.tp_rank = at.tp_rank;
    mem.dp_rank = at.dp_rank;
    const profiler::MemoryLedger& ledger = recorder.memory();
    const std::int64_t vocab = ledger.current(profiler::MemoryCategory::VocabularyLayers) / 2;
    mem.parameter_bytes = ledger.current(profiler::MemoryCategory::Parameters) + vocab;
    mem.gradient_bytes = ledger.current(profiler::MemoryCategory::Gradients) + vocab;
    mem.optimizer_bytes = ledger.current(profiler::MemoryCategory::OptimizerState);
    mem.peak_activation_bytes = ledger.peak(profiler::MemoryCategory::Activations);
    std::lock_guard lock(mutex);
    result.ranks[static_cast<std::size_t>(rank)] = mem;
  });

  // The pipeline's iteration time of the last step: first op start to last op end, all ranks.
  std::int64_t begin = std::numeric_limits<std::int64_t>::max(), end = 0;
  for (const StepTiming& t : last_timing) {
    begin = std::min(begin, t.first_start_ns);
    end = std::max(end, t.last_end_ns);
  }
  const std::int64_t iteration = std::max<std::int64_t>(0, end - begin);
  result.iteration_seconds = static_cast<double>(iteration) * 1e-9;
  for (int r = 0; r < world; ++r) {
    RankSummary& k = result.ranks[static_cast<std::size_t>(r)];
    const StepTiming& t = last_timing[static_cast<std::size_t>(r)];
    k.compute_seconds = static_cast<double>(t.compute_ns) * 1e-9;
    k.bubble_seconds = std::max(0.0, result.iteration_seconds - k.compute_seconds);
    k.bubble_ratio = iteration > 0 ? k.bubble_seconds / result.iteration_seconds : 0.0;
  }
  if (options.record_trace) {
    std::vector<const profiler::RankRecorder*> list;
    for (const auto& r : recorders) list.push_back(r.get());
    std::vector<profiler::StepMetric> steps = std::move(result.trace.steps);
    result.trace = profiler::merge_recorders(list);
    result.trace.steps = std::move(steps);
  }
  return result;
}

}  // namespace pipetune::runtime
