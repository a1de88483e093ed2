#include "tuner/sim/simulator.hpp"

#include "engine/schedule/group_holds.hpp"
#include "engine/schedule/span_kinds.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "engine/errors.hpp"
#include "engine/schedule/execution_order.hpp"
#include "engine/schedule/executor.hpp"
#include "engine/schedule/planned_time.hpp"
#include "engine/schedule/validator.hpp"
#include "tuner/sim/unit_ledger.hpp"

namespace pipetune::sim {

using schedule::CostTable;
using schedule::Event;
using schedule::Op;
using schedule::OpKind;
using schedule::Requirement;
using schedule::Schedule;

namespace {

std::int64_t to_ns(double seconds) {
  schedule::check_schedule_time(seconds, "a simulated time");
  return static_cast<std::int64_t>(std::llround(seconds * 1e9));
}

profiler::SpanKind span_kind(OpKind k) {
  return schedule::span_kind_of(k);
}

// One copy on a copy stream (seconds).
struct Copy {
  double start = 0.0, end = 0.0;
};

// A rank whose stage offloads its activations: its copy streams and where its units are.
struct OffloadingRank {
  double copy = 0.0;  // seconds of one chunk's copy, each way
  double offload_free = 0.0, reload_free = 0.0;
  double previous_start = 0.0;  // start of the rank's previous op: reloads prefetch from there
  double stall = 0.0;
  // Per (micro-batch, chunk), micro-batch major: when its offload ends; negative = kept.
  std::vector<double> offload_end;
  detail::UnitLedger units;
  std::int32_t lane[2] = {0, 0};  // trace lanes: offload (device->host), reload (host->device)
};

// Assigns times to ops in the order the executor makes them runnable.
class TimingHooks {
 public:
  TimingHooks(const Schedule& s, const CostTable& costs, const SimOptions& options,
              SimResult& result)
      : s_(s), costs_(costs), options_(options), result_(result) {
    const auto p = static_cast<std::size_t>(s.stages);
    compute_free_.assign(p, 0.0);
    comm_free_.assign(p, 0.0);
    busy_.assign(p, 0.0);
    comm_busy_.assign(p, 0.0);
    reduce_free_.assign(p, 0.0);
    reduce_busy_.assign(p, 0.0);

    units_.assign(p, 0.0);
    peak_units_.assign(p, 0.0);
    ops_.assign(p, 0);
    overlap_hidden_.assign(p, 0.0);
    p2p_time_ = costs.p2p_time();
    // Per-stage layouts: each pair's resharded transfer, [source * stages + dest] as in the
    // table (empty for uniform layouts; its size is checked by check_costs in simulate()).
    pair_transfer_ = costs.pair_transfer;
    const double v = static_cast<double>(s.chunks);
    forward_units_ = 1.0 / v;
    b_free_units_ = (1.0 - costs.w_free_fraction) / v;
    w_free_units_ = costs.w_free_fraction / v;
    // Per-(rank, kind) cost lookups are hot: cache them flat.
    cost_.resize(p * schedule::kOpKindCount);
    for (std::size_t r = 0; r < p; ++r)
      for (OpKind k : schedule::kAllOpKinds)
        cost_[r * schedule::kOpKindCount + static_cast<std::size_t>(k)] =
            costs.cost(static_cast<int>(r), k) * pass_factor(static_cast<int>(r), k);
    fault_stall_.assign(p, 0.0);
    for (const schedule::StageCosts& st : costs.stages) failures_ = failures_ || st.fails();
    // Only a re-routing pool with failures runs at a changing pace (fail_over).
    if (failures_ && costs.reroute_pool >= 2)
      for (const schedule::StageCosts& st : costs.stages) pool_changes_.push_back(pool_changes(st));
    // ZeRO-3 under layer-group reductions: the ops that start a run gather its group's values.
    for (const schedule::StageCosts& st : costs.stages)
      if (st.run_gather > 0.0) {
        run_starts_.resize(p);
        for (std::size_t r = 0; r < p; ++r)
          run_starts_[r] = schedule::group_holds(s.ranks[r], s.chunks).gather_before;
        break;
      }
    if (s.slices > 1) set_up_slices();
    set_up_offload();
    plain_ = !options.record_trace && offloading_.empty() && !failures_ && run_starts_.empty() &&
             s.slices == 1;
    if (options.record_trace) {
      auto& t = result.trace;
      t.kind = profiler::TraceKind::Simulated;
      compute_lane_.resize(p);
      comm_lane_.resize(p);
      p2p_lane_.resize(p);
      for (int r = 0; r < s.stages; ++r) {
        compute_lane_[static_cast<std::size_t>(r)] = t.lane(r, profiler::Stream::Compute);
      }
      for (int r = 0; r < s.stages; ++r) {
        comm_lane_[static_cast<std::size_t>(r)] = t.lane(r, profiler::Stream::Comm);
        p2p_lane_[static_cast<std::size_t>(r)] = t.lane(r, profiler::Stream::P2P);
      }
      if (schedule::reduces_per_group(s)) {
        reduce_lane_.resize(p);
        for (int r = 0; r < s.stages; ++r)
          reduce_lane_[static_cast<std::size_t>(r)] = t.lane(r, profiler::Stream::Comm, 1);
      }
      for (std::size_t r = 0; r < offloading_.size(); ++r) {
        if (!(offloading_[r].copy > 0.0)) continue;
        offloading_[r].lane[0] = t.lane(static_cast<int>(r), profiler::Stream::Offload, 0);
        offloading_[r].lane[1] = t.lane(static_cast<int>(r), profiler::Stream::Offload, 1);
      }
      activation_counter_ = t.intern("activations (micro-batches)");
      if (!offloading_.empty()) host_counter_ = t.intern("activations on host (micro-batches)");
      lane_spans_.resize(t.lanes.size());  // after every lane exists
      for (int r = 0; r < s.stages; ++r)
        lane_spans_[static_cast<std::size_t>(compute_lane_[static_cast<std::size_t>(r)])].reserve(
            s.ranks[static_cast<std::size_t>(r)].size());
      t.counters.reserve(s.op_count() + p);
      if (!options.activation_bytes_per_microbatch.empty()) t.memory.reserve(s.op_count() + p);
    }
  }

  double op(int rank, std::size_t index, const Op& op, const Requirement& req, double req_time) {
    if (schedule::is_reduction(op.kind)) return reduce(rank, op);
    if (plain_) {
      // arrival() and run() where nothing but the compute stream and the activations is kept:
      // the same sums in the same order, without asking what this run does not have per op.
      double ready = req_time;
      if (req.present && req.transfer) ready += hop_time(req.source_rank, rank);
      return plain_op(rank, op.kind, ready);
    }
    const double ready = arrival(rank, op, req, req_time);
    double duration = s_.slices > 1 ? slice_cost_of(rank, op) : cost_of(rank, op.kind);
    if (!run_starts_.empty() && run_starts_[static_cast<std::size_t>(rank)][index])
      duration += costs_.stages[static_cast<std::size_t>(rank)].run_gather;
    return run(rank, index, op, ready, duration);
  }

  // A run on the short path (no trace, offload, failures, gathers or token slices) of lists that
  // carry what their generator planned or an order they were recorded in, for these very lists:
  // timed without executing them (time_as_planned, replay). False, with nothing timed, otherwise.
  bool timed_without_executing() {
    const schedule::PlannedTime* planned = s_.planned_time.get();
    const schedule::ExecutionOrder* order = s_.execution_order.get();
    if (!plain_ || (planned == nullptr && order == nullptr)) return false;
    const std::uint64_t lists = schedule::op_fingerprint(s_);
    if (planned != nullptr && planned->fingerprint == lists && time_as_planned(*planned))
      return true;
    if (order == nullptr || order->fingerprint != lists || order->has_pairs) return false;
    replay(*order);
    finish();
    return true;
  }

 private:
  // The time its generator planned (schedule::PlannedTime), under this run's costs, without
  // per-pair transfers: the planned iteration is the one execute() would
  // find (each op at the latest of its rank's op before and its input, each barrier at its last
  // arrival), so only the short path's per-op sums are run, in each rank's order as execute()
  // runs them. False, with nothing summed, otherwise.
  bool time_as_planned(const schedule::PlannedTime& planned) {
    if (!pair_transfer_.empty() || planned.costs != cost_ || planned.p2p != p2p_time_ ||
        planned.collective != costs_.collective_time)
      return false;
    // (Lists with reductions or pairs carry no planned time: set_planned_time.)
    const auto p = static_cast<std::size_t>(s_.stages);
    for (std::size_t r = 0; r < p; ++r)
      for (const Op& op : s_.ranks[r]) account(r, op.kind, cost_of(static_cast<int>(r), op.kind));
    // Each barrier (every rank joins each once) adds its time to every rank's stream, as
    // barrier() does.
    std::size_t barriers = 0;
    for (const Op& op : s_.ranks[0])
      if (schedule::production_of(s_, 0, op).joins_barrier) ++barriers;
    for (std::size_t r = 0; r < p; ++r)
      for (std::size_t i = 0; i < barriers; ++i) comm_busy_[r] += costs_.collective_time;
    finish(planned.iteration);
    return true;
  }

  // The ops in a recorded order (schedule::ExecutionOrder), each timed as op() and barrier() time
  // it when execute() runs it: an op's times depend only on its rank's ops before it and its
  // input, which the order has timed before it, so they are the same to the last bit.
  void replay(const schedule::ExecutionOrder& order) {
    using Step = schedule::ExecutionStep;
    std::vector<double> time(order.events, 0.0);  // events; a barrier's latest arrival till it runs
    const auto per_kind =
        static_cast<std::size_t>(s_.groups()) * static_cast<std::size_t>(s_.microbatches);
    for (const Step& st : order.steps) {
      if ((st.flags & Step::kWait) != 0) {
        wait(st.rank, time[static_cast<std::size_t>(st.input)]);
        continue;
      }
      if (schedule::is_reduction(st.kind)) {
        reduce(st.rank, Op{st.kind, 0, 0});
        continue;
      }
      double ready = st.input >= 0 ? time[static_cast<std::size_t>(st.input)] : 0.0;
      if ((st.flags & Step::kTransfer) != 0) {
        // A transfer carries a forward or backward event: its group's rank sent it.
        const int source =
            pair_transfer_.empty()
                ? 0
                : s_.rank_of_group(static_cast<int>(static_cast<std::size_t>(st.input) % per_kind /
                                                    static_cast<std::size_t>(s_.microbatches)));
        ready += hop_time(source, st.rank);
      }
      const double end = plain_op(st.rank, st.kind, ready);
      if (st.output < 0) continue;
      double& out = time[static_cast<std::size_t>(st.output)];
      if ((st.flags & Step::kJoinsBarrier) == 0) {
        out = end;
        continue;
      }
      out = std::max(out, end);  // EventTimes::arrive
      if ((st.flags & Step::kCompletesBarrier) != 0) out = barrier(Event{}, out);
    }
  }

 public:
  // An overlapped pair (simulator.hpp): both start once both inputs are there; each op's
  // communication hides behind the other's compute.
  std::array<double, 2> pair(int rank, std::size_t index, const Op& first,
                             const Requirement& first_req, double first_time, const Op& second,
                             const Requirement& second_req, double second_time) {
    const double ready = std::max(arrival(rank, first, first_req, first_time),
                                  arrival(rank, second, second_req, second_time));
    const double c1 = cost_of(rank, first.kind), c2 = cost_of(rank, second.kind);
    const double k1 = costs_.comm(rank, first.kind), k2 = costs_.comm(rank, second.kind);
    const double hidden1 = std::min(k1, c2 - k2), hidden2 = std::min(k2, c1 - k1);
    overlap_hidden_[static_cast<std::size_t>(rank)] += hidden1 + hidden2;
    // Both spans are named after the pair ("F3.0&BW1.1"): the trace says which ops ran together.
    if (options_.record_trace) pair_name_ = pair_name(first, second);
    const double end1 = run(rank, index, first, ready, c1 - hidden1);
    const double end2 = run(rank, index + 1, second, ready, c2 - hidden2);
    pair_name_ = 0;
    return {end1, end2};
  }

 private:
  // The trace's name of a pair, interned here: Trace::intern scans the names, and a DualPipeV
  // iteration has a pair per micro-batch and chunk on every rank.
  std::uint32_t pair_name(const Op& first, const Op& second) {
    std::string label = schedule::pair_label(first, second);
    const auto it = pair_names_.find(label);
    if (it != pair_names_.end()) return it->second;
    auto& names = result_.trace.names;
    names.push_back(label);
    const auto id = static_cast<std::uint32_t>(names.size() - 1);
    pair_names_.emplace(std::move(label), id);
    return id;
  }

  // Token slices (Schedule::slices): each slice's op costs (CostTable::slice_cost), its share of
  // a transfer's bytes, and of a micro-batch's activations, by slice.
  void set_up_slices() {
    const auto p = static_cast<std::size_t>(s_.stages), k = static_cast<std::size_t>(s_.slices);
    slice_cost_.resize(p * schedule::kOpKindCount * k);
    slice_length_.resize(k);
    const std::vector<schedule::SliceShape> shapes =
        schedule::slice_shapes(s_.slices, s_.slice_tokens);
    for (std::size_t j = 0; j < k; ++j) {
      const schedule::SliceShape shape = shapes[j];
      slice_length_[j] = shape.length;
      for (std::size_t r = 0; r < p; ++r)
        for (OpKind kind : schedule::kAllOpKinds)
          slice_cost_[(r * schedule::kOpKindCount + static_cast<std::size_t>(kind)) * k + j] =
              costs_.slice_cost(static_cast<int>(r), kind, shape) *
              pass_factor(static_cast<int>(r), kind);
    }
  }

  double slice_cost_of(int rank, const Op& op) const {
    const auto k = static_cast<std::size_t>(s_.slices);
    return slice_cost_[(static_cast<std::size_t>(rank) * schedule::kOpKindCount +
                        static_cast<std::size_t>(op.kind)) *
                           k +
                       static_cast<std::size_t>(s_.slice_of(op.microbatch))];
  }

  // The fraction of a micro-batch's tokens an op's unit carries: 1 without token slices.
  double tokens_of(const Op& op) const {
    return s_.slices > 1 ? slice_length_[static_cast<std::size_t>(s_.slice_of(op.microbatch))]
                         : 1.0;
  }

  double cost_of(int rank, OpKind kind) const {
    return cost_[static_cast<std::size_t>(rank) * schedule::kOpKindCount +
                 static_cast<std::size_t>(kind)];
  }

  // A layer group's gradient reduction (OpKind::R): on the rank's reduction stream, from the end
  // of the op before it (its weight gradients are complete) once the stream is free. The compute
  // stream goes on beside it.
  double reduce(int rank, const Op& op) {
    const auto r = static_cast<std::size_t>(rank);
    const double duration = cost_of(rank, OpKind::R);
    // Held gradients: the rank waits for its previous R before handing this one's out.
    if (costs_.held_reductions) compute_free_[r] = std::max(compute_free_[r], reduce_free_[r]);
    const double start = std::max(compute_free_[r], reduce_free_[r]);
    const double end = start + duration;
    reduce_free_[r] = end;
    reduce_busy_[r] += duration;
    ++ops_[r];
    // Recorded even when free (a group of one): the trace shows every op of the schedule, as the
    // engine's does, so that a prediction and a measurement pair R for R.
    if (options_.record_trace) {
      profiler::Span span;
      span.lane = reduce_lane_[r];
      span.kind = schedule::span_kind_of(op.kind);
      span.chunk = op.chunk;
      span.start_ns = to_ns(start);
      span.end_ns = to_ns(end);
      lane_spans_[static_cast<std::size_t>(span.lane)].push_back(span);
    }
    return end;
  }

  // Unreliable peers: what a stage's slowdown makes of its passes' costs. Alone, a slow device
  // takes `slowdown` times as long; in a re-routing pool of n the others take more of its
  // micro-batches, the pool running at n / (n - 1 + 1 / slowdown) of its usual rate.
  double pass_factor(int rank, OpKind kind) const {
    if (schedule::is_reduction(kind)) return 1.0;
    const schedule::StageCosts& st = costs_.stages[static_cast<std::size_t>(rank)];
    const double s = st.slowdown;
    if (s == 1.0) return 1.0;
    const double n = costs_.reroute_pool;
    const double k = std::min<double>(st.slow_replicas, n);
    return n >= 2.0 ? n / (n - k + k / s) : s;
  }

  // Whether a failure of the stage is re-routed: a pool, with replicas left.
  bool rerouted(const schedule::StageCosts& st) const {
    return costs_.reroute_pool >= 2 && st.most_replicas_down() < costs_.reroute_pool;
  }

  // Re-routing: how many of the stage's replicas are down from each time on, in order of time
  // (a failure's replicas go down at its time and come back after its restart delay; at one
  // instant the returns count before the failures).
  struct PoolChange {
    double at = 0.0;
    int down = 0;
  };
  static std::vector<PoolChange> pool_changes(const schedule::StageCosts& st) {
    std::vector<std::pair<double, int>> events;  // (time, replicas down (+) or back (-))
    for (const schedule::StageCosts::Failure& f : st.failures) {
      if (f.new_replicas == 0 || !(f.restart_delay > 0.0)) continue;
      events.emplace_back(f.at, f.new_replicas);
      events.emplace_back(f.at + f.restart_delay, -f.new_replicas);
    }
    std::sort(events.begin(), events.end());  // a return (-) before a failure at one time
    std::vector<PoolChange> out;
    int down = 0;
    for (const auto& [at, delta] : events) {
      down += delta;
      if (!out.empty() && out.back().at == at)
        out.back().down = down;
      else
        out.push_back({at, down});
    }
    return out;
  }

  // The failures on the op's stage (simulator.hpp), given where the op would start and how long
  // it would take: they move and stretch them, and count what they lose.
  void fail_over(int rank, double& start, double& duration) {
    const auto r = static_cast<std::size_t>(rank);
    const schedule::StageCosts& st = costs_.stages[r];
    if (!st.fails()) return;
    if (!rerouted(st)) {
      // Down, or in flight when it failed (its work is lost): run after the restart. The
      // failures are in order of time, so a later one can catch the op where an earlier one
      // moved it.
      for (const schedule::StageCosts::Failure& f : st.failures) {
        const double up = f.at + f.restart_delay;
        if (start < up && start + duration > f.at) {
          fault_stall_[r] += up - start;
          start = up;
        }
      }
      return;
    }
    // Re-routing: while k of the pool's n replicas are down it runs at (n - k) / n of its pace.
    // An op in flight when more go down runs again on the others from then (its work so far is
    // lost); one in flight when some come back goes on at the faster pace.
    const std::vector<PoolChange>& changes = pool_changes_[r];
    const double n = costs_.reroute_pool, base = duration;
    std::size_t i = 0;
    int k = 0;
    for (; i < changes.size() && changes[i].at <= start; ++i) k = changes[i].down;
    double t = start, remaining = base;  // `remaining`: seconds of work at the full pool's pace
    for (; i < changes.size(); ++i) {
      const double pace = (n - k) / n;
      if (t + remaining / pace <= changes[i].at) break;  // done before the pool changes
      const PoolChange& c = changes[i];
      if (c.down > k) {
        fault_stall_[r] += c.at - start;
        start = c.at;
        remaining = base;
      } else {
        remaining -= (c.at - t) * pace;
      }
      t = c.at;
      k = c.down;
    }
    duration = t + remaining * n / (n - k) - start;
  }

  // Runs one op of `duration` on the rank's compute stream once it is free and `ready` has come.
  double run(int rank, std::size_t index, const Op& op, double ready, double duration) {
    const auto r = static_cast<std::size_t>(rank);
    if (!offloading_.empty() && offloading_[r].copy > 0.0)
      return offloading_op(rank, index, op, ready, duration);
    double start = std::max(compute_free_[r], ready);
    if (failures_) fail_over(rank, start, duration);
    const double end = start + duration;
    compute_free_[r] = end;
    busy_[r] += duration;
    ++ops_[r];

    // Activations: an F allocates as it starts; B/W/BW free as they end.
    const double delta = unit_delta(op.kind) * tokens_of(op);
    const double at = op.kind == OpKind::F ? start : end;
    if (delta != 0.0) {
      units_[r] += delta;
      if (units_[r] > peak_units_[r]) peak_units_[r] = units_[r];
    }
    if (options_.record_trace) {
      record_compute(rank, op, start, end);
      if (delta != 0.0) record_memory(rank, at, units_[r]);
    }
    return end;
  }

 public:
  double barrier(const Event&, double last_arrival) {
    double start = last_arrival;
    for (double f : comm_free_) start = std::max(start, f);
    const double end = start + costs_.collective_time;
    for (std::size_t r = 0; r < comm_free_.size(); ++r) {
      comm_free_[r] = end;
      comm_busy_[r] += costs_.collective_time;
      if (options_.record_trace && costs_.collective_time > 0.0) {
        profiler::Span span;
        span.lane = comm_lane_[r];
        span.kind = profiler::SpanKind::AllReduce;
        span.start_ns = to_ns(start);
        span.end_ns = to_ns(end);
        lane_spans_[static_cast<std::size_t>(span.lane)].push_back(span);
      }
    }
    return end;
  }

  void wait(int rank, double until) {
    auto& f = compute_free_[static_cast<std::size_t>(rank)];
    f = std::max(f, until);
  }

  void finish() {
    double makespan = 0.0;
    for (int r = 0; r < s_.stages; ++r) {
      makespan = std::max(makespan, compute_free_[static_cast<std::size_t>(r)]);
      makespan = std::max(makespan, comm_free_[static_cast<std::size_t>(r)]);
      makespan = std::max(makespan, reduce_free_[static_cast<std::size_t>(r)]);
    }
    finish(makespan);
  }

  void finish(double makespan) {
    const int p = s_.stages;
    // Every time of the run (busy, bubble, each op's end) is at most the makespan: bounded here,
    // with or without a trace, as the trace's times are. (A copy ends before the B it serves.)
    schedule::check_schedule_time(makespan, "a simulated time");
    result_.iteration_time = makespan;
    result_.stages.resize(static_cast<std::size_t>(p));
    double bubble_sum = 0.0;
    for (int r = 0; r < p; ++r) {
      const StageSummary& st = summarise_stage(r, makespan);
      bubble_sum += st.bubble;
      result_.op_count += st.ops;
    }
    result_.bubble_ratio = makespan > 0.0 ? bubble_sum / (makespan * p) : 0.0;
    if (options_.record_trace && failures_) record_failures(makespan);
    if (options_.record_trace) merge_lane_spans();
  }

 private:
  // Copy streams for the stages that offload. Only a plan that offloads pays for their state.
  void set_up_offload() {
    const auto& stages = costs_.stages;
    const bool any = std::any_of(stages.begin(), stages.end(),
                                 [](const schedule::StageCosts& c) { return c.offload > 0.0; });
    if (!any) return;
    offloading_.resize(stages.size());
    for (std::size_t r = 0; r < stages.size(); ++r) {
      OffloadingRank& o = offloading_[r];
      o.copy = stages[r].offload;
      if (o.copy > 0.0)
        o.offload_end.assign(static_cast<std::size_t>(s_.microbatches * s_.chunks), -1.0);
    }
  }

  // One point-to-point transfer from `source` to `dest`, a whole micro-batch's.
  double hop_time(int source, int dest) const {
    return pair_transfer_.empty() ? p2p_time_
                                  : pair_transfer_[static_cast<std::size_t>(source) *
                                                       static_cast<std::size_t>(s_.stages) +
                                                   static_cast<std::size_t>(dest)];
  }

  // When the op's requirement is on this rank: at the source's time, plus one point-to-point
  // transfer when it comes from another rank (traced as a send on the source's lane).
  double arrival(int rank, const Op& op, const Requirement& req, double req_time) {
    if (!(req.present && req.transfer)) return req_time;
    double transfer = hop_time(req.source_rank, rank);
    // A token slice sends its share of the bytes; the latency is paid whole. (A per-stage
    // layout's resharded transfer is scaled whole: its table does not split the two.)
    if (s_.slices > 1) {
      const double latency = pair_transfer_.empty() ? std::min(costs_.p2p_latency, transfer) : 0.0;
      transfer = latency + (transfer - latency) * tokens_of(op);
    }
    const double ready = req_time + transfer;
    if (options_.record_trace && transfer > 0.0) {
      profiler::Span send;
      send.lane = p2p_lane_[static_cast<std::size_t>(req.source_rank)];
      send.kind = profiler::SpanKind::Send;
      send.microbatch = op.microbatch;
      send.peer = rank;
      send.start_ns = to_ns(req_time);
      send.end_ns = to_ns(ready);
      lane_spans_[static_cast<std::size_t>(send.lane)].push_back(send);
    }
    return ready;
  }

  // The short path: an op of `kind` on rank `rank` whose input is there at `ready`.
  double plain_op(int rank, OpKind kind, double ready) {
    const auto r = static_cast<std::size_t>(rank);
    const double duration = cost_of(rank, kind);
    // std::max's choice, on values (its references keep `ready` in memory).
    const double free = compute_free_[r];
    const double start = free < ready ? ready : free;
    const double end = start + duration;
    compute_free_[r] = end;
    account(r, kind, duration);
    return end;
  }

  // The short path's sums for an op of `duration` on rank r: its busy time, its count and the
  // activations it adds or frees.
  void account(std::size_t r, OpKind kind, double duration) {
    busy_[r] += duration;
    ++ops_[r];
    const double delta = unit_delta(kind);
    if (delta != 0.0) {
      const double held = units_[r] + delta;
      units_[r] = held;
      if (held > peak_units_[r]) peak_units_[r] = held;
    }
  }

  // Activation units an op adds (F, as it starts) or frees (B, W, BW, as they end).
  double unit_delta(OpKind kind) const {
    switch (kind) {
      case OpKind::F:
        return forward_units_;
      case OpKind::B:
        return -b_free_units_;
      case OpKind::W:
        return -w_free_units_;
      case OpKind::BW:
        return -forward_units_;
      default:
        return 0.0;
    }
  }

  // An op on a rank whose stage offloads (see simulator.hpp): its reload before a backward, its
  // offload after a forward, and the units they move, through the rank's ledger.
  double offloading_op(int rank, std::size_t index, const Op& op, double ready, double duration) {
    const auto r = static_cast<std::size_t>(rank);
    OffloadingRank& o = offloading_[r];
    const std::size_t slot =
        static_cast<std::size_t>(op.microbatch) * static_cast<std::size_t>(s_.chunks) +
        static_cast<std::size_t>(op.chunk);
    const double earliest = std::max(compute_free_[r], ready);
    double start = earliest;
    if (schedule::is_backward_input(op.kind) && o.offload_end[slot] >= 0.0) {
      Copy reload;
      reload.start = costs_.copies_block_compute
                         ? earliest
                         : std::max({o.reload_free, o.offload_end[slot], o.previous_start});
      reload.end = reload.start + o.copy;
      o.reload_free = reload.end;
      start = std::max(earliest, reload.end);
      o.stall += start - earliest;
      o.units.add(reload.start, forward_units_, -forward_units_);
      if (options_.record_trace) record_copy(o.lane[1], profiler::SpanKind::Reload, op, reload);
    }
    const double end = start + duration;
    compute_free_[r] = end;
    busy_[r] += duration;
    ++ops_[r];
    const double delta = unit_delta(op.kind);
    if (delta != 0.0) o.units.add(op.kind == OpKind::F ? start : end, delta, 0.0);
    if (op.kind == OpKind::F && !own_backward_follows(rank, index, op)) {
      Copy offload;
      offload.start = std::max(end, costs_.copies_block_compute ? end : o.offload_free);
      offload.end = offload.start + o.copy;
      o.offload_free = offload.end;
      if (costs_.copies_block_compute) {
        compute_free_[r] = offload.end;
        o.stall += o.copy;
      }
      o.offload_end[slot] = offload.end;
      o.units.add(offload.end, -forward_units_, forward_units_);
      if (options_.record_trace) record_copy(o.lane[0], profiler::SpanKind::Offload, op, offload);
    }
    if (options_.record_trace) record_compute(rank, op, start, end);
    // No later op starts before this one, and a later reload starts no earlier than this op.
    settle_units(rank, start);
    o.previous_start = start;
    return end;
  }

  // Whether the op after this F on the rank is its own backward: then its units stay (a copy
  // out and straight back would free nothing and stall the backward twice c).
  bool own_backward_follows(int rank, std::size_t index, const Op& f) const {
    const auto& ops = s_.ranks[static_cast<std::size_t>(rank)];
    if (index + 1 >= ops.size()) return false;
    const Op& next = ops[index + 1];
    return schedule::is_backward_input(next.kind) && next.microbatch == f.microbatch &&
           next.chunk == f.chunk;
  }

  void settle_units(int rank, double watermark) {
    const auto r = static_cast<std::size_t>(rank);
    offloading_[r].units.settle(watermark, [&](double t, double device, double host) {
      if (!options_.record_trace) return;
      record_memory(rank, t, device);
      result_.trace.counters.push_back({rank, host_counter_, to_ns(t), host});
    });
  }

  const StageSummary& summarise_stage(int rank, double makespan) {
    const auto i = static_cast<std::size_t>(rank);
    StageSummary& st = result_.stages[i];
    st.stage = rank;
    st.busy = busy_[i];
    st.bubble = std::max(0.0, makespan - busy_[i]);
    st.bubble_ratio = makespan > 0.0 ? st.bubble / makespan : 0.0;
    st.comm = comm_busy_[i];
    st.gradient_reduction = reduce_busy_[i];
    st.fault_stall = fault_stall_[i];
    st.exposed_gradient_reduction = std::max(0.0, reduce_free_[i] - compute_free_[i]);
    st.overlap_hidden = overlap_hidden_[i];
    st.peak_activation_microbatches = peak_units_[i];
    if (!offloading_.empty() && offloading_[i].copy > 0.0) {
      settle_units(rank, std::numeric_limits<double>::infinity());
      st.peak_activation_microbatches = offloading_[i].units.peak_device();
      st.peak_host_activation_microbatches = offloading_[i].units.peak_host();
      st.copy_stall = offloading_[i].stall;
    }
    if (!options_.activation_bytes_per_microbatch.empty()) {
      const double bytes = options_.activation_bytes_per_microbatch[i];
      st.peak_activation_bytes = st.peak_activation_microbatches * bytes;
      st.peak_host_activation_bytes = st.peak_host_activation_microbatches * bytes;
    }
    st.ops = ops_[i];
    return st;
  }

  void merge_lane_spans() {
    // Compute, barrier and copy spans arrive in time order per lane (each stream runs in order);
    // sends arrive in the order their consumers ran, so only those lanes may need sorting.
    auto& spans = result_.trace.spans;
    std::size_t total = 0;
    for (const auto& l : lane_spans_) total += l.size();
    spans.reserve(total);
    const auto by_start = [](const profiler::Span& a, const profiler::Span& b) {
      return a.start_ns < b.start_ns;
    };
    for (auto& l : lane_spans_) {
      if (!std::is_sorted(l.begin(), l.end(), by_start))
        std::stable_sort(l.begin(), l.end(), by_start);
      spans.insert(spans.end(), l.begin(), l.end());
    }
  }

  // Each failure's downtime as a span on its stage's compute lane (with re-routing there is none:
  // the ops go on, longer, on the other replicas).
  void record_failures(double makespan) {
    const std::uint32_t name = result_.trace.intern("failed: restarting");
    for (std::size_t r = 0; r < costs_.stages.size(); ++r) {
      const schedule::StageCosts& st = costs_.stages[r];
      if (rerouted(st)) continue;
      for (const schedule::StageCosts::Failure& f : st.failures) {
        if (f.at >= makespan || !(f.restart_delay > 0.0)) continue;
        profiler::Span span;
        span.lane = compute_lane_[r];
        span.kind = profiler::SpanKind::Other;
        span.start_ns = to_ns(f.at);
        span.end_ns = to_ns(f.at + f.restart_delay);
        span.name = name;
        lane_spans_[static_cast<std::size_t>(span.lane)].push_back(span);
      }
    }
  }

  void record_compute(int rank, const Op& op, double start, double end) {
    profiler::Span span;
    span.lane = compute_lane_[static_cast<std::size_t>(rank)];
    span.kind = span_kind(op.kind);
    span.chunk = schedule::is_vocab_op(op.kind) ? -1 : op.chunk;
    span.microbatch = op.microbatch;
    span.start_ns = to_ns(start);
    span.end_ns = to_ns(end);
    span.name = pair_name_;
    lane_spans_[static_cast<std::size_t>(span.lane)].push_back(span);
  }

  void record_copy(std::int32_t lane, profiler::SpanKind kind, const Op& op, const Copy& copy) {
    profiler::Span span;
    span.lane = lane;
    span.kind = kind;
    span.chunk = op.chunk;
    span.microbatch = op.microbatch;
    span.start_ns = to_ns(copy.start);
    span.end_ns = to_ns(copy.end);
    lane_spans_[static_cast<std::size_t>(lane)].push_back(span);
  }

  // The rank's device activations from `at` on: a counter in micro-batches, bytes when known.
  void record_memory(int rank, double at, double units) {
    const auto r = static_cast<std::size_t>(rank);
    auto& t = result_.trace;
    t.counters.push_back({rank, activation_counter_, to_ns(at), units});
    if (!options_.activation_bytes_per_microbatch.empty()) {
      const double bytes = units * options_.activation_bytes_per_microbatch[r];
      t.memory.push_back({rank, profiler::MemoryCategory::Activations, to_ns(at),
                          static_cast<std::int64_t>(std::llround(bytes))});
    }
  }

  const Schedule& s_;
  const CostTable& costs_;
  const SimOptions& options_;
  SimResult& result_;
  std::vector<double> compute_free_, comm_free_, busy_, comm_busy_, units_, peak_units_, cost_,
      overlap_hidden_, reduce_free_, reduce_busy_;
  bool failures_ = false;  // some stage fails (StageCosts::failures)
  // No trace, offload, failures, gathers or token slices: op() runs each op on the compute
  // stream alone.
  bool plain_ = false;
  std::vector<std::vector<PoolChange>> pool_changes_;  // per stage, under re-routing
  std::vector<std::vector<char>> run_starts_;  // per stage and op: gathers its group (ZeRO-3)
  std::vector<double> fault_stall_;
  std::vector<std::int32_t> reduce_lane_;
  std::vector<std::size_t> ops_;
  std::vector<std::int32_t> compute_lane_, comm_lane_, p2p_lane_;
  std::vector<std::vector<profiler::Span>> lane_spans_;
  std::vector<OffloadingRank> offloading_;  // empty unless some stage offloads
  std::uint32_t activation_counter_ = 0, host_counter_ = 0;
  std::uint32_t pair_name_ = 0;  // the name of the pair whose compute spans are being recorded
  std::unordered_map<std::string, std::uint32_t> pair_names_;
  std::vector<double> pair_transfer_;  // [source * stages + dest]; empty: p2p_time_ for all
  // Token slices: [(rank * kinds + kind) * slices + slice] op costs, and each slice's length.
  std::vector<double> slice_cost_, slice_length_;
  double p2p_time_ = 0.0, forward_units_ = 1.0, b_free_units_ = 0.0, w_free_units_ = 1.0;
};

}  // namespace

SimResult simulate(const Schedule& schedule, const CostTable& costs, const SimOptions& options) {
  if (!options.structure_checked) schedule::validate_structure(schedule);
  if (static_cast<int>(costs.stages.size()) != schedule.stages) {
    throw InputError("cost table has " + std::to_string(costs.stages.size()) +
                     " stages, the schedule has " + std::to_string(schedule.stages));
  }
  if (!options.activation_bytes_per_microbatch.empty() &&
      static_cast<int>(options.activation_bytes_per_microbatch.size()) != schedule.stages) {
    throw InputError("activation bytes given for " +
                     std::to_string(options.activation_bytes_per_microbatch.size()) +
                     " stages, the schedule has " + std::to_string(schedule.stages));
  }
  schedule::check_costs(costs);
  if (costs.w_free_fraction < 0.0 || costs.w_free_fraction > 1.0)
    throw InputError("w_free_fraction must be within 0..1");
  for (const schedule::StageCosts& st : costs.stages)
    if (st.fails() && st.offload > 0.0)
      throw InputError(
          "a stage that fails and offloads its activations is not simulated (its copies would "
          "be lost with it)");
  if (schedule.slices > 1)
    for (const schedule::StageCosts& st : costs.stages)
      if (st.offload > 0.0)
        throw InputError("schedule '" + schedule.name +
                         "' cuts micro-batches into token slices, and a stage offloads its "
                         "activations: the two are not simulated together (a slice's keys and "
                         "values stay on the device for the later slices)");

  SimResult result;
  TimingHooks hooks(schedule, costs, options, result);
  if (hooks.timed_without_executing()) return result;
  schedule::execute(schedule, hooks);
  hooks.finish();
  return result;
}

}  // namespace pipetune::sim
