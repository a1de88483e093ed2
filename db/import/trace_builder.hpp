// Builds the Trace of an imported profile: lanes found by hash (not Trace::lane's scan, which is
// quadratic in lanes), names interned by hash (imports carry tens of thousands of distinct range
// names), and GPU spans kept together with their profiler::KernelRecord until the final sort.
// Refuses (InputError) more ranks or spans than ImportLimits allow.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "db/import/import_limits.hpp"
#include "db/import/imported_profile.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db::import_detail {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

class ImportedTraceBuilder {
 public:
  ImportedTraceBuilder();
  // The file being imported: errors about its records name it.
  void set_source(std::string file) { source_ = std::move(file); }
  void set_limits(const ImportLimits& limits) { limits_ = limits; }

  std::int32_t lane(std::int32_t rank, profiler::Stream stream, std::int32_t index);
  void set_lane_name(std::int32_t lane, std::string name);
  std::uint32_t name(std::string_view text);

  void add_span(const profiler::Span& span);
  void add_gpu_span(const profiler::Span& span, profiler::KernelRecord record);
  // The host call (CUDA runtime/driver API) that launched `rank`'s GPU activity `correlation`:
  // on host lane `lane` at `start_ns`. finish() attributes each GPU activity to the innermost
  // range open on that lane at that time (kernel_attribution.hpp).
  void add_launch(std::int32_t rank, std::int64_t correlation, std::int32_t lane,
                  std::int64_t start_ns);

  std::size_t span_count() const { return trace_.spans.size(); }
  profiler::Trace& trace() { return trace_; }

  // Orders lanes by (rank, stream, index) and spans by (lane, start, longer first, insertion),
  // keeps kernels in span order, attributes them to the ranges they were launched from
  // (ImportedProfile::attribution), and moves the result into `out` (trace kind Imported).
  void finish(ImportedProfile& out);

 private:
  struct LaneKey {
    std::int32_t rank = 0;
    profiler::Stream stream = profiler::Stream::Compute;
    std::int32_t index = 0;
    friend bool operator==(const LaneKey&, const LaneKey&) = default;
  };
  struct LaneKeyHash {
    std::size_t operator()(const LaneKey& k) const noexcept;
  };

  void check_span_count() const;

  std::string source_;
  ImportLimits limits_;
  profiler::Trace trace_;
  std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>> names_;
  std::unordered_map<LaneKey, std::int32_t, LaneKeyHash> lanes_;
  std::unordered_set<std::int32_t> ranks_;  // the ranks of lanes_, counted against the limit
  profiler::Trace lane_namer_;              // names new lanes (lane())
  std::vector<profiler::KernelRecord> kernels_;
  std::vector<std::int64_t> kernel_of_span_;  // index into kernels_, -1 for none
  struct Launch {
    std::int32_t lane = 0;
    std::int64_t start_ns = 0;
  };
  std::unordered_map<std::uint64_t, Launch> launches_;  // packed (rank, correlation)
};

}  // namespace pipetune::db::import_detail
