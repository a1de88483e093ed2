#include "profiler/gpu/gpu_capture.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "profiler/gpu/gpu_activity_names.hpp"

namespace pipetune::profiler {

namespace {

// The rank's host-side spans that work can be launched from, by start time.
class OpIndex {
 public:
  OpIndex(const Trace& trace, std::int32_t rank) : trace_(&trace) {
    for (std::size_t i = 0; i < trace.spans.size(); ++i) {
      const Span& s = trace.spans[i];
      if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= trace.lanes.size()) continue;
      const Lane& lane = trace.lanes[static_cast<std::size_t>(s.lane)];
      if (lane.rank != rank || lane.stream == Stream::Gpu || lane.stream == Stream::Host) continue;
      if (!is_compute(s.kind) && !is_communication(s.kind)) continue;
      ops_.push_back(static_cast<std::int64_t>(i));
    }
    std::sort(ops_.begin(), ops_.end(),
              [&](std::int64_t a, std::int64_t b) { return span(a).start_ns < span(b).start_ns; });
  }

  // The innermost op containing t (the latest-starting one), or -1.
  std::int64_t at(std::int64_t t) const {
    auto it = std::upper_bound(ops_.begin(), ops_.end(), t, [&](std::int64_t time, std::int64_t i) {
      return time < span(i).start_ns;
    });
    while (it != ops_.begin()) {
      --it;
      const Span& s = span(*it);
      if (t < s.end_ns || (s.start_ns == s.end_ns && t == s.start_ns)) return *it;
      // An earlier op may still contain t (an outer one); ops of one rank nest at most a few
      // deep, so the scan ends quickly once it passes the ops that could.
      if (t - s.start_ns > max_length()) break;
    }
    return -1;
  }

 private:
  const Span& span(std::int64_t i) const { return trace_->spans[static_cast<std::size_t>(i)]; }
  std::int64_t max_length() const {
    if (max_length_ < 0) {
      max_length_ = 0;
      for (std::int64_t i : ops_)
        max_length_ = std::max(max_length_, span(i).end_ns - span(i).start_ns);
    }
    return max_length_;
  }

  const Trace* trace_;
  std::vector<std::int64_t> ops_;
  mutable std::int64_t max_length_ = -1;
};

SpanKind kind_of(const KernelRecord& r) {
  if (r.grid[0] == 0 && r.block[0] == 0) {  // not a kernel: a copy or a memset
    return r.name.rfind("memset", 0) == 0 ? SpanKind::Memset : SpanKind::Memcpy;
  }
  if (const auto nccl = classify_nccl_kernel(r.name)) return span_kind_of(*nccl);
  return SpanKind::Kernel;
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
  const OpIndex ops(trace, rank);  // before any GPU span is added

  GpuAttribution out;
  for (const KernelRecord& a : capture.activities) {
    if (a.end_ns < a.start_ns)
      throw std::invalid_argument("GPU capture of rank " + std::to_string(rank) + ": '" + a.name +
                                  "' (correlation " + std::to_string(a.correlation) + ") ends at " +
                                  std::to_string(a.end_ns) + " ns, before its start " +
                                  std::to_string(a.start_ns));
    Span s;
    s.lane = trace.lane(rank, Stream::Gpu, a.stream);
    s.kind = kind_of(a);
    s.start_ns = a.start_ns + clock_offset_ns;
    s.end_ns = a.end_ns + clock_offset_ns;
    s.name = intern(a.name);
    std::int64_t op = -1;
    const auto call = launch.find(static_cast<std::uint32_t>(a.correlation));
    if (call == launch.end()) {
      ++out.without_launch;
    } else {
      op = ops.at(call->second->start_ns + clock_offset_ns);
      if (op < 0) {
        ++out.outside_ops;
      } else {
        ++out.attributed;
        const Span& parent = trace.spans[static_cast<std::size_t>(op)];
        s.microbatch = parent.microbatch;
        s.chunk = parent.chunk;
      }
    }
    trace.spans.push_back(s);
    out.op_of_span.push_back(op);
    KernelRecord record = a;
    record.rank = rank;
    record.start_ns = s.start_ns;
    record.end_ns = s.end_ns;
    out.records.push_back(std::move(record));
  }
  return out;
}

}  // namespace pipetune::profiler
