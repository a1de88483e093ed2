#include "engine/schedule/planned_time.hpp"

#include <memory>

namespace pipetune::schedule {

std::uint64_t op_fingerprint(const Schedule& s) {
  // FNV-1a over one 64-bit word per op and one per rank's end.
  constexpr std::uint64_t kPrime = 1099511628211ull;
  std::uint64_t h = 1469598103934665603ull;
  for (const std::vector<Op>& ops : s.ranks) {
    for (const Op& op : ops) {
      const std::uint64_t word =
          static_cast<std::uint64_t>(op.kind) |
          static_cast<std::uint64_t>(static_cast<std::uint16_t>(op.chunk)) << 8 |
          static_cast<std::uint64_t>(op.overlaps_previous) << 24 |
          static_cast<std::uint64_t>(static_cast<std::uint32_t>(op.microbatch)) << 32;
      h = (h ^ word) * kPrime;
    }
    h = (h ^ ~std::uint64_t{0}) * kPrime;
  }
  return h;
}

void set_planned_time(Schedule& s, const CostTable& costs, double iteration) {
  auto t = std::make_shared<PlannedTime>();
  t->costs.resize(static_cast<std::size_t>(s.stages) * kOpKindCount);
  for (int r = 0; r < s.stages; ++r)
    for (OpKind k : kAllOpKinds)
      t->costs[static_cast<std::size_t>(r) * kOpKindCount + static_cast<std::size_t>(k)] =
          costs.cost(r, k);
  t->p2p = costs.p2p_time();
  t->collective = costs.collective_time;
  t->iteration = iteration;
  t->fingerprint = op_fingerprint(s);
  s.planned_time = std::move(t);
}

}  // namespace pipetune::schedule
