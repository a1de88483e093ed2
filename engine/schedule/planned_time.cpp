#include "engine/schedule/planned_time.hpp"

#include <cstddef>
#include <cstring>
#include <memory>

namespace pipetune::schedule {

namespace {

// An op as one word: kind, chunk and micro-batch where Op keeps them (its first eight bytes, the
// padding byte after the kind masked out) and the pairing flag in that byte. Read with memcpy:
// the tuner fingerprints every schedule it simulates, and field by field costs twice as much.
std::uint64_t op_word(const Op& op) {
  static_assert(sizeof(Op) == 12 && offsetof(Op, kind) == 0 && offsetof(Op, chunk) == 2 &&
                offsetof(Op, microbatch) == 4 && offsetof(Op, overlaps_previous) == 8);
  std::uint64_t word = 0;
  std::memcpy(&word, &op, sizeof word);
  return (word & ~std::uint64_t{0xff00}) | static_cast<std::uint64_t>(op.overlaps_previous) << 8;
}

}  // namespace

std::uint64_t op_fingerprint(const Schedule& s) {
  // FNV-1a over one word per op, in four interleaved lanes (one multiply chain each, so they
  // overlap), each rank's ops and its end mixed into all four.
  constexpr std::uint64_t kPrime = 1099511628211ull;
  std::uint64_t h[4] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                        0x165667b19e3779f9ull};
  for (const std::vector<Op>& ops : s.ranks) {
    const std::size_t n = ops.size();
    std::size_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (std::size_t k = 0; k < 4; ++k) h[k] = (h[k] ^ op_word(ops[i + k])) * kPrime;
    for (; i < n; ++i) h[0] = (h[0] ^ op_word(ops[i])) * kPrime;
    for (std::uint64_t& lane : h) lane = (lane ^ n) * kPrime;
  }
  return h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7);
}

void set_planned_time(Schedule& s, const CostTable& costs, double iteration) {
  // The planned model has neither (the simulator times them on streams of their own).
  for (const std::vector<Op>& ops : s.ranks)
    for (const Op& op : ops)
      if (is_reduction(op.kind) || op.overlaps_previous) {
        s.planned_time.reset();
        return;
      }
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
