// Op-for-op pairing of two runs of one plan (a prediction and a measurement, or two
// measurements): a compute span of A pairs with one of B when both are on the same rank with
// the same kind, micro-batch and chunk (an op without a chunk, as imported ranges are, counts as
// chunk 0), inside each run's window. The layer groups' gradient reductions (the schedule's R
// ops: all-reduce spans that name a chunk) pair the same way by rank and chunk, in their own
// sequence: they run on a lane of their own, so their order against compute is not compared.
// When the two runs executed the same Schedule every op pairs and each rank runs its ops in the
// same order; what does not pair says where the schedules differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/analysis/time_window.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

struct OpPairing {
  std::int64_t paired = 0;
  std::int64_t only_a = 0;  // compute ops of A with no partner in B
  std::int64_t only_b = 0;
  // R ops (layered gradient reduction) paired, and those of A or B alone.
  std::int64_t reductions_paired = 0, reductions_only_a = 0, reductions_only_b = 0;
  // Ranks on which the paired ops start in a different order in A and B.
  std::vector<std::int32_t> ranks_in_different_order;
  // The first difference, in words ("rank 2: op 5 is B mb 3 chunk 0 in A, F mb 4 chunk 1 in
  // B"); empty when every op pairs in the same order.
  std::string first_difference;
  // Every op paired, in the same order on every rank; false when nothing paired at all.
  bool identical() const {
    return paired > 0 && only_a == 0 && only_b == 0 && reductions_only_a == 0 &&
           reductions_only_b == 0 && ranks_in_different_order.empty();
  }
  // The paired ops whose durations differ most (|B - A|, largest first, at most
  // kLargestDifferences): where time went differently, op by op.
  struct OpDifference {
    std::int32_t rank = 0;
    std::string op;  // "F mb 3 chunk 0"
    std::int64_t a_ns = 0, b_ns = 0;
  };
  static constexpr std::size_t kLargestDifferences = 5;
  std::vector<OpDifference> largest_differences;
};

// Compute spans (is_compute), and R ops apart; a rank's spans on several lanes count as one
// sequence of each.
OpPairing pair_compute_ops(const Trace& a, const Trace& b, const TimeWindow& window_a,
                           const TimeWindow& window_b);

}  // namespace pipetune::profiler::analysis
