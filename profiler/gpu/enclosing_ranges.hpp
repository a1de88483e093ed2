// Which host range was open when a GPU activity was launched: an index over a set of spans
// (ranges of one thread, or one rank's ops) answering "the innermost span containing time t".
// Shared by the engine's CUPTI capture (gpu_capture.hpp) and the importers' kernel attribution
// (db/import), so both attribute a kernel to an op by the same rule.
#pragma once

#include <cstdint>
#include <vector>

#include "profiler/trace.hpp"

namespace pipetune::profiler {

class EnclosingRanges {
 public:
  // `spans` are indices into trace.spans; the trace must outlive the index and keep those spans.
  EnclosingRanges(const Trace& trace, std::vector<std::int64_t> spans);

  // The innermost span containing t (start <= t < end, or t == start for a zero-length span):
  // of the spans containing t, the one that starts latest. -1 when none does.
  std::int64_t innermost(std::int64_t t) const;

  bool empty() const { return spans_.empty(); }

 private:
  const Span& span(std::int64_t i) const { return trace_->spans[static_cast<std::size_t>(i)]; }

  const Trace* trace_;
  std::vector<std::int64_t> spans_;  // by start
  std::int64_t max_length_ = 0;      // longest span: bounds the backward scan
};

}  // namespace pipetune::profiler
