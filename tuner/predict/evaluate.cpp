#include "tuner/predict/evaluate.hpp"

#include "engine/schedule/execution_order.hpp"

#include "engine/spec/plan_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/cost/fnv1a.hpp"
#include "tuner/cost/work.hpp"
#include "tuner/predict/token_slices.hpp"

namespace pipetune::tuner {

namespace {

// Schedules kept per evaluator; a search touches a few dozen shapes, so a full cache is dropped.
constexpr std::size_t kMaxCachedSchedules = 256;
// Cost-aware orders, which only plans with the same planning costs share: fewer kept.
constexpr std::size_t kMaxPlannedSchedules = 16;

// Exposed data-parallel communication and optimizer time after the pipeline (the slowest stage
// of each), from the op costs: what the schedule cannot hide.
struct AfterPipeline {
  double data_parallel = 0.0;
  double optimizer = 0.0;
};

// Under layered gradient reduction the schedule's R ops carry the layers' reductions (the
// simulation times them); what is left here is the vocabulary tables'.
AfterPipeline after_pipeline(const OpCosts& costs, const spec::ParallelPlan& plan,
                             const ExecutionOptions& x) {
  AfterPipeline a;
  const bool per_group = spec::reduces_per_group(plan);
  for (int i = 0; i < plan.pp; ++i) {
    const StageCost& st = costs.stages[static_cast<std::size_t>(i)];
    const double last_backward = st.input_grad.total() + st.weight_grad.total();
    const double first_forward = st.forward.total();
    const double grad_reduce = per_group ? st.tables_reduce : st.grad_reduce;
    const double reduce =
        x.overlap_grad_reduce ? std::max(0.0, grad_reduce - last_backward) : grad_reduce;
    const double gather =
        x.overlap_param_gather ? std::max(0.0, st.param_gather - first_forward) : st.param_gather;
    a.data_parallel = std::max(a.data_parallel, reduce + gather + st.embedding_sync);
    a.optimizer = std::max(a.optimizer, st.optimizer);
  }
  return a;
}

// Throughput and FLOP utilisation from the iteration time (left at zero when it is not positive).
void set_throughput(PlanEvaluation& e, double tokens, int world, double peak) {
  if (!(e.iteration_time > 0.0)) return;
  e.tokens_per_s = tokens / e.iteration_time;
  e.tflops_per_gpu = e.model_flops / e.iteration_time / world / 1e12;
  e.hfu_tflops_per_gpu = e.hardware_flops / e.iteration_time / world / 1e12;
  e.mfu = e.model_flops / (e.iteration_time * world * peak);
  e.hfu = e.hardware_flops / (e.iteration_time * world * peak);
}

}  // namespace

double expected_iteration_time(double t, int devices, int dp, const FailureModel& f) {
  if (!(f.rate_per_device_hour > 0.0) || !(t > 0.0)) return t;
  const double mu = f.rate_per_device_hour * devices / 3600.0;  // failures per second
  if (f.reroute && dp >= 2) {
    // What a failure at a uniform time u moves: the failed replica's share of min(S, T - u).
    const double s = f.restart_delay;
    const double moved = s >= t ? 0.5 * t : s - s * s / (2.0 * t);
    return t + mu * t * moved / (dp - 1);
  }
  // expm1: exact where mu t is tiny (1e-6 and below), where exp(mu t) - 1 loses its digits.
  return std::expm1(mu * t) * (1.0 / mu + f.restart_delay);
}

void set_moe_imbalance(EvaluateOptions& options, const spec::HardwareSpec& hardware,
                       const MoeImbalance& imbalance) {
  if (!options.execution) options.execution = default_execution(hardware);
  options.execution->moe_imbalance = imbalance;
}

void set_embedding_rows_factor(EvaluateOptions& options, const spec::HardwareSpec& hardware,
                               double factor) {
  if (!options.execution) options.execution = default_execution(hardware);
  options.execution->embedding_rows_factor = factor;
}

ExecutionOptions PlanEvaluator::execution_for(const spec::ClusterSpec& cluster) const {
  return options_.execution.value_or(default_execution(cluster.hardware));
}

MemoryModelOptions PlanEvaluator::memory_for(const spec::ClusterSpec& cluster) const {
  return options_.memory.value_or(default_memory_options(cluster.hardware));
}

PlanEvaluator::Checked PlanEvaluator::checked(const spec::ModelSpec& model,
                                              const spec::ClusterSpec& cluster,
                                              const spec::ParallelPlan& plan) const {
  Checked c{model, plan, schedule::Placement::Linear, {}};
  spec::apply_defaults(c.model);
  spec::apply_defaults(c.plan);
  spec::validate(c.model, cluster, c.plan);
  c.placement = schedule::schedule_placement(c.plan.schedule);
  c.execution = execution_for(cluster);
  return c;
}

PlanBound PlanEvaluator::bound(const spec::ModelSpec& model_in, const spec::ClusterSpec& cluster,
                               const spec::ParallelPlan& plan_in) {
  const Checked c = checked(model_in, cluster, plan_in);
  const spec::ModelSpec& model = c.model;
  const spec::ParallelPlan& plan = c.plan;
  const schedule::Placement placement = c.placement;
  const ExecutionOptions& execution = c.execution;
  const MemoryModelOptions memory = memory_for(cluster);
  const OpCosts& costs = costs_for(model, cluster, plan, placement, execution);
  const auto P = static_cast<std::size_t>(plan.pp);
  // Activations: what the schedule's warm-up rule makes a stage hold before its first backward
  // (schedule::least_peak_in_flight, with the costs evaluate() plans with), at least one chunk of
  // one micro-batch.
  const schedule::GeneratorParams shape =
      spec::generator_params(plan, {}, options_.schedule_memory_limit);
  // Offloading activations, a stage keeps at least the one chunk its running forward fills.
  const std::vector<double> in_flight = plan.offload_activations
                                            ? std::vector<double>(P, 1.0 / plan.chunks)
                                            : schedule::least_peaks_in_flight(shape, costs.table);
  std::vector<double> least_activations(P, 0.0);
  for (std::size_t k = 0; k < P; ++k)
    least_activations[k] = in_flight[k] * costs.activation_bytes_per_microbatch[k] +
                           costs.transient_activation_bytes[k];
  PlanBound b;
  const MemoryEstimate least = memory_peaks(stage_parameters_.get(model, plan, placement), cluster,
                                            plan, least_activations, memory);
  b.peak_memory_bytes = least.peak_bytes;
  b.fits = least.fits();
  // Every rank runs each of its chunks' forward and backward (split or fused, whichever is
  // cheaper) for every micro-batch, and under vocabulary parallelism the S, T, IF and IB passes;
  // it cannot start before the first micro-batch's forward has crossed the ranks before it. On a
  // linear pipeline the last micro-batch's backward must then still cross those ranks back (the
  // drain), except for the weight-gradient passes a zero-bubble schedule may defer past it.
  using schedule::OpKind;
  const schedule::CostTable& t = costs.table;
  const double m = plan.microbatches, v = plan.chunks;
  const bool linear = placement == schedule::Placement::Linear;
  const bool fused_backward = plan.schedule == "gpipe" || plan.schedule == "1f1b" ||
                              plan.schedule == "interleaved-1f1b" || plan.schedule == "terapipe" ||
                              plan.schedule == "layered";
  // Token slices: the slicing evaluate() simulates. Each rank runs every slice of every
  // micro-batch; the first slice is the first op to cross the ranks, and, GPipe-style, its
  // backward of the last micro-batch the last to come back.
  const bool sliced = schedule::supports_slices(plan.schedule);
  std::vector<schedule::SliceShape> shapes;
  if (sliced) {
    spec::ParallelPlan chosen = plan;
    slicings_.choose(chosen, model.seq_len, t);
    if (plan.slice_tokens.empty()) b.slice_tokens = chosen.slice_tokens;
    shapes = schedule::slice_shapes(
        schedule::slice_count(chosen.schedule, chosen.slices, chosen.slice_tokens),
        chosen.slice_tokens);
  }
  // Partial pipelining: the middle ranks run fewer micro-batches, the first and last every one.
  const bool partial = schedule::skips_stages(plan.schedule);
  double busiest = 0.0, startup = 0.0, drain = 0.0;
  const bool pairs = schedule::has_overlapped_pairs(plan.schedule);
  const bool reduces = spec::reduces_per_group(plan);
  // A hop's transfer: one time for every pair of ranks unless per-stage layouts reshard.
  const double p2p = t.p2p_time();
  const auto transfer = [&](int source, int dest) {
    return t.pair_transfer.empty() ? p2p : t.transfer_time(source, dest);
  };
  // An op of a pair may be shorter by the communication it hides: at most its own.
  const auto least_cost = [&](int r, OpKind k) {
    return t.cost(r, k) - (pairs ? t.comm(r, k) : 0.0);
  };
  for (int r = 0; r < plan.pp; ++r) {
    const double backward =
        std::min(t.cost(r, OpKind::BW), t.cost(r, OpKind::B) + t.cost(r, OpKind::W));
    // Overlapped pairs (simulator.hpp): each forward pairs with at most one fused backward, and
    // the pair hides at most min(k_F, c_BW - k_BW) + min(k_BW, c_F - k_F) of their time.
    double hidden = 0.0;
    if (pairs) {
      const double f = t.cost(r, OpKind::F), bw = t.cost(r, OpKind::BW);
      const double kf = t.comm(r, OpKind::F), kbw = t.comm(r, OpKind::BW);
      hidden = std::min(kf, bw - kbw) + std::min(kbw, f - kf);
    }
    double transformer = m * v * (t.cost(r, OpKind::F) + backward) -
                         (pairs ? schedule::most_overlapped_pairs(shape, r) * hidden : 0.0);
    if (sliced) {
      transformer = 0.0;
      for (const schedule::SliceShape& sh : shapes)
        transformer += m * (t.slice_cost(r, OpKind::F, sh) + t.slice_cost(r, OpKind::BW, sh));
    }
    // Vocabulary passes run on the rank's compute stream too. Before its first forward a rank can
    // only run input-embedding forwards (S, T and IB wait for a forward to reach the last layer
    // group); after its last forward or input-gradient op only T, IB and deferred W passes are
    // left (every IF and S precede the last micro-batch's backward).
    // Interlaced passes block the rank's compute stream until their barrier's collective is
    // done (at least collective_time after the rank's own arrival): IF, S and T each.
    const bool vocab = plan.vocab != schedule::VocabMode::None;
    const double block = plan.vocab == schedule::VocabMode::Interlaced ? t.collective_time : 0.0;
    const double vocab_before = vocab ? m * (t.cost(r, OpKind::IF) + block) : 0.0;
    const double vocab_after =
        vocab ? m * (t.cost(r, OpKind::T) + block + t.cost(r, OpKind::IB)) : 0.0;
    const double vocabulary =
        vocab ? vocab_before + vocab_after + m * (t.cost(r, OpKind::S) + block) : 0.0;
    if (partial && r != 0 && r != plan.pp - 1) continue;
    // ZeRO-3 under layer-group reductions gathers a group's values before each run of its ops
    // (group_holds.hpp), in series with them: a micro-batch's forwards visit the rank's chunks in
    // order and its backwards in reverse, so a rank runs at least 2v - 1 runs (3 in a V); pairs
    // may hold every op.
    if (!pairs && !partial && t.stages[static_cast<std::size_t>(r)].run_gather > 0.0)
      transformer +=
          (linear ? 2.0 * v - 1.0 : 3.0) * t.stages[static_cast<std::size_t>(r)].run_gather;
    // The rank idles until the first forward reaches it but for what input-embedding passes fill.
    const double busy = std::max(0.0, startup - vocab_before) + transformer + vocabulary;
    busiest = std::max(busiest, busy);
    // Layer-group reductions: the rank's last layer op adds to a group's weight gradients (a W or
    // BW), whose R then runs on the reduction stream; the iteration ends after it.
    if (reduces && !partial) busiest = std::max(busiest, busy - vocab_after + t.cost(r, OpKind::R));
    // Its last forward or input gradient (the first group it holds, for the last micro-batch, on
    // a linear and a V placement alike) must then cross the ranks before it back (the drain):
    // only the passes that may come after it fill that wait.
    const double deferrable = fused_backward ? 0.0 : m * v * t.cost(r, OpKind::W);
    busiest = std::max(busiest, busy - vocab_after - deferrable + drain);
    // The hop to the next rank (forward) and back (backward): resharded with per-stage layouts.
    const bool hop = r + 1 < plan.pp;
    if (partial) continue;
    if (sliced) {  // the first slice, and at most its share of a transfer
      const double share = shapes.front().length;
      startup +=
          t.slice_cost(r, OpKind::F, shapes.front()) + share * (hop ? transfer(r, r + 1) : p2p);
      drain +=
          t.slice_cost(r, OpKind::BW, shapes.front()) + share * (hop ? transfer(r + 1, r) : p2p);
      continue;
    }
    startup += least_cost(r, OpKind::F) + (hop ? transfer(r, r + 1) : p2p);
    drain += std::min(least_cost(r, OpKind::B), least_cost(r, OpKind::BW)) +
             (hop ? transfer(r + 1, r) : p2p);
  }
  // One micro-batch's own chain: its forward through every layer group in order, then its
  // backward's input gradients back through them (a fused backward whole), each hop between ranks
  // a transfer. Where a loop of ranks outnumbers the micro-batches in flight (a few micro-batches
  // over many chunks), no schedule keeps the ranks busy and this binds.
  if (!sliced && !partial) {
    schedule::Schedule where;  // the group -> rank mapping of the placement
    where.stages = plan.pp;
    where.chunks = plan.chunks;
    where.placement = placement;
    const int groups = where.groups();
    double chain = 0.0;
    for (int g = 0; g < groups; ++g) {
      const int r = where.rank_of_group(g);
      const double input_grad = std::min(least_cost(r, OpKind::B), least_cost(r, OpKind::BW));
      chain += least_cost(r, OpKind::F) + (fused_backward ? least_cost(r, OpKind::BW) : input_grad);
      if (const int next = g + 1 < groups ? where.rank_of_group(g + 1) : r; next != r)
        chain += transfer(r, next) + transfer(next, r);
    }
    busiest = std::max(busiest, chain);
  }
  const AfterPipeline after = after_pipeline(costs, plan, execution);
  b.iteration_time = busiest + after.data_parallel + after.optimizer;
  return b;
}

namespace {

// A cheap screen for equal plans (ParallelPlan's == decides): the settings a search varies most.
std::uint64_t settings_hash(const spec::ParallelPlan& p) {
  Fnv1a h;
  const auto mix = [&](std::int64_t v) { h.add(static_cast<std::uint64_t>(v)); };
  for (const int v :
       {p.tp, p.pp, p.dp, p.ep, p.chunks, p.micro_batch_size, p.microbatches,
        static_cast<int>(p.vocab), static_cast<int>(p.recompute), p.zero_stage, p.group_size,
        p.slices, p.moe_chunks, p.moe_a2a_node_ranks, static_cast<int>(p.rank_order),
        static_cast<int>(p.sequence_parallel), static_cast<int>(p.layered_reduction),
        static_cast<int>(p.sparse_embedding_gradient)})
    mix(v);
  for (const auto* list : {&p.layer_split, &p.node_group_order, &p.stage_tp}) {
    mix(static_cast<std::int64_t>(list->size()));
    for (const int v : *list) mix(v);
  }
  mix(static_cast<std::int64_t>(p.stage_recompute.size()));
  for (const spec::Recompute r : p.stage_recompute) mix(static_cast<int>(r));
  mix(static_cast<std::int64_t>(p.expert_layouts.size()));
  for (const spec::ExpertLayout l : p.expert_layouts) mix(static_cast<int>(l));
  return h.value();
}

}  // namespace

const OpCosts& PlanEvaluator::costs_for(const spec::ModelSpec& model,
                                        const spec::ClusterSpec& cluster,
                                        const spec::ParallelPlan& plan,
                                        schedule::Placement placement,
                                        const ExecutionOptions& execution) {
  if (!costs_context_ || std::get<0>(*costs_context_) != model ||
      std::get<1>(*costs_context_) != cluster || std::get<2>(*costs_context_) != execution) {
    costs_context_.emplace(model, cluster, execution);
    recent_costs_.clear();
    recent_passes_.clear();
  }
  // An offload variant's costs are its plan's with the copies and the optimizer step redone
  // (apply_offload): the search enumerates the variants a few plans after the plan.
  const spec::ParallelPlan unloaded = without_offload(plan);
  spec::ParallelPlan key = unloaded;
  key.schedule = spec::reduces_per_group(plan) ? "per-group" : "";
  const std::uint64_t hash = settings_hash(key);
  const CostsEntry* kept = recent_costs_.find([&](const CostsEntry& e) {
    return e.hash == hash && e.placement == placement && e.plan == key;
  });
  if (!kept) {
    // The passes of the plan at any ZeRO stage: a search prices the stages one after another.
    spec::ParallelPlan passes_key = key;
    passes_key.zero_stage = 0;
    const std::uint64_t passes_hash = settings_hash(passes_key);
    const std::vector<StageParameters>& params = stage_parameters_.get(model, unloaded, placement);
    const PassesEntry* passes = recent_passes_.find([&](const PassesEntry& e) {
      return e.hash == passes_hash && e.placement == placement && e.plan == passes_key;
    });
    if (!passes)
      passes =
          &recent_passes_.add({std::move(passes_key), passes_hash, placement,
                               pass_costs(model, cluster, unloaded, placement, execution, params)});
    kept = &recent_costs_.add_with([&](CostsEntry& e) {
      op_costs(e.costs, passes->passes, model, cluster, unloaded, execution, params);
      e.plan = std::move(key);
      e.hash = hash;
      e.placement = placement;
      e.serial = ++next_serial_;
    });
  }
  if (!plan.offload_activations && !plan.offload_optimizer) return kept->costs;
  // The variants of one plan come one after another: each is the last one undone and redone.
  if (offloaded_from_ == kept->serial) {
    undo_offload(offloaded_costs_, kept->costs);
  } else {
    offloaded_costs_ = kept->costs;
    offloaded_from_ = kept->serial;
  }
  apply_offload(offloaded_costs_, plan, cluster.hardware, execution);
  return offloaded_costs_;
}

namespace {

// What a cost-aware generator reads of its cost table (schedule::uses_costs): each stage's op
// costs and slowdown, the transfers, the barriers' collective and the W pass's share of the
// activations. Plans that differ only in the rest (ZeRO-1's optimizer shards, offload copies, the
// data-parallel reduction) get the same order.
std::vector<double> planning_inputs(const schedule::CostTable& costs) {
  std::vector<double> key;
  key.reserve(costs.stages.size() * (schedule::kOpKindCount + 1) + costs.pair_transfer.size() + 5);
  for (const schedule::StageCosts& st : costs.stages) {
    key.insert(key.end(), st.op.begin(), st.op.end());
    key.push_back(st.slowdown);
  }
  key.insert(key.end(), {costs.p2p_latency, costs.p2p_bytes, costs.p2p_bandwidth,
                         costs.collective_time, costs.w_free_fraction});
  key.insert(key.end(), costs.pair_transfer.begin(), costs.pair_transfer.end());
  return key;
}

}  // namespace

PlanEvaluator::ScheduleKey PlanEvaluator::schedule_key(const schedule::GeneratorParams& params,
                                                       std::vector<double> planning) {
  return {params.name,
          params.stages,
          params.microbatches,
          params.chunks,
          params.group_size,
          static_cast<int>(params.vocab),
          params.memory_limit,
          params.skip_ratio.value_or(-1.0),
          params.layered_reduction,
          std::move(planning)};
}

std::optional<double> PlanEvaluator::transformer_bound(const spec::ModelSpec& model_in,
                                                       const spec::ClusterSpec& cluster,
                                                       const spec::ParallelPlan& plan_in) {
  if (plan_in.vocab != schedule::VocabMode::Vocab1 && plan_in.vocab != schedule::VocabMode::Vocab2)
    return std::nullopt;
  const Checked c = checked(model_in, cluster, plan_in);
  const spec::ParallelPlan& plan = c.plan;
  const ExecutionOptions& execution = c.execution;
  const OpCosts& costs = costs_for(c.model, cluster, plan, c.placement, execution);
  schedule::GeneratorParams params =
      spec::generator_params(plan, costs.table, options_.schedule_memory_limit);
  // The order of a shape, kept by this evaluator, and found once for all of a search's.
  SimulationCache* cache = options_.simulation_cache.get();
  ScheduleKey key = schedule_key(params, {});
  auto it = transformer_schedules_.find(key);
  if (it == transformer_schedules_.end()) {
    if (transformer_schedules_.size() >= kMaxCachedSchedules) transformer_schedules_.clear();
    auto ops = cache != nullptr ? cache->transformer_ops(params)
                                : std::make_shared<const std::optional<schedule::Schedule>>(
                                      schedule::transformer_ops_schedule(params));
    it = transformer_schedules_.emplace(std::move(key), std::move(ops)).first;
  }
  const std::optional<schedule::Schedule>& ops = *it->second;
  if (!ops) return std::nullopt;
  // Simulated under a name of its own: the order is not the schedule's.
  params.name += " (transformer ops)";
  const sim::SimResult r = run_simulation(params, costs, &*ops);
  const AfterPipeline after = after_pipeline(costs, plan, execution);
  return r.iteration_time + after.data_parallel + after.optimizer;
}

const schedule::Schedule& PlanEvaluator::schedule_for(const schedule::GeneratorParams& params,
                                                      schedule::Schedule& scratch) {
  // Token slices (their lengths chosen per plan) are not cached.
  if (schedule::supports_slices(params.name)) {
    scratch = schedule::generate(params);
    return scratch;
  }
  const bool planned = schedule::uses_costs(params.name, params.vocab);
  ScheduleKey key =
      schedule_key(params, planned ? planning_inputs(params.costs) : std::vector<double>{});
  if (planned) {
    // The most recently used first out: the plans that share an order are scored near each
    // other (their bounds are near), seldom all of them at once.
    const auto it = std::find_if(planned_schedules_.begin(), planned_schedules_.end(),
                                 [&](const auto& e) { return e.first == key; });
    if (it != planned_schedules_.end()) {
      std::rotate(it, std::next(it), planned_schedules_.end());
      return planned_schedules_.back().second;
    }
    if (planned_schedules_.size() >= kMaxPlannedSchedules)
      planned_schedules_.erase(planned_schedules_.begin());
    planned_schedules_.emplace_back(std::move(key), schedule::generate(params));
    return planned_schedules_.back().second;
  }
  auto it = schedules_.find(key);
  if (it == schedules_.end()) {
    if (schedules_.size() >= kMaxCachedSchedules) schedules_.clear();
    it = schedules_.emplace(std::move(key), FixedOrder{schedule::generate(params), 0}).first;
  }
  // Each ask simulates the order under another cost table. Asked for a sixth time, it is
  // recorded (which takes most of an execution), and the simulations from then on, often many
  // (an exhaustive search asks for an order tens of times), replay it instead; the default
  // search asks for most orders a few times, where recording would cost more than it saves.
  FixedOrder& f = it->second;
  if (++f.asks == 6)
    f.schedule.execution_order = std::make_shared<const schedule::ExecutionOrder>(
        schedule::record_execution_order(f.schedule));
  return f.schedule;
}

sim::SimResult PlanEvaluator::run_simulation(const schedule::GeneratorParams& params,
                                             const OpCosts& costs,
                                             const schedule::Schedule* order) {
  // A recorded trace (of the plan's own schedule) is never cached: the cache keeps summaries.
  const bool record = options_.record_trace && order == nullptr;
  SimulationCache* cache = record ? nullptr : options_.simulation_cache.get();
  std::string key;
  std::optional<sim::SimResult> cached;
  if (cache != nullptr) {
    key = SimulationCache::key(params, costs.table, costs.activation_bytes_per_microbatch);
    cached = cache->find(key);
  }
  if (cached) return std::move(*cached);
  schedule::Schedule scratch;
  const schedule::Schedule& s = order != nullptr ? *order : schedule_for(params, scratch);
  sim::SimOptions sim_options;
  sim_options.record_trace = record;
  sim_options.activation_bytes_per_microbatch = costs.activation_bytes_per_microbatch;
  sim_options.structure_checked = true;  // generate() and transformer_ops_schedule check theirs
  sim::SimResult r = sim::simulate(s, costs.table, sim_options);
  if (cache != nullptr) cache->insert(std::move(key), r);
  return r;
}

PlanEvaluation PlanEvaluator::evaluate(const spec::ModelSpec& model_in,
                                       const spec::ClusterSpec& cluster,
                                       const spec::ParallelPlan& plan_in) {
  Checked c = checked(model_in, cluster, plan_in);
  const spec::ModelSpec& model = c.model;
  spec::ParallelPlan& plan = c.plan;  // terapipe's chosen slices are written into it

  PlanEvaluation e;
  e.placement = c.placement;
  const ExecutionOptions& execution = c.execution;
  const MemoryModelOptions memory = memory_for(cluster);
  const int world = plan.world_size();
  const double tokens = static_cast<double>(plan.global_batch) * static_cast<double>(model.seq_len);
  e.model_flops = tokens * model_flops_per_token(model);
  e.hardware_flops =
      tokens * hardware_flops_per_token(model, plan, layers_on_ranks(model, plan, e.placement));

  if (options_.skip_simulation_when_static_memory_exceeds) {
    const std::vector<double> none(static_cast<std::size_t>(plan.pp), 0.0);
    MemoryEstimate fixed = estimate_memory(stage_parameters_.get(model, plan, e.placement), cluster,
                                           plan, none, memory);
    if (!fixed.fits()) {
      e.memory = std::move(fixed);
      e.feasible = false;
      e.infeasible_reason = e.memory.binding_constraint() + " before any activations";
      return e;
    }
  }

  e.costs = costs_for(model, cluster, plan, e.placement, execution);
  slicings_.choose(plan, model.seq_len, e.costs.table);  // terapipe without given slices
  e.slice_tokens = plan.slice_tokens;

  schedule::GeneratorParams params =
      spec::generator_params(plan, e.costs.table, options_.schedule_memory_limit);
  // The simulation runs the schedule through execute(), which proves it free of deadlock (or
  // throws DeadlockError): the generator need not run it once more to prove it.
  params.prove_deadlock_free = false;
  sim::SimResult r = run_simulation(params, e.costs);
  e.simulated = true;
  if (schedule::skips_stages(plan.schedule)) {
    // Partial pipelining: a micro-batch runs the layers of the stages on its path only. The FLOPs
    // (and so MFU) count the work done: scaled by the share of the transformer layers run.
    schedule::Schedule scratch;
    const schedule::Schedule& s = schedule_for(params, scratch);  // the one simulated, cached
    const std::vector<int> split = spec::layer_split(model, plan);
    double run = 0.0, all = 0.0;
    for (int mb = 0; mb < s.microbatches; ++mb)
      for (int g = 0; g < s.groups(); ++g) {
        all += split[static_cast<std::size_t>(g)];
        if (s.visits(g, mb)) run += split[static_cast<std::size_t>(g)];
      }
    if (all > 0.0) {
      e.model_flops *= run / all;
      e.hardware_flops *= run / all;
    }
  }
  if (options_.record_trace) e.trace = std::move(r.trace);
  e.pipeline_time = r.iteration_time;
  e.bubble_ratio = r.bubble_ratio;

  const AfterPipeline after = after_pipeline(e.costs, plan, execution);
  e.data_parallel_time = after.data_parallel;
  e.optimizer_time = after.optimizer;
  // Device: the simulated peak of what stays (offloaded units excluded) plus the transient
  // logits; host: the simulated peak of what the offload copies moved there.
  std::vector<double> peaks(static_cast<std::size_t>(plan.pp), 0.0);
  std::vector<double> host_peaks(static_cast<std::size_t>(plan.pp), 0.0);
  for (int i = 0; i < plan.pp; ++i) {
    const auto k = static_cast<std::size_t>(i);
    peaks[k] =
        std::max(0.0, r.stages[k].peak_activation_bytes) + e.costs.transient_activation_bytes[k];
    host_peaks[k] = std::max(0.0, r.stages[k].peak_host_activation_bytes);
  }
  e.iteration_time = e.pipeline_time + e.data_parallel_time + e.optimizer_time;
  // The simulator's bound, on the whole iteration.
  schedule::check_schedule_time(e.iteration_time, "a predicted iteration time");
  e.stages = std::move(r.stages);

  set_throughput(e, tokens, world, cluster.hardware.peak_flops);
  e.expected_iteration_time =
      expected_iteration_time(e.iteration_time, world, plan.dp, options_.failures);
  if (e.expected_iteration_time > 0.0) e.expected_tokens_per_s = tokens / e.expected_iteration_time;
  e.memory = estimate_memory(stage_parameters_.get(model, plan, e.placement), cluster, plan, peaks,
                             memory, host_peaks);
  e.feasible = e.memory.fits();
  if (!e.feasible) e.infeasible_reason = e.memory.binding_constraint();
  // Restarts that come faster than an iteration can end: the expectation grows as exp(mu T).
  if (e.feasible && !(e.expected_iteration_time < schedule::kMaxScheduleTime)) {
    e.feasible = false;
    e.infeasible_reason = std::string(kFailuresOutpaceIterations);
  }
  return e;
}

PlanEvaluation evaluate_plan(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                             const spec::ParallelPlan& plan, const EvaluateOptions& options) {
  PlanEvaluator evaluator(options);
  return evaluator.evaluate(model, cluster, plan);
}

}  // namespace pipetune::tuner
