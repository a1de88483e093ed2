#include "profiler/gpu/gpu_capture.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "profiler/gpu/enclosing_ranges.hpp"
#include "profiler/gpu/kernel_class.hpp"

namespace pipetune::profiler {

namespace {

// Whether `s` is one of the rank's host-side spans that work can be launched from: its ops,
// sends, receives and collectives on its non-GPU, non-host lanes.
bool is_launching_op(const Trace& trace, const Span& s, std::int32_t rank) {
  if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= trace.lanes.size()) return false;
  const Lane& lane = trace.lanes[static_cast<std::size_t>(s.lane)];
  if (lane.rank != rank || lane.stream == Stream::Gpu || lane.stream == Stream::Host) return false;
  return is_compute(s.kind) || is_communication(s.kind);
}

EnclosingRanges rank_ops(const Trace& trace, std::int32_t rank) {
  std::vector<std::int64_t> ops;
  for (std::size_t i = 0; i < trace.spans.size(); ++i)
    if (is_launching_op(trace, trace.spans[i], rank)) ops.push_back(static_cast<std::int64_t>(i));
  return EnclosingRanges(trace, std::move(ops));
}

// Each launch call's start by correlation id: one sorted array, not a node per call (a GPT-2
// step hands over about a thousand; gpu_capture_bench).
class LaunchStarts {
 public:
  explicit LaunchStarts(const std::vector<ApiCallRecord>& calls) {
    launch_.reserve(calls.size());
    for (const ApiCallRecord& call : calls) launch_.emplace_back(call.correlation, call.start_ns);
    std::stable_sort(launch_.begin(), launch_.end(), by_id);  // of calls sharing an id, the first
  }
  // The start of the call that launched `correlation`; null when the capture has none.
  const std::int64_t* find(std::uint32_t correlation) const {
    const auto it = std::lower_bound(launch_.begin(), launch_.end(), Entry{correlation, 0}, by_id);
    return it != launch_.end() && it->first == correlation ? &it->second : nullptr;
  }

 private:
  using Entry = std::pair<std::uint32_t, std::int64_t>;
  static bool by_id(const Entry& a, const Entry& b) { return a.first < b.first; }
  std::vector<Entry> launch_;
};

// The trace's names by text, so a record's name is interned with one lookup.
class NameIndex {
 public:
  explicit NameIndex(Trace& trace) : trace_(trace) {
    for (std::size_t i = 0; i < trace.names.size(); ++i)
      names_.emplace(trace.names[i], static_cast<std::uint32_t>(i));
  }
  std::uint32_t intern(const std::string& name) {
    const auto [it, added] = names_.emplace(name, static_cast<std::uint32_t>(trace_.names.size()));
    if (added) trace_.names.push_back(name);
    return it->second;
  }

 private:
  Trace& trace_;
  std::unordered_map<std::string, std::uint32_t> names_;
};

// A record's span kind by its interned name: telling an NCCL kernel by its name once per name.
class KindCache {
 public:
  SpanKind kind_of(std::uint32_t name, const KernelRecord& record) {
    const bool kernel = record.grid[0] != 0 || record.block[0] != 0;  // else a copy or memset
    if (!kernel) return gpu_span_kind(record);
    const auto [it, added] = kinds_.try_emplace(name);
    if (added) it->second = gpu_span_kind(record);
    return it->second;
  }

 private:
  std::unordered_map<std::uint32_t, SpanKind> kinds_;
};

// The rank's launching ops in `launched_from`, and each op's label made once per op rather than
// once per record. Built before any GPU span is added (`launched_from` may be the trace the
// spans go to): the index holds span indices, which stay valid as GPU spans are appended.
class LaunchingOps {
 public:
  LaunchingOps(const Trace& launched_from, std::int32_t rank)
      : from_(launched_from), ops_(rank_ops(launched_from, rank)) {}
  std::int64_t innermost(std::int64_t t) const { return ops_.innermost(t); }
  const Span& span(std::int64_t op) const { return from_.spans[static_cast<std::size_t>(op)]; }
  const std::string& label(std::int64_t op) {
    const auto [it, added] = labels_.try_emplace(op);
    if (added) it->second = from_.span_label(span(op));
    return it->second;
  }

 private:
  const Trace& from_;
  const EnclosingRanges ops_;
  std::unordered_map<std::int64_t, std::string> labels_;
};

void check_record_times(const KernelRecord& record, std::int32_t rank) {
  if (record.end_ns < record.start_ns)
    throw std::invalid_argument(
        "GPU capture of rank " + std::to_string(rank) + ": '" + record.name + "' (correlation " +
        std::to_string(record.correlation) + ") ends at " + std::to_string(record.end_ns) +
        " ns, before its start " + std::to_string(record.start_ns));
}

// The op whose span encloses the start of the call that launched the record (-1 when the
// capture lacks the call or no op encloses it, counted in `out`); the span and record take the
// op's micro-batch and chunk, the record its label and, for a compute op, its phase.
std::int64_t attribute(Span& s, KernelRecord& record, const LaunchStarts& launches,
                       LaunchingOps& ops, std::int64_t clock_offset_ns, GpuAttribution& out) {
  const std::int64_t* call_start = launches.find(static_cast<std::uint32_t>(record.correlation));
  if (call_start == nullptr) {
    ++out.without_launch;
    return -1;
  }
  const std::int64_t op = ops.innermost(*call_start + clock_offset_ns);
  if (op < 0) {
    ++out.outside_ops;
    return -1;
  }
  ++out.attributed;
  const Span& parent = ops.span(op);
  s.microbatch = parent.microbatch;
  s.chunk = parent.chunk;
  record.op = ops.label(op);
  if (is_compute(parent.kind)) {
    record.phase = parent.kind;
    record.microbatch = parent.microbatch;
    record.chunk = parent.chunk;
  }
  return op;
}

}  // namespace

void append_launching_ops(Trace& window, const Trace& part, std::int32_t rank) {
  for (const Span& s : part.spans) {
    if (!is_launching_op(part, s, rank)) continue;
    const Lane& lane = part.lanes[static_cast<std::size_t>(s.lane)];
    Span kept = s;
    kept.lane = window.lane(lane.rank, lane.stream, lane.index);
    kept.name = s.name != 0 && s.name < part.names.size() ? window.intern(part.names[s.name]) : 0;
    window.spans.push_back(kept);
  }
}

GpuAttribution add_gpu_capture(Trace& trace, std::int32_t rank, GpuCapture capture,
                               std::int64_t clock_offset_ns) {
  return add_gpu_capture(trace, trace, rank, std::move(capture), clock_offset_ns);
}

GpuAttribution add_gpu_capture(Trace& trace, const Trace& launched_from, std::int32_t rank,
                               GpuCapture capture, std::int64_t clock_offset_ns) {
  const LaunchStarts launches(capture.api_calls);
  NameIndex names(trace);
  KindCache kinds;
  LaunchingOps ops(launched_from, rank);

  GpuAttribution out;
  out.op_of_span.reserve(capture.activities.size());
  out.records.reserve(capture.activities.size());
  trace.spans.reserve(trace.spans.size() + capture.activities.size());
  std::int32_t lane = -1, lane_stream = 0;  // the last record's lane: records come by stream
  for (KernelRecord& record : capture.activities) {
    check_record_times(record, rank);
    if (lane < 0 || record.stream != lane_stream) {
      lane = trace.lane(rank, Stream::Gpu, record.stream);
      lane_stream = record.stream;
    }
    Span s;
    s.lane = lane;
    s.name = names.intern(record.name);
    s.kind = kinds.kind_of(s.name, record);
    s.start_ns = record.start_ns + clock_offset_ns;
    s.end_ns = record.end_ns + clock_offset_ns;
    const std::int64_t op = attribute(s, record, launches, ops, clock_offset_ns, out);
    trace.spans.push_back(s);
    out.op_of_span.push_back(op);
    record.rank = rank;
    record.start_ns = s.start_ns;
    record.end_ns = s.end_ns;
    out.records.push_back(std::move(record));
  }
  return out;
}

}  // namespace pipetune::profiler
