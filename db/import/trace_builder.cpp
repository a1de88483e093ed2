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

std::string prefix(const std::string& source) {
  return source.empty() ? std::string() : source + ": ";
}

}  // namespace

ImportedTraceBuilder::ImportedTraceBuilder() {
  trace_.kind = profiler::TraceKind::Imported;
  for (std::size_t i = 0; i < trace_.names.size(); ++i)
    names_.emplace(trace_.names[i], static_cast<std::uint32_t>(i));
}

std::size_t ImportedTraceBuilder::LaneKeyHash::operator()(const LaneKey& k) const noexcept {
  // splitmix64's finalizer over (rank, index), the stream in the top bits.
  std::uint64_t h = ((std::uint64_t{static_cast<std::uint32_t>(k.rank)} << 32) |
                     static_cast<std::uint32_t>(k.index)) ^
                    (static_cast<std::uint64_t>(k.stream) << 59);
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::size_t>(h ^ (h >> 31));
}

std::int32_t ImportedTraceBuilder::lane(std::int32_t rank, Stream stream, std::int32_t index) {
  const auto [it, fresh] = lanes_.try_emplace(LaneKey{rank, stream, index}, 0);
  if (!fresh) return it->second;
  if (ranks_.insert(rank).second && ranks_.size() > limits_.max_ranks) {
    lanes_.erase(it);
    throw InputError(prefix(source_) + "more than " + std::to_string(limits_.max_ranks) +
                     " ranks: beyond the import limit");
  }
  it->second = static_cast<std::int32_t>(trace_.lanes.size());
  // Named by Trace::lane's own rule: on an empty trace it creates the lane without a search.
  lane_namer_.lanes.clear();
  lane_namer_.lane(rank, stream, index);
  trace_.lanes.push_back(std::move(lane_namer_.lanes.back()));
  return it->second;
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

// Times beyond what the analyses handle (time_window.hpp) are refused at import, not wrapped.
void check_times(const Span& span, const std::string& source) {
  if (!profiler::analysis::trace_time_ok(span.start_ns) ||
      !profiler::analysis::trace_time_ok(span.end_ns))
    throw InputError(prefix(source) + "a span from " + std::to_string(span.start_ns) + " to " +
                     std::to_string(span.end_ns) +
                     " ns is beyond the times pipetune handles (2^62 ns, about 146 years)");
}

}  // namespace

void ImportedTraceBuilder::check_span_count() const {
  if (trace_.spans.size() >= limits_.max_records)
    throw InputError(prefix(source_) + "more than " + std::to_string(limits_.max_records) +
                     " spans: beyond the import limit");
}

void ImportedTraceBuilder::add_span(const Span& span) {
  check_span_count();
  check_times(span, source_);
  trace_.spans.push_back(span);
  kernel_of_span_.push_back(-1);
}

void ImportedTraceBuilder::add_gpu_span(const Span& span, profiler::KernelRecord record) {
  check_span_count();
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
  for (const profiler::StepMetric& m : trace_.steps) check_sample(m.t_ns, "step marker");
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
