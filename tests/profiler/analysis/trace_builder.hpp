// Hand-made traces for the analysis tests: one call per span or memory sample.
#pragma once

#include <cstdint>

#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis::testing {

struct SpanSpec {
  std::int32_t rank = 0;
  Stream stream = Stream::Compute;
  SpanKind kind = SpanKind::F;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int32_t microbatch = -1;
  std::int16_t chunk = -1;
  std::int32_t peer = -1;
  std::int32_t lane_index = 0;
};

// Appends the span and returns its index in trace.spans.
inline std::size_t add(Trace& t, const SpanSpec& s) {
  Span span;
  span.lane = t.lane(s.rank, s.stream, s.lane_index);
  span.kind = s.kind;
  span.start_ns = s.start_ns;
  span.end_ns = s.end_ns;
  span.microbatch = s.microbatch;
  span.chunk = s.chunk;
  span.peer = s.peer;
  t.spans.push_back(span);
  return t.spans.size() - 1;
}

inline void sample(Trace& t, std::int32_t rank, MemoryCategory c, std::int64_t t_ns,
                   std::int64_t bytes) {
  t.memory.push_back({rank, c, t_ns, bytes});
}

constexpr std::int64_t kSecond = 1'000'000'000;

}  // namespace pipetune::profiler::analysis::testing
