#include "profiler/gpu/gpu_capture.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "profiler/gpu/enclosing_ranges.hpp"
#include "profiler/gpu/kernel_class.hpp"

namespace pipetune::profiler {

namespace {

// The rank's host-side spans that work can be launched from: its ops, sends, receives and
// collectives on its non-GPU, non-host lanes.
EnclosingRanges rank_ops(const Trace& trace, std::int32_t rank) {
  std::vector<std::int64_t> ops;
  for (std::size_t i = 0; i < trace.spans.size(); ++i) {
    const Span& s = trace.spans[i];
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= trace.lanes.size()) continue;
    const Lane& lane = trace.lanes[static_cast<std::size_t>(s.lane)];
    if (lane.rank != rank || lane.stream == Stream::Gpu || lane.stream == Stream::Host) continue;
    if (!is_compute(s.kind) && !is_communication(s.kind)) continue;
    ops.push_back(static_cast<std::int64_t>(i));
  }
  return EnclosingRanges(trace, std::move(ops));
}

}  // namespace

GpuAttribution add_gpu_capture(Trace& trace, std::int32_t rank, const GpuCapture& capture,
                               std::int64_t clock_offset_ns) {
  std::unordered_map<std::uint32_t, const ApiCallRecord*> launch;
  for (const ApiCallRecord& call : capture.api_calls) launch.emplace(call.correlation, &call);
  std::unordered_map<std::string, std::uint32_t> names;
  for (std::size_t i = 0; i < trace.names.size(); ++i)
    names.emplace(trace.names[i], static_cast<std::uint32_t>(i));
  const auto intern = [&](const std::string& name) {
    const auto [it, added] = names.emplace(name, static_cast<std::uint32_t>(trace.names.size()));
    if (added) trace.names.push_back(name);
    return it->second;
  };
  const EnclosingRanges ops = rank_ops(trace, rank);  // before any GPU span is added

  GpuAttribution out;
  for (const KernelRecord& a : capture.activities) {
    if (a.end_ns < a.start_ns)
      throw std::invalid_argument("GPU capture of rank " + std::to_string(rank) + ": '" + a.name +
                                  "' (correlation " + std::to_string(a.correlation) + ") ends at " +
                                  std::to_string(a.end_ns) + " ns, before its start " +
                                  std::to_string(a.start_ns));
    Span s;
    s.lane = trace.lane(rank, Stream::Gpu, a.stream);
    s.kind = gpu_span_kind(a);
    s.start_ns = a.start_ns + clock_offset_ns;
    s.end_ns = a.end_ns + clock_offset_ns;
    s.name = intern(a.name);
    KernelRecord record = a;
    std::int64_t op = -1;
    const auto call = launch.find(static_cast<std::uint32_t>(a.correlation));
    if (call == launch.end()) {
      ++out.without_launch;
    } else {
      op = ops.innermost(call->second->start_ns + clock_offset_ns);
      if (op < 0) {
        ++out.outside_ops;
      } else {
        ++out.attributed;
        const Span& parent = trace.spans[static_cast<std::size_t>(op)];
        s.microbatch = parent.microbatch;
        s.chunk = parent.chunk;
        record.op = trace.span_label(parent);
        if (is_compute(parent.kind)) {
          record.phase = parent.kind;
          record.microbatch = parent.microbatch;
          record.chunk = parent.chunk;
        }
      }
    }
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
