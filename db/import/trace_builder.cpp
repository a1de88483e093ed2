#include "db/import/trace_builder.hpp"

#include "db/import/kernel_attribution.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/time_window.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>

namespace pipetune::db::import_detail {

using profiler::Span;
using profiler::Stream;

namespace {

std::uint64_t lane_key(std::int32_t rank, Stream stream, std::int32_t index) {
  // rank and index are 32-bit; the stream fits in the top bits left after folding rank to 28.
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank) & 0x0FFFFFFFu) << 36) ^
         (static_cast<std::uint64_t>(stream) << 32) ^ static_cast<std::uint32_t>(index);
}

}  // namespace

ImportedTraceBuilder::ImportedTraceBuilder() {
  trace_.kind = profiler::TraceKind::Imported;
  for (std::size_t i = 0; i < trace_.names.size(); ++i)
    names_.emplace(trace_.names[i], static_cast<std::uint32_t>(i));
}

std::int32_t ImportedTraceBuilder::lane(std::int32_t rank, Stream stream, std::int32_t index) {
  const std::uint64_t key = lane_key(rank, stream, index);
  auto it = lanes_.find(key);
  if (it != lanes_.end()) {
    const auto& l = trace_.lanes[static_cast<std::size_t>(it->second)];
    if (l.rank == rank && l.stream == stream && l.index == index) return it->second;
  }
  // New lane, or a key collision (ranks beyond 2^28): fall back to the Trace's own search.
  const std::int32_t id = trace_.lane(rank, stream, index);
  if (it == lanes_.end()) lanes_.emplace(key, id);
  return id;
}

void ImportedTraceBuilder::set_lane_name(std::int32_t lane, std::string name) {
  trace_.lanes.at(static_cast<std::size_t>(lane)).name = std::move(name);
}

std::uint32_t ImportedTraceBuilder::name(std::string_view text) {
  auto it = names_.find(text);
  if (it != names_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(trace_.names.size());
  trace_.names.emplace_back(text);
  names_.emplace(std::string(text), id);
  return id;
}

namespace {

std::string prefix(const std::string& source) {
  return source.empty() ? std::string() : source + ": ";
}

// Times beyond what the analyses handle (time_window.hpp) are refused at import, not wrapped.
void check_times(const Span& span, const std::string& source) {
  if (!profiler::analysis::trace_time_ok(span.start_ns) ||
      !profiler::analysis::trace_time_ok(span.end_ns))
    throw InputError(prefix(source) + "a span from " + std::to_string(span.start_ns) + " to " +
                     std::to_string(span.end_ns) +
                     " ns is beyond the times pipetune handles (2^62 ns, about 146 years)");
}

}  // namespace

void ImportedTraceBuilder::add_span(const Span& span) {
  check_times(span, source_);
  trace_.spans.push_back(span);
  kernel_of_span_.push_back(-1);
}

void ImportedTraceBuilder::add_gpu_span(const Span& span, profiler::KernelRecord record) {
  check_times(span, source_);
  trace_.spans.push_back(span);
  kernel_of_span_.push_back(static_cast<std::int64_t>(kernels_.size()));
  kernels_.push_back(std::move(record));
}

void ImportedTraceBuilder::add_launch(std::int32_t rank, std::int64_t correlation,
                                      std::int32_t lane, std::int64_t start_ns) {
  if (correlation < 0) return;
  launches_[launch_key(rank, correlation)] = Launch{lane, start_ns};
}

void ImportedTraceBuilder::finish(ImportedProfile& out) {
  // Sample times too must be times the analyses handle (memory timeline, counters).
  const auto check_sample = [&](std::int64_t t, const char* what) {
    if (!profiler::analysis::trace_time_ok(t))
      throw InputError(prefix(source_) + "a " + what + " at " + std::to_string(t) +
                       " ns is beyond the times pipetune handles (2^62 ns, about 146 years)");
  };
  for (const profiler::MemorySample& m : trace_.memory) check_sample(m.t_ns, "memory sample");
  for (const profiler::CounterSample& c : trace_.counters) check_sample(c.t_ns, "counter sample");
  // Lanes in (rank, stream, index) order.
  const std::size_t lane_count = trace_.lanes.size();
  std::vector<std::int32_t> lane_order(lane_count);
  std::iota(lane_order.begin(), lane_order.end(), 0);
  std::sort(lane_order.begin(), lane_order.end(), [&](std::int32_t a, std::int32_t b) {
    const auto& x = trace_.lanes[static_cast<std::size_t>(a)];
    const auto& y = trace_.lanes[static_cast<std::size_t>(b)];
    return std::tie(x.rank, x.stream, x.index) < std::tie(y.rank, y.stream, y.index);
  });
  std::vector<std::int32_t> new_lane(lane_count);
  std::vector<profiler::Lane> lanes;
  lanes.reserve(lane_count);
  for (std::size_t i = 0; i < lane_count; ++i) {
    new_lane[static_cast<std::size_t>(lane_order[i])] = static_cast<std::int32_t>(i);
    lanes.push_back(std::move(trace_.lanes[static_cast<std::size_t>(lane_order[i])]));
  }
  trace_.lanes = std::move(lanes);
  for (Span& s : trace_.spans) s.lane = new_lane[static_cast<std::size_t>(s.lane)];

  // Spans by lane and start; an enclosing range before what it encloses.
  std::vector<std::size_t> order(trace_.spans.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const Span& x = trace_.spans[a];
    const Span& y = trace_.spans[b];
    if (x.lane != y.lane) return x.lane < y.lane;
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    return x.end_ns > y.end_ns;
  });
  std::vector<Span> spans;
  spans.reserve(order.size());
  out.kernels.clear();
  out.kernels.reserve(kernels_.size());
  std::vector<bool> has_record;
  has_record.reserve(order.size());
  for (std::size_t i : order) {
    spans.push_back(trace_.spans[i]);
    has_record.push_back(kernel_of_span_[i] >= 0);
    if (kernel_of_span_[i] >= 0)
      out.kernels.push_back(std::move(kernels_[static_cast<std::size_t>(kernel_of_span_[i])]));
  }
  trace_.spans = std::move(spans);

  std::unordered_map<std::uint64_t, LaunchSite> launches;
  launches.reserve(launches_.size());
  for (const auto& [key, l] : launches_)
    launches.emplace(key, LaunchSite{new_lane[static_cast<std::size_t>(l.lane)], l.start_ns});
  launches_.clear();
  out.attribution = attribute_kernels(trace_, out.kernels, has_record, launches);
  out.trace = std::move(trace_);
  kernels_.clear();
  kernel_of_span_.clear();
}

}  // namespace pipetune::db::import_detail
