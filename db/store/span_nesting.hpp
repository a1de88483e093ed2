// How the spans of a lane get their nesting depth (0 = outermost), written once for the store's
// writer (TraceInserter) and for a Trace indexed in memory (gui TraceLaneIndex), so both show a
// lane with the same rows. Spans are placed in nesting order, (start, longer first): a span that
// starts while others are still open (end > its start) sits one level below the innermost of
// them. A part whose spans are out of that order is placed sorted; a span that starts before the
// last one placed on its lane (an earlier part) marks the lane to be placed again whole, sorted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "profiler/trace.hpp"

namespace pipetune::db {

// Whether span a is placed before span b: it starts first or, starting together, ends later (it
// encloses b). Works on anything with start_ns and end_ns (Span, PackedSpan).
template <class A, class B>
bool nests_before(const A& a, const B& b) {
  return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
}

// The open spans of one lane while its spans are placed.
class SpanNesting {
 public:
  // The depth of the next span of the lane. One that starts before the last placed is placed
  // all the same and makes out_of_order() true: the lane is to be placed again, sorted.
  std::int32_t place(std::int64_t start_ns, std::int64_t end_ns) {
    if (placed_any_ && start_ns < last_start_) out_of_order_ = true;
    placed_any_ = true;
    last_start_ = start_ns;
    // Spans that ended by this start are closed; what is left open encloses this span.
    while (!open_ends_.empty() && open_ends_.back() <= start_ns) open_ends_.pop_back();
    const auto depth = static_cast<std::int32_t>(open_ends_.size());
    open_ends_.push_back(end_ns);
    return depth;
  }
  bool out_of_order() const { return out_of_order_; }

 private:
  std::vector<std::int64_t> open_ends_;  // ends of the spans still open, outermost first
  std::int64_t last_start_ = 0;
  bool placed_any_ = false;
  bool out_of_order_ = false;
};

// Whether each lane's spans in `part` come in nesting order (Span::lane < lane_count).
bool in_nesting_order_per_lane(std::span<const profiler::Span> part, std::size_t lane_count);
// The positions in `part` sorted by lane, then nesting order; ties keep their order.
std::vector<std::uint32_t> nesting_order_per_lane(std::span<const profiler::Span> part,
                                                  std::size_t lane_count);

// Calls place(k) for each position k in `part`, each lane's spans in nesting order.
template <class Place>
void for_each_in_nesting_order(std::span<const profiler::Span> part, std::size_t lane_count,
                               Place&& place) {
  if (in_nesting_order_per_lane(part, lane_count)) {
    for (std::size_t k = 0; k < part.size(); ++k) place(k);
  } else {
    for (const std::uint32_t k : nesting_order_per_lane(part, lane_count)) place(std::size_t{k});
  }
}

}  // namespace pipetune::db
