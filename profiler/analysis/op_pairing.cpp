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

// Each rank's compute ops inside the window, in start order (ties: by lane, as recorded).
std::map<std::int32_t, std::vector<OpKey>> compute_ops(const Trace& t, const TimeWindow& w) {
  std::map<std::int32_t, std::vector<std::pair<std::int64_t, OpKey>>> timed;
  for (const Span& s : t.spans) {
    if (!is_compute(s.kind) || s.start_ns < w.start_ns || s.start_ns >= w.end_ns) continue;
    const std::int32_t rank = t.lanes.at(static_cast<std::size_t>(s.lane)).rank;
    timed[rank].push_back({s.start_ns, OpKey{s.kind, s.microbatch, s.chunk}});
  }
  std::map<std::int32_t, std::vector<OpKey>> out;
  for (auto& [rank, ops] : timed) {
    std::stable_sort(ops.begin(), ops.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    auto& seq = out[rank];
    for (const auto& [start, key] : ops) seq.push_back(key);
  }
  return out;
}

}  // namespace

OpPairing pair_compute_ops(const Trace& a, const Trace& b, const TimeWindow& window_a,
                           const TimeWindow& window_b) {
  const auto ops_a = compute_ops(a, window_a);
  const auto ops_b = compute_ops(b, window_b);
  std::map<std::int32_t, bool> ranks;
  for (const auto& [rank, ops] : ops_a) ranks[rank] = true;
  for (const auto& [rank, ops] : ops_b) ranks[rank] = true;
  static const std::vector<OpKey> none;
  OpPairing p;
  for (const auto& [rank, unused] : ranks) {
    const auto ia = ops_a.find(rank), ib = ops_b.find(rank);
    const std::vector<OpKey>& sa = ia != ops_a.end() ? ia->second : none;
    const std::vector<OpKey>& sb = ib != ops_b.end() ? ib->second : none;
    // Multiset match by key: an op that occurs twice in A and once in B pairs once.
    std::map<OpKey, std::int64_t> count;
    for (const OpKey& k : sa) ++count[k];
    std::int64_t rank_paired = 0;
    for (const OpKey& k : sb) {
      auto it = count.find(k);
      if (it != count.end() && it->second > 0) {
        --it->second;
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
  return p;
}

}  // namespace pipetune::profiler::analysis
