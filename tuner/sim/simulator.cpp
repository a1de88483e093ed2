#include "tuner/sim/simulator.hpp"

#include "engine/schedule/span_kinds.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/errors.hpp"
#include "engine/schedule/executor.hpp"
#include "engine/schedule/validator.hpp"

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
    units_.assign(p, 0.0);
    peak_units_.assign(p, 0.0);
    ops_.assign(p, 0);
    p2p_time_ = costs.p2p_time();
    const double v = static_cast<double>(s.chunks);
    forward_units_ = 1.0 / v;
    b_free_units_ = (1.0 - costs.w_free_fraction) / v;
    w_free_units_ = costs.w_free_fraction / v;
    // Per-(rank, kind) cost lookups are hot: cache them flat.
    cost_.resize(p * schedule::kOpKindCount);
    for (std::size_t r = 0; r < p; ++r)
      for (OpKind k : schedule::kAllOpKinds)
        cost_[r * schedule::kOpKindCount + static_cast<std::size_t>(k)] =
            costs.cost(static_cast<int>(r), k);
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
      activation_counter_ = t.intern("activations (micro-batches)");
      lane_spans_.resize(t.lanes.size());
      for (int r = 0; r < s.stages; ++r)
        lane_spans_[static_cast<std::size_t>(compute_lane_[static_cast<std::size_t>(r)])].reserve(
            s.ranks[static_cast<std::size_t>(r)].size());
      t.counters.reserve(s.op_count() + p);
      if (!options.activation_bytes_per_microbatch.empty()) t.memory.reserve(s.op_count() + p);
    }
  }

  double op(int rank, std::size_t, const Op& op, const Requirement& req, double req_time) {
    const auto r = static_cast<std::size_t>(rank);
    double ready = req_time;
    if (req.present && req.transfer) {
      ready += p2p_time_;
      if (options_.record_trace && p2p_time_ > 0.0) {
        profiler::Span send;
        send.lane = p2p_lane_[static_cast<std::size_t>(req.source_rank)];
        send.kind = profiler::SpanKind::Send;
        send.microbatch = op.microbatch;
        send.peer = rank;
        send.start_ns = to_ns(req_time);
        send.end_ns = to_ns(ready);
        lane_spans_[static_cast<std::size_t>(send.lane)].push_back(send);
      }
    }
    const double start = std::max(compute_free_[r], ready);
    const double duration = cost_[r * schedule::kOpKindCount + static_cast<std::size_t>(op.kind)];
    const double end = start + duration;
    compute_free_[r] = end;
    busy_[r] += duration;
    ++ops_[r];

    // Activations: an F allocates as it starts; B/W/BW free as they end.
    double delta = 0.0;
    double at = end;
    switch (op.kind) {
      case OpKind::F:
        delta = forward_units_;
        at = start;
        break;
      case OpKind::B:
        delta = -b_free_units_;
        break;
      case OpKind::W:
        delta = -w_free_units_;
        break;
      case OpKind::BW:
        delta = -forward_units_;
        break;
      default:
        break;
    }
    if (delta != 0.0) {
      units_[r] += delta;
      if (units_[r] > peak_units_[r]) peak_units_[r] = units_[r];
    }
    if (options_.record_trace) {
      profiler::Span span;
      span.lane = compute_lane_[r];
      span.kind = span_kind(op.kind);
      span.chunk = schedule::is_vocab_op(op.kind) ? -1 : op.chunk;
      span.microbatch = op.microbatch;
      span.start_ns = to_ns(start);
      span.end_ns = to_ns(end);
      lane_spans_[static_cast<std::size_t>(span.lane)].push_back(span);
      if (delta != 0.0) record_memory(rank, at);
    }
    return end;
  }

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
    const int p = s_.stages;
    double makespan = 0.0;
    for (int r = 0; r < p; ++r) {
      makespan = std::max(makespan, compute_free_[static_cast<std::size_t>(r)]);
      makespan = std::max(makespan, comm_free_[static_cast<std::size_t>(r)]);
    }
    // Every time of the run (busy, bubble, each op's end) is at most the makespan: bounded here,
    // with or without a trace, as the trace's times are.
    schedule::check_schedule_time(makespan, "a simulated time");
    result_.iteration_time = makespan;
    result_.stages.resize(static_cast<std::size_t>(p));
    double bubble_sum = 0.0;
    for (int r = 0; r < p; ++r) {
      const auto i = static_cast<std::size_t>(r);
      StageSummary& st = result_.stages[i];
      st.stage = r;
      st.busy = busy_[i];
      st.bubble = std::max(0.0, makespan - busy_[i]);
      st.bubble_ratio = makespan > 0.0 ? st.bubble / makespan : 0.0;
      st.comm = comm_busy_[i];
      st.peak_activation_microbatches = peak_units_[i];
      if (!options_.activation_bytes_per_microbatch.empty())
        st.peak_activation_bytes = peak_units_[i] * options_.activation_bytes_per_microbatch[i];
      st.ops = ops_[i];
      bubble_sum += st.bubble;
      result_.op_count += ops_[i];
    }
    result_.bubble_ratio = makespan > 0.0 ? bubble_sum / (makespan * p) : 0.0;
    if (options_.record_trace) {
      // Compute and barrier spans arrive in time order per lane (each stream runs in order);
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
  }

 private:
  void record_memory(int rank, double at) {
    const auto r = static_cast<std::size_t>(rank);
    auto& t = result_.trace;
    t.counters.push_back({rank, activation_counter_, to_ns(at), units_[r]});
    if (!options_.activation_bytes_per_microbatch.empty()) {
      const double bytes = units_[r] * options_.activation_bytes_per_microbatch[r];
      t.memory.push_back({rank, profiler::MemoryCategory::Activations, to_ns(at),
                          static_cast<std::int64_t>(std::llround(bytes))});
    }
  }

  const Schedule& s_;
  const CostTable& costs_;
  const SimOptions& options_;
  SimResult& result_;
  std::vector<double> compute_free_, comm_free_, busy_, comm_busy_, units_, peak_units_, cost_;
  std::vector<std::size_t> ops_;
  std::vector<std::int32_t> compute_lane_, comm_lane_, p2p_lane_;
  std::vector<std::vector<profiler::Span>> lane_spans_;
  std::uint32_t activation_counter_ = 0;
  double p2p_time_ = 0.0, forward_units_ = 1.0, b_free_units_ = 0.0, w_free_units_ = 1.0;
};

}  // namespace

SimResult simulate(const Schedule& schedule, const CostTable& costs, const SimOptions& options) {
  schedule::validate_structure(schedule);
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

  SimResult result;
  TimingHooks hooks(schedule, costs, options, result);
  schedule::execute(schedule, hooks);
  hooks.finish();
  return result;
}

}  // namespace pipetune::sim
