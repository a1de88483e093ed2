#include "profiler/analysis/op_pairing.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace pipetune::profiler::analysis {

namespace {

struct OpKey {
  SpanKind kind = SpanKind::Other;
  std::int32_t microbatch = -1;
  std::int16_t chunk = -1;
  friend auto operator<=>(const OpKey&, const OpKey&) = default;
};

std::string describe(const OpKey& k) {
  return std::string(span_kind_name(k.kind)) + " mb " + std::to_string(k.microbatch) + " chunk " +
         std::to_string(k.chunk);
}

struct TimedOp {
  std::int64_t start_ns = 0;
  std::int64_t duration_ns = 0;
  OpKey key;
};

// Each rank's compute ops inside the window, in start order (ties: by lane, as recorded).
std::map<std::int32_t, std::vector<TimedOp>> compute_ops(const Trace& t, const TimeWindow& w) {
  std::map<std::int32_t, std::vector<TimedOp>> out;
  for (const Span& s : t.spans) {
    if (!is_compute(s.kind) || s.start_ns < w.start_ns || s.start_ns >= w.end_ns) continue;
    const std::int32_t rank = t.lanes.at(static_cast<std::size_t>(s.lane)).rank;
    // An op without a chunk (an imported range names none) is its stage's one chunk, 0.
    const std::int16_t chunk = s.chunk < 0 ? std::int16_t{0} : s.chunk;
    out[rank].push_back({s.start_ns, s.end_ns - s.start_ns, OpKey{s.kind, s.microbatch, chunk}});
  }
  for (auto& [rank, ops] : out)
    std::stable_sort(ops.begin(), ops.end(),
                     [](const TimedOp& x, const TimedOp& y) { return x.start_ns < y.start_ns; });
  return out;
}

std::int64_t abs_difference(const OpPairing::OpDifference& d) {
  return d.b_ns > d.a_ns ? d.b_ns - d.a_ns : d.a_ns - d.b_ns;
}

}  // namespace

OpPairing pair_compute_ops(const Trace& a, const Trace& b, const TimeWindow& window_a,
                           const TimeWindow& window_b) {
  const auto ops_a = compute_ops(a, window_a);
  const auto ops_b = compute_ops(b, window_b);
  std::map<std::int32_t, bool> ranks;
  for (const auto& [rank, ops] : ops_a) ranks[rank] = true;
  for (const auto& [rank, ops] : ops_b) ranks[rank] = true;
  static const std::vector<TimedOp> none;
  OpPairing p;
  std::vector<OpPairing::OpDifference> differences;
  for (const auto& [rank, unused] : ranks) {
    const auto ia = ops_a.find(rank), ib = ops_b.find(rank);
    const std::vector<TimedOp>& ta = ia != ops_a.end() ? ia->second : none;
    const std::vector<TimedOp>& tb = ib != ops_b.end() ? ib->second : none;
    std::vector<OpKey> sa, sb;
    for (const TimedOp& o : ta) sa.push_back(o.key);
    for (const TimedOp& o : tb) sb.push_back(o.key);
    // Multiset match by key: an op that occurs twice in A and once in B pairs once (the k-th
    // occurrence in B with the k-th in A).
    std::map<OpKey, std::vector<std::int64_t>> durations_a;
    for (const TimedOp& o : ta) durations_a[o.key].push_back(o.duration_ns);
    std::map<OpKey, std::size_t> used;
    std::int64_t rank_paired = 0;
    for (const TimedOp& o : tb) {
      auto it = durations_a.find(o.key);
      std::size_t& k = used[o.key];
      if (it != durations_a.end() && k < it->second.size()) {
        differences.push_back({rank, describe(o.key), it->second[k], o.duration_ns});
        ++k;
        ++rank_paired;
      } else {
        ++p.only_b;
      }
    }
    p.paired += rank_paired;
    p.only_a += static_cast<std::int64_t>(sa.size()) - rank_paired;
    const std::size_t n = std::min(sa.size(), sb.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (sa[i] == sb[i]) continue;
      p.ranks_in_different_order.push_back(rank);
      if (p.first_difference.empty())
        p.first_difference = "rank " + std::to_string(rank) + ": op " + std::to_string(i) + " is " +
                             describe(sa[i]) + " in A, " + describe(sb[i]) + " in B";
      break;
    }
    if (p.first_difference.empty() && sa.size() != sb.size())
      p.first_difference = "rank " + std::to_string(rank) + " runs " + std::to_string(sa.size()) +
                           " compute ops in A, " + std::to_string(sb.size()) + " in B";
  }
  const std::size_t keep = std::min(differences.size(), OpPairing::kLargestDifferences);
  std::partial_sort(differences.begin(), differences.begin() + static_cast<std::ptrdiff_t>(keep),
                    differences.end(), [](const auto& x, const auto& y) {
                      return abs_difference(x) > abs_difference(y);
                    });
  differences.resize(keep);
  p.largest_differences = std::move(differences);
  return p;
}

}  // namespace pipetune::profiler::analysis
