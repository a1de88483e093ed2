#include "db/import/kernel_attribution.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "profiler/gpu/enclosing_ranges.hpp"

namespace pipetune::db::import_detail {

using profiler::EnclosingRanges;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;

std::uint64_t launch_key(std::int32_t rank, std::int64_t correlation) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank)) << 40) ^
         static_cast<std::uint64_t>(correlation);
}

namespace {

bool is_nccl_api(std::string_view name) {
  return name.size() > 4 && name.substr(0, 4) == "nccl" && name[4] >= 'A' &&
         name[4] <= 'Z';  // ncclSend, ncclGroupEnd; not a kernel name
}

// PyTorch's emit_nvtx ranges append the op's sequence and id (and shapes) to its name:
// "aten::addmm, seq = 45440, op_id = 990760, sizes = [...]". The op is the name before them.
std::string op_base_name(std::string_view name) {
  std::size_t cut = name.size();
  for (std::string_view suffix : {", seq = ", ", op_id = ", ", sizes = "})
    cut = std::min(cut, name.find(suffix));
  return std::string(name.substr(0, cut));
}

}  // namespace

KernelAttributionCounts attribute_kernels(
    profiler::Trace& trace, std::vector<profiler::KernelRecord>& kernels,
    const std::vector<bool>& has_record,
    const std::unordered_map<std::uint64_t, LaunchSite>& launches) {
  KernelAttributionCounts counts;
  if (kernels.empty()) return counts;

  // Per host lane: its op ranges and its pipeline phases.
  std::vector<std::vector<std::int64_t>> ranges(trace.lanes.size()), phases(trace.lanes.size());
  for (std::size_t i = 0; i < trace.spans.size(); ++i) {
    const Span& s = trace.spans[i];
    if (has_record[i] || s.kind == SpanKind::Runtime) continue;
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= trace.lanes.size()) continue;
    if (trace.lanes[static_cast<std::size_t>(s.lane)].stream == Stream::Gpu) continue;
    if (profiler::is_compute(s.kind)) phases[static_cast<std::size_t>(s.lane)].push_back(i);
    if (!is_nccl_api(trace.names[s.name])) ranges[static_cast<std::size_t>(s.lane)].push_back(i);
  }
  std::vector<EnclosingRanges> range_index, phase_index;
  range_index.reserve(ranges.size());
  phase_index.reserve(ranges.size());
  for (std::size_t l = 0; l < ranges.size(); ++l) {
    range_index.emplace_back(trace, std::move(ranges[l]));
    phase_index.emplace_back(trace, std::move(phases[l]));
  }

  std::size_t k = 0;
  for (std::size_t i = 0; i < trace.spans.size() && k < kernels.size(); ++i) {
    if (!has_record[i]) continue;
    profiler::KernelRecord& record = kernels[k++];
    auto launch = launches.find(launch_key(record.rank, record.correlation));
    if (record.correlation < 0 || launch == launches.end()) {
      ++counts.without_launch;
      continue;
    }
    const auto lane = static_cast<std::size_t>(launch->second.lane);
    if (lane >= range_index.size()) {
      ++counts.without_launch;
      continue;
    }
    const std::int64_t t = launch->second.start_ns;
    const std::int64_t op = range_index[lane].innermost(t);
    if (op < 0) {
      ++counts.outside_ranges;
      continue;
    }
    ++counts.attributed;
    const Span& op_span = trace.spans[static_cast<std::size_t>(op)];
    record.op = op_base_name(trace.span_label(op_span));
    const std::int64_t phase = phase_index[lane].innermost(t);
    if (phase >= 0) {
      ++counts.in_phase;
      const Span& p = trace.spans[static_cast<std::size_t>(phase)];
      record.phase = p.kind;
      record.microbatch = p.microbatch;
      record.chunk = p.chunk;
      Span& s = trace.spans[i];
      if (s.microbatch < 0) s.microbatch = p.microbatch;
      if (s.chunk < 0) s.chunk = p.chunk;
    }
  }
  return counts;
}

}  // namespace pipetune::db::import_detail
