#include "engine/runtime/rank_training.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "engine/checkpoint/rank_checkpoint_codec.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/errors.hpp"
#include "engine/model/buffer_cache.hpp"
#include "engine/runtime/adaptive_expert_layouts.hpp"
#include "engine/runtime/capture_cadence.hpp"
#include "engine/runtime/optimizer.hpp"
#include "engine/runtime/rank_parameters.hpp"
#include "engine/runtime/rank_runtime.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "profiler/byte_codec.hpp"
#include "profiler/gpu/gpu_capture.hpp"
#include "profiler/gpu/kernel_record_codec.hpp"
#include "profiler/recorder/merge_recorders.hpp"
#include "profiler/trace_codec.hpp"

namespace pipetune::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// One rank of a run: the members are built in the order the rank needs them (the buffer cache
// before the runtime, so the runtime's buffers go back to it while it is still bound).
class RankTraining {
 public:
  RankTraining(SharedTraining& shared, RankDevice& device);

  void resume();            // parameters, optimizer state and loader position from the checkpoint
  bool run_step(int step);  // one iteration; true when a stop request ends the run after it
  void finish();            // captured parameters and this rank's summary into the result
  // After a failure: the GPU records of the streamed steps since the rank's last take, to the
  // sinks, so a failed run keeps its committed steps' GPU lanes as a take at every step would
  // have. Ranks as threads only (as processes, records travel to rank 0 by a collective that a
  // failed run cannot make). Never throws: the failure is the error to report.
  void keep_committed_gpu_activity() noexcept;
  int first_step() const { return first_step_; }

 private:
  // The parts of run_step, in order. run_schedule: the step's schedule on the next microbatches
  // (its timing kept for the trainer). reduce_gradients: over the sequence-parallel and data-
  // parallel groups (at the first step, captured if asked). all_reduce_totals: the world sums of
  // [sum of squares, loss, aux, stop]. update_parameters: the optimizer step with the gradients
  // clipped to norm, then zeroed. record_step: rank 0's result of the step into the run's result
  // and trace (step_metric: the trace's metric of it).
  IterationLosses run_schedule(int step);
  void reduce_gradients(int step);
  std::vector<float> all_reduce_totals(const IterationLosses& losses);
  void update_parameters(int step, double norm);
  // Adaptive expert layouts at the step's end (adaptive_expert_layouts.hpp); rank 0 keeps the
  // choices in the run's result.
  void adapt_expert_layouts(int step);
  StepResult record_step(int step, const std::vector<float>& totals, double norm,
                         Clock::duration took, profiler::StepMetric& step_metric);
  // Takes the device's GPU activity and tells the cadence what the take cost.
  profiler::GpuCapture take_gpu_activity();
  // Streams the step's part; with GPU capture, `gpu` holds what the step's take brought (none
  // between takes: taken says which).
  void stream_trace(const profiler::StepMetric& step_metric, profiler::GpuCapture gpu, bool taken);
  void save_checkpoint(int step);
  // The thread the layered reductions overlap compute on, or nullptr to run them on the rank's.
  std::unique_ptr<ReductionWorker> reduction_worker(RankDevice& device);

  SharedTraining& s_;
  RankDevice& device_;
  const TrainOptions& options_;
  const spec::ParallelPlan& plan_;
  comm::Communicator& comm_;
  const int rank_;
  const comm::RankCoordinates at_;
  tensor::Backend& backend_;
  profiler::RankRecorder& recorder_;
  model::BufferCache buffer_cache_;
  model::ScopedBufferCache bind_buffer_cache_;
  RankRuntime runtime_;
  model::RankModel& model_;
  const comm::ProcessGroup dp_group_, edp_group_, world_group_;
  std::optional<DataParallelOptimizer> dense_opt_, expert_opt_;
  std::int64_t offloaded_optimizer_bytes_ = 0;  // the moments, in host memory
  profiler::NameId reduce_name_ = 0, gather_name_ = 0;
  data::DataLoader loader_;
  std::vector<data::Batch> batches_;
  int first_step_ = 1;
  profiler::RecorderMark streamed_;  // how much of the recorder trace_sink has had
  bool gpu_capture_ = false;         // the device captures its GPU activity for the trace
  CaptureCadence capture_cadence_;   // at which step ends the rank takes it
  // The ops the GPU records of a take may have been launched from: the streamed steps' since the
  // previous take, and that take's step (a record another rank's running kernels held back
  // comes a take late).
  profiler::Trace launch_window_;
  // When the current step's time began: where the previous step's was measured (plus the time
  // its checkpoint took), or the first step's start. Steps are timed back to back so that what
  // a step end costs (GPU capture flush and attribution, streaming to the workspace, a report
  // waiting for its commit) counts in the run's tokens/s.
  std::optional<Clock::time_point> step_began_;
  // When the latest streamed step's part went out, in the recorder's clock: GPU work launched
  // after it belongs to a step the workspace does not have.
  std::int64_t streamed_until_ns_ = 0;
  std::optional<AdaptiveExpertLayouts> adaptive_experts_;
};

data::DataLoader make_loader(const SharedTraining& s, const comm::RankCoordinates& at) {
  const data::LoaderConfig lc{s.prepared.plan.micro_batch_size, s.prepared.config.seq_len,
                              at.dp_rank, s.prepared.plan.dp};
  return s.options.data_shards.empty()
             ? data::make_synthetic_loader(s.corpus, lc)
             : data::make_shard_loader(s.options.data_shards, s.prepared.config.vocab, lc);
}

RankTraining::RankTraining(SharedTraining& shared, RankDevice& device)
    : s_(shared),
      device_(device),
      options_(shared.options),
      plan_(shared.prepared.plan),
      comm_(device.communicator()),
      rank_(comm_.rank()),
      at_(shared.topology.coordinates(rank_)),
      backend_(device.backend()),
      recorder_(*shared.recorders[static_cast<std::size_t>(rank_)]),
      buffer_cache_(device.storage() != nullptr && device.storage()->on_device()
                        ? shared.options.device_buffer_cache_bytes
                        : shared.options.buffer_cache_bytes,
                    device.storage()),
      bind_buffer_cache_(buffer_cache_),
      runtime_(shared.prepared.config, plan_, shared.prepared.split, shared.prepared.sched,
               shared.topology, comm_, backend_, &recorder_),
      model_(runtime_.model()),
      dp_group_(shared.topology.dp_group(rank_)),
      edp_group_(shared.topology.expert_dp_group(rank_)),
      world_group_(shared.topology.world_group()),
      loader_(make_loader(shared, at_)),
      batches_(static_cast<std::size_t>(plan_.microbatches)),
      first_step_(shared.prepared.resume ? static_cast<int>(shared.prepared.resume->step) + 1 : 1),
      capture_cadence_(shared.options.gpu_capture_every, shared.options.gpu_capture_budget) {
  if (options_.attention) backend_.set_attention_kernel(*options_.attention);
  if (options_.fault) runtime_.set_fault(&*options_.fault);
  if (options_.overlap_pairs && device.overlaps_pairs()) runtime_.set_pair_device(&device);
  model::RankModel& m = model_;
  // ZeRO-1 pads the flat buffers to a multiple of the group; ZeRO-2 shards the gradients unit by
  // unit, ZeRO-3 the values too (nothing to shard over a group of one).
  const auto allocate = [&](model::ParameterSet& set, const comm::ProcessGroup& group) {
    if (plan_.zero_stage >= 2 && group.size() > 1)
      set.allocate_sharded({group.size(), group.index_of(rank_)}, device.storage(),
                           plan_.zero_stage >= 3);
    else
      set.allocate(plan_.zero_stage == 1 ? group.size() : 1, device.storage());
  };
  allocate(m.dense, dp_group_);
  allocate(m.expert, edp_group_);
  m.dense.initialize(options_.seed);
  m.expert.initialize(options_.seed);
  if (options_.initial_parameters != nullptr) {
    import_full(m.dense, *options_.initial_parameters);
    import_full(m.expert, *options_.initial_parameters);
  }
  dense_opt_.emplace(m.dense, comm_, dp_group_, at_.tp_rank, plan_.zero_stage, backend_,
                     plan_.offload_optimizer);
  expert_opt_.emplace(m.expert, comm_, edp_group_, at_.tp_rank, plan_.zero_stage, backend_,
                      plan_.offload_optimizer);
  // EmbRace: the input embedding's gradient reduced by the rows this rank's tokens touched.
  if (plan_.sparse_embedding_gradient && m.has_embedding()) {
    const auto& units = m.dense.units();
    const auto wte = std::find_if(units.begin(), units.end(),
                                  [](const model::ParamUnit& u) { return u.name == "wte"; });
    if (wte == units.end()) throw std::logic_error("sparse embedding gradient: no unit 'wte'");
    dense_opt_->set_sparse_unit(static_cast<int>(wte - units.begin()), m.config().hidden);
    runtime_.record_touched_embedding_rows();
  }
  if (m.dense.gradients_sharded() || m.expert.gradients_sharded())
    runtime_.set_sharding(
        {.gather_parameters =
             [this](model::ParameterSet& set, const std::vector<int>& units) {
               (&set == &model_.dense ? *dense_opt_ : *expert_opt_).gather_parameter_units(units);
             },
         .reduce_gradients =
             [this] {
               // EmbRace under ZeRO-2 and 3: the op's touched rows go to their owners now.
               dense_opt_->reduce_open_units(dense_opt_->sparse_unit_open()
                                                 ? runtime_.take_touched_embedding_rows()
                                                 : std::vector<std::int32_t>{});
               expert_opt_->reduce_open_units();
             },
         .release_reduced =
             [this] {
               dense_opt_->release_reduced_units();
               expert_opt_->release_reduced_units();
             }});
  // Layered gradient reduction: an R op reduces its chunk's layers in both sets (each over its
  // own group: on the reduction thread's channel, a stream apart from the rank's own
  // collectives), all-reducing them without ZeRO, reduce-scattering their held full gradients
  // into the shards under ZeRO-2 and 3 (group_holds.hpp); reduce_gradients() then does the rest
  // (the tables).
  const auto chunk_units = [this](const model::ParameterSet& set, int chunk) {
    const model::LayerGroupPlacement& g =
        model_.placement().chunks.at(static_cast<std::size_t>(chunk));
    std::vector<int> units;
    for (std::int64_t l = g.first_layer; l < g.first_layer + g.layer_count; ++l)
      if (const int u = set.find_unit(model::layer_unit_name(l)); u >= 0) units.push_back(u);
    return units;
  };
  if (spec::reduces_per_group(plan_) && plan_.zero_stage >= 2)
    for (auto [set, opt] :
         {std::pair{&model_.dense, &*dense_opt_}, std::pair{&model_.expert, &*expert_opt_}})
      for (std::size_t c = 0; c < model_.placement().chunks.size(); ++c)
        opt->hold_units(chunk_units(*set, static_cast<int>(c)));
  runtime_.set_group_reduction(
      [this, chunk_units](int chunk) {
        std::vector<
            std::pair<comm::ProcessGroup, std::vector<DataParallelOptimizer::UnitReduction>>>
            work;
        for (auto [set, opt] :
             {std::pair{&model_.dense, &*dense_opt_}, std::pair{&model_.expert, &*expert_opt_}}) {
          std::vector<DataParallelOptimizer::UnitReduction> runs =
              opt->take_units(chunk_units(*set, chunk));
          if (!runs.empty()) work.emplace_back(opt->group(), std::move(runs));
        }
        return ReductionWorker::Job([work = std::move(work)](comm::Communicator& via) {
          for (const auto& [group, runs] : work)
            for (const DataParallelOptimizer::UnitReduction& r : runs)
              if (r.shard.empty())
                via.all_reduce(group, r.gradients);
              else
                via.reduce_scatter(group, r.gradients, r.shard);
        });
      },
      reduction_worker(device));
  profiler::MemoryLedger& ledger = recorder_.memory();
  const ParameterBytes params = kept_parameter_bytes(m.dense) + kept_parameter_bytes(m.expert);
  const ParameterBytes grads = kept_gradient_bytes(m.dense) + kept_gradient_bytes(m.expert);
  ledger.allocate(profiler::MemoryCategory::Parameters, params.other);
  ledger.allocate(profiler::MemoryCategory::Gradients, grads.other);
  ledger.allocate(profiler::MemoryCategory::VocabularyLayers, params.vocabulary + grads.vocabulary);
  // The moments: on the device's ledger, or in host memory under optimizer offload.
  const auto moment_bytes = static_cast<std::int64_t>(
      2 * (dense_opt_->moment1().size() + expert_opt_->moment1().size()) * sizeof(float));
  if (plan_.offload_optimizer)
    offloaded_optimizer_bytes_ = moment_bytes;
  else
    ledger.allocate(profiler::MemoryCategory::OptimizerState, moment_bytes);
  reduce_name_ = recorder_.intern("gradient reduce");
  gather_name_ = recorder_.intern("optimizer step");
  adaptive_experts_.emplace(model_, plan_);
  // Nothing would keep what is captured without a trace to put it in.
  gpu_capture_ = options_.capture_gpu_activity && (options_.trace_sink || options_.record_trace) &&
                 device.start_gpu_capture(recorder_.epoch());
}

// A thread of its own when there is a group to reduce over or an MoE all-to-all in chunks to
// overlap, the rank's work is in host memory and its communicator opens a channel (threads; MPI
// processes of one rank each). A
// device's gradients are reduced on the rank's thread: overlapping them needs a second stream
// and communicator on the device.
std::unique_ptr<ReductionWorker> RankTraining::reduction_worker(RankDevice& device) {
  if (!options_.overlap_reductions || device.storage() != nullptr) return nullptr;
  const bool reduces =
      spec::reduces_per_group(plan_) && (dp_group_.size() > 1 || edp_group_.size() > 1);
  if (!reduces && !spec::overlaps_moe_all_to_all(plan_)) return nullptr;
  std::unique_ptr<comm::Communicator> channel = comm_.open_channel();
  if (!channel) return nullptr;
  return std::make_unique<ReductionWorker>(std::move(channel),
                                           [&recorder = recorder_] { return recorder.now_ns(); });
}

// What the rank's device did since the last take, in the engine's clock.
profiler::GpuCapture RankTraining::take_gpu_activity() {
  RankDevice::GpuActivity a = device_.take_gpu_activity();
  const int steps_covered = capture_cadence_.steps_since_take();
  capture_cadence_.taken(a.serving_flush_ns + a.route_ns);
  {
    std::lock_guard lock(s_.mutex);
    TrainResult::GpuCaptureCounts& g = s_.result.gpu_capture;
    g.flushes += a.flushes;
    g.forced_flushes += a.forced_flushes;
    g.flush_ns += a.flush_ns;
    g.route_ns += a.route_ns;
    g.waiting_launch_calls = std::max(g.waiting_launch_calls, a.waiting_launch_calls);
    ++g.takes;
    g.most_steps_per_take = std::max(g.most_steps_per_take, steps_covered);
  }
  for (profiler::KernelRecord& k : a.capture.activities) {
    k.start_ns += a.clock_offset_ns;
    k.end_ns += a.clock_offset_ns;
  }
  for (profiler::ApiCallRecord& c : a.capture.api_calls) {
    c.start_ns += a.clock_offset_ns;
    c.end_ns += a.clock_offset_ns;
  }
  if (options_.record_trace) {
    profiler::GpuCapture& all = s_.gpu_captures[static_cast<std::size_t>(rank_)];
    all.activities.insert(all.activities.end(), a.capture.activities.begin(),
                          a.capture.activities.end());
    all.api_calls.insert(all.api_calls.end(), a.capture.api_calls.begin(),
                         a.capture.api_calls.end());
  }
  return std::move(a.capture);
}

void RankTraining::resume() {
  if (!s_.prepared.resume) return;
  const checkpoint::RankCheckpoint c = checkpoint::read_rank_checkpoint(options_.resume_dir, rank_);
  const std::string who = "checkpoint '" + options_.resume_dir + "' rank " + std::to_string(rank_);
  auto restore = [&](const std::string& name, tensor::FlatStorage& into) {
    const checkpoint::NamedBuffer* b = c.find(name);
    if (b == nullptr || b->values.size() != into.size())
      throw InputError(who + ": buffer '" + name + "' is missing or has the wrong size");
    into.upload(b->values);
  };
  restore("dense.params", model_.dense.flat_params());
  restore("dense.m", dense_opt_->moment1());
  restore("dense.v", dense_opt_->moment2());
  restore("expert.params", model_.expert.flat_params());
  restore("expert.m", expert_opt_->moment1());
  restore("expert.v", expert_opt_->moment2());
  try {
    loader_.restore(c.loader);
  } catch (const InputError& e) {
    throw InputError(who + ": " + e.what());
  }
}

IterationLosses RankTraining::run_schedule(int step) {
  if (!options_.record_trace) {
    recorder_.clear();  // keep only the step being measured
    streamed_ = {};
  }
  for (auto& b : batches_) loader_.next(b);
  const std::size_t first_span = recorder_.spans().size();
  const IterationLosses losses = runtime_.run_schedule(batches_, step);
  s_.last_timing[static_cast<std::size_t>(rank_)] = step_timing(recorder_, first_span);
  return losses;
}

void RankTraining::reduce_gradients(int step) {
  {
    profiler::ScopedSpan span(recorder_, profiler::SpanKind::AllReduce, profiler::Stream::Comm, -1,
                              -1, -1, reduce_name_);
    runtime_.reduce_sequence_parallel_gradients();
    dense_opt_->reduce_gradients(runtime_.take_touched_embedding_rows());
    expert_opt_->reduce_gradients();
  }
  if (options_.capture_gradients && step == first_step_) {
    export_gradients(model_.dense, dense_opt_->owned_lo(), dense_opt_->owned_hi(),
                     s_.result.first_step_gradients, s_.mutex);
    export_gradients(model_.expert, expert_opt_->owned_lo(), expert_opt_->owned_hi(),
                     s_.result.first_step_gradients, s_.mutex);
  }
}

std::vector<float> RankTraining::all_reduce_totals(const IterationLosses& losses) {
  const bool counts = at_.tp_rank == 0;
  std::vector<float> totals = {
      static_cast<float>(dense_opt_->owned_sum_squares() + expert_opt_->owned_sum_squares()),
      counts ? static_cast<float>(losses.loss_sum) : 0.0f,
      counts ? static_cast<float>(losses.aux_sum) : 0.0f,
      // Rank 0 alone reads the stop request, so every rank learns it from this reduction and
      // stops after the same step.
      rank_ == 0 && options_.stop != nullptr && options_.stop->load() ? 1.0f : 0.0f};
  comm_.all_reduce(world_group_, totals);
  return totals;
}

void RankTraining::update_parameters(int step, double norm) {
  const float coef =
      options_.grad_clip > 0.0f ? tensor::clip_coefficient(norm, options_.grad_clip) : 1.0f;
  {
    profiler::ScopedSpan span(recorder_, profiler::SpanKind::Other, profiler::Stream::Comm, -1, -1,
                              -1, gather_name_);
    dense_opt_->step(options_.adamw, step, coef);
    expert_opt_->step(options_.adamw, step, coef);
  }
  dense_opt_->zero_grad();
  expert_opt_->zero_grad();
}

StepResult RankTraining::record_step(int step, const std::vector<float>& totals, double norm,
                                     Clock::duration took, profiler::StepMetric& step_metric) {
  TrainResult& result = s_.result;
  StepResult r;
  r.step = step;
  const double mbs = static_cast<double>(plan_.microbatches) * plan_.dp;
  r.loss = totals[1] / mbs;
  r.aux_loss = totals[2] / mbs;
  r.grad_norm = norm;
  r.seconds = std::chrono::duration<double>(took).count();
  r.tokens_per_s = static_cast<double>(result.tokens_per_step) / r.seconds;
  step_metric = {step, recorder_.now_ns(), r.loss, r.tokens_per_s};
  {
    std::lock_guard lock(s_.mutex);
    result.steps.push_back(r);
    result.trace.steps.push_back(step_metric);
  }
  return r;
}

void RankTraining::adapt_expert_layouts(int step) {
  const std::vector<TrainResult::ExpertLayoutChoice> choices = adaptive_experts_->step_ended(
      step - first_step_, comm_, world_group_, at_.tp_rank == 0 ? &recorder_ : nullptr);
  if (rank_ != 0 || choices.empty()) return;
  std::lock_guard lock(s_.mutex);
  std::vector<TrainResult::ExpertLayoutChoice>& kept = s_.result.expert_layout_choices;
  kept.insert(kept.end(), choices.begin(), choices.end());
}

bool RankTraining::run_step(int step) {
  if (!step_began_) step_began_ = Clock::now();
  const Clock::time_point t0 = *step_began_;
  const IterationLosses losses = run_schedule(step);
  reduce_gradients(step);
  // One world all-reduce for the norm and the losses: [sum of squares, loss, aux, stop].
  const std::vector<float> totals = all_reduce_totals(losses);
  const bool stop_after_this_step = totals[3] > 0.0f && step < options_.steps;
  const double norm = std::sqrt(static_cast<double>(totals[0]));
  update_parameters(step, norm);
  adapt_expert_layouts(step);
  // The end of this step's time and the start of the next one's: what follows until the next
  // step (streaming, the report) counts there.
  const Clock::time_point measured = Clock::now();
  step_began_ = measured;
  profiler::StepMetric step_metric;
  std::optional<StepResult> reported;  // rank 0's, for on_step
  if (rank_ == 0) reported = record_step(step, totals, norm, measured - t0, step_metric);
  const bool save = !options_.checkpoint_dir.empty() &&
                    (step == options_.steps ||
                     (options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0));
  // When the cadence says so, at the run's last step (a stop request's included) and at a
  // checkpoint (a run killed after it has its GPU lanes up to the state it resumes from).
  const bool due = capture_cadence_.step_ended(
      std::chrono::duration_cast<std::chrono::nanoseconds>(measured - t0).count());
  const bool take = gpu_capture_ && (due || save || step == options_.steps || stop_after_this_step);
  // The step's records go out first, so a caller that prints the step after making them durable
  // (the CLI) never shows a step a crash would lose.
  stream_trace(step_metric, take ? take_gpu_activity() : profiler::GpuCapture{}, take);
  streamed_until_ns_ = recorder_.now_ns();
  if (reported && options_.on_step) options_.on_step(*reported);
  if (save) {
    const Clock::time_point before = Clock::now();
    save_checkpoint(step);
    *step_began_ += Clock::now() - before;  // a checkpoint is not a step's work
  }
  if (stop_after_this_step && rank_ == 0) {
    std::lock_guard lock(s_.mutex);
    s_.result.stopped = true;
  }
  return stop_after_this_step;
}

void RankTraining::stream_trace(const profiler::StepMetric& step_metric, profiler::GpuCapture gpu,
                                bool taken) {
  if (!options_.trace_sink) return;
  profiler::Trace part = profiler::take_recorder_part(recorder_, streamed_);
  if (rank_ == 0) part.steps.push_back(step_metric);
  std::vector<profiler::KernelRecord> kernels;
  const std::size_t earlier_ops = launch_window_.spans.size();
  if (gpu_capture_) profiler::append_launching_ops(launch_window_, part, rank_);
  if (taken) {
    // The records join this step's part, each under the op of its step that launched it.
    profiler::GpuAttribution a =
        profiler::add_gpu_capture(part, launch_window_, rank_, std::move(gpu), 0);
    // This step's ops stay for a record a take late; the earlier steps' go (their lanes and
    // names, a rank's few, stay).
    launch_window_.spans.erase(
        launch_window_.spans.begin(),
        launch_window_.spans.begin() + static_cast<std::ptrdiff_t>(earlier_ops));
    std::lock_guard lock(s_.mutex);
    TrainResult::GpuCaptureCounts& n = s_.result.gpu_capture;
    n.activities += a.records.size();
    n.attributed += a.attributed;
    n.outside_ops += a.outside_ops;
    n.without_launch += a.without_launch;
    kernels = std::move(a.records);
  }
  if (options_.processes) {
    // Every rank's part and kernels to rank 0, whose sinks write them (a collective per step).
    profiler::ByteWriter w;
    w.text(profiler::encode_trace(part));
    w.text(profiler::encode_kernels(kernels));
    for (const std::string& bytes : options_.processes->gather_to_root(comm_, w.take())) {
      profiler::ByteReader r(bytes, "trace part");
      profiler::Trace rank_part = profiler::decode_trace(r.text());
      std::vector<profiler::KernelRecord> rank_kernels = profiler::decode_kernels(r.text());
      r.expect_end();
      options_.trace_sink(std::move(rank_part));
      if (options_.kernel_sink && !rank_kernels.empty())
        options_.kernel_sink(std::move(rank_kernels));
    }
    return;
  }
  options_.trace_sink(std::move(part));
  if (options_.kernel_sink && !kernels.empty()) options_.kernel_sink(std::move(kernels));
}

void RankTraining::keep_committed_gpu_activity() noexcept {
  if (!gpu_capture_ || !options_.trace_sink || options_.processes ||
      capture_cadence_.steps_since_take() == 0)
    return;
  try {
    profiler::GpuCapture gpu = take_gpu_activity();
    // The failed step's records go with its ops: kept are those launched by a call that began
    // before the latest streamed step's part went out (a record without its call: begun then).
    std::unordered_map<std::uint32_t, std::int64_t> launched_at;
    for (const profiler::ApiCallRecord& c : gpu.api_calls) launched_at[c.correlation] = c.start_ns;
    const auto late = [&](const profiler::KernelRecord& k) {
      const auto it = launched_at.find(k.correlation);
      return (it != launched_at.end() ? it->second : k.start_ns) > streamed_until_ns_;
    };
    std::erase_if(gpu.activities, late);
    std::erase_if(gpu.api_calls, [&](const profiler::ApiCallRecord& c) {
      return c.start_ns > streamed_until_ns_;
    });
    if (gpu.activities.empty()) return;
    profiler::Trace part;
    profiler::GpuAttribution a =
        profiler::add_gpu_capture(part, launch_window_, rank_, std::move(gpu), 0);
    options_.trace_sink(std::move(part));
    if (options_.kernel_sink) options_.kernel_sink(std::move(a.records));
  } catch (...) {  // a device that failed has nothing to give; the run's error says why
  }
}

// Every rank hands its state to rank 0 (a slot, or a message from another process), which
// writes the checkpoint between two barriers.
void RankTraining::save_checkpoint(int step) {
  checkpoint::RankCheckpoint c;
  c.rank = rank_;
  // Host copies of the rank's state (downloaded from a device).
  c.buffers = {{"dense.params", model_.dense.flat_params().to_host()},
               {"dense.m", dense_opt_->moment1().to_host()},
               {"dense.v", dense_opt_->moment2().to_host()},
               {"expert.params", model_.expert.flat_params().to_host()},
               {"expert.m", expert_opt_->moment1().to_host()},
               {"expert.v", expert_opt_->moment2().to_host()}};
  c.loader = loader_.state();
  if (options_.processes) {
    // Every rank's state to rank 0, which writes the directory.
    const std::vector<std::string> all =
        options_.processes->gather_to_root(comm_, checkpoint::encode_rank_checkpoint(c));
    for (std::size_t r = 0; r < all.size(); ++r)
      s_.checkpoint_slots[r] = checkpoint::decode_rank_checkpoint(all[r]);
  } else {
    std::lock_guard lock(s_.mutex);
    s_.checkpoint_slots[static_cast<std::size_t>(rank_)] = std::move(c);
  }
  comm_.barrier(world_group_);
  if (rank_ == 0) {
    checkpoint::CheckpointManifest manifest;
    manifest.step = step;
    manifest.world = s_.topology.world();
    manifest.model = s_.prepared.config.name;
    manifest.plan = describe_plan(plan_);
    manifest.seed = options_.seed;
    checkpoint::write_checkpoint(options_.checkpoint_dir, manifest, s_.checkpoint_slots);
    s_.checkpoint_slots.assign(s_.checkpoint_slots.size(), {});
  }
  comm_.barrier(world_group_);
}

void RankTraining::finish() {
  model::RankModel& m = model_;
  if (options_.capture_parameters) {
    export_parameters(m.dense, s_.result.final_parameters, s_.mutex);
    export_parameters(m.expert, s_.result.final_parameters, s_.mutex);
  }
  RankSummary mem;
  mem.rank = rank_;
  mem.pp_rank = at_.pp_rank;
  mem.tp_rank = at_.tp_rank;
  mem.dp_rank = at_.dp_rank;
  const profiler::MemoryLedger& ledger = recorder_.memory();
  const ParameterBytes params = kept_parameter_bytes(m.dense) + kept_parameter_bytes(m.expert);
  const ParameterBytes grads = kept_gradient_bytes(m.dense) + kept_gradient_bytes(m.expert);
  mem.parameter_bytes = params.vocabulary + params.other;
  mem.gradient_bytes = grads.vocabulary + grads.other;
  mem.optimizer_bytes = ledger.current(profiler::MemoryCategory::OptimizerState);
  mem.peak_activation_bytes = ledger.peak(profiler::MemoryCategory::Activations);
  mem.peak_offloaded_bytes = runtime_.peak_offloaded_bytes();
  mem.offloaded_optimizer_bytes = offloaded_optimizer_bytes_;
  mem.reductions_overlapped = runtime_.reductions_overlap() && spec::reduces_per_group(plan_);
  mem.moe_all_to_all_overlapped =
      runtime_.reductions_overlap() && spec::overlaps_moe_all_to_all(plan_);
  mem.pairs_run_at_once = runtime_.pairs_run_at_once();
  std::lock_guard lock(s_.mutex);
  s_.result.ranks[static_cast<std::size_t>(rank_)] = mem;
}

}  // namespace

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

namespace {

class CpuRankDevice final : public RankDevice {
 public:
  CpuRankDevice(comm::Communicator& comm, int threads) : backend_(threads), comm_(comm) {}
  tensor::Backend& backend() override { return backend_; }
  tensor::DeviceAllocator* storage() override { return nullptr; }
  comm::Communicator& communicator() override { return comm_; }

 private:
  tensor::CpuBackend backend_;
  comm::Communicator& comm_;
};

}  // namespace

std::unique_ptr<RankDevice> make_cpu_rank_device(comm::Communicator& comm, int threads_per_rank) {
  return std::make_unique<CpuRankDevice>(comm, threads_per_rank);
}

void train_rank(SharedTraining& shared, comm::Communicator& comm) {
  // The device outlives the rank's training (its buffers and parameters live in its storage).
  const std::unique_ptr<RankDevice> device =
      shared.options.rank_device ? shared.options.rank_device(comm, shared.threads_per_rank)
                                 : make_cpu_rank_device(comm, shared.threads_per_rank);
  if (!device) throw std::logic_error("train: the rank device factory returned nothing");
  RankTraining rank(shared, *device);
  rank.resume();
  try {
    for (int step = rank.first_step(); step <= shared.options.steps; ++step)
      if (rank.run_step(step)) break;
  } catch (...) {
    rank.keep_committed_gpu_activity();
    throw;
  }
  rank.finish();
}

}  // namespace pipetune::runtime
