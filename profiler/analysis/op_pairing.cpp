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

struct TimedOp {
  std::int64_t start_ns = 0;
  std::int64_t duration_ns = 0;
  OpKey key;
};

using RankOps = std::map<std::int32_t, std::vector<TimedOp>>;

// A layer group's gradient reduction (the schedule's R op): an all-reduce span that names its
// chunk (the step-end reduction and the simulator's barriers name none).
bool is_group_reduction(const Span& s) {
  return s.kind == SpanKind::AllReduce && s.chunk >= 0;
}

// Each rank's compute ops (or with `reductions`, its R ops) inside the window, in start order
// (ties: by lane, as recorded).
RankOps rank_ops(const Trace& t, const TimeWindow& w, bool reductions) {
  RankOps out;
  for (const Span& s : t.spans) {
    // An R op may start as the window's last op ends (the last layer group's reduction follows
    // the iteration's last backward): the window's end is its own.
    const bool inside =
        s.start_ns >= w.start_ns && (reductions ? s.start_ns <= w.end_ns : s.start_ns < w.end_ns);
    if ((reductions ? !is_group_reduction(s) : !is_compute(s.kind)) || !inside) continue;
    const std::int32_t rank = t.lanes.at(static_cast<std::size_t>(s.lane)).rank;
    // An op without a chunk (an imported range names none) is its stage's one chunk, 0.
    const std::int16_t chunk = s.chunk < 0 ? std::int16_t{0} : s.chunk;
    const std::int32_t microbatch = reductions ? -1 : s.microbatch;
    out[rank].push_back({s.start_ns, s.end_ns - s.start_ns, OpKey{s.kind, microbatch, chunk}});
  }
  for (auto& [rank, ops] : out)
    std::stable_sort(ops.begin(), ops.end(),
                     [](const TimedOp& x, const TimedOp& y) { return x.start_ns < y.start_ns; });
  return out;
}

std::string describe(const OpKey& k, bool reduction) {
  if (reduction) return "R chunk " + std::to_string(k.chunk);
  return std::string(span_kind_name(k.kind)) + " mb " + std::to_string(k.microbatch) + " chunk " +
         std::to_string(k.chunk);
}

std::int64_t abs_difference(const OpPairing::OpDifference& d) {
  return d.b_ns > d.a_ns ? d.b_ns - d.a_ns : d.a_ns - d.b_ns;
}

struct Counts {
  std::int64_t paired = 0, only_a = 0, only_b = 0;
};

// Pairs one rank's ops of A and B (the k-th occurrence of a key in B with the k-th in A) into
// `counts` and `differences`, and notes in `p` where their orders first differ.
void pair_rank(std::int32_t rank, const std::vector<TimedOp>& ta, const std::vector<TimedOp>& tb,
               bool reductions, Counts& counts, std::vector<OpPairing::OpDifference>& differences,
               OpPairing& p) {
  std::map<OpKey, std::vector<std::int64_t>> durations_a;
  for (const TimedOp& o : ta) durations_a[o.key].push_back(o.duration_ns);
  std::map<OpKey, std::size_t> used;
  std::int64_t rank_paired = 0;
  for (const TimedOp& o : tb) {
    auto it = durations_a.find(o.key);
    std::size_t& k = used[o.key];
    if (it != durations_a.end() && k < it->second.size()) {
      differences.push_back({rank, describe(o.key, reductions), it->second[k], o.duration_ns});
      ++k;
      ++rank_paired;
    } else {
      ++counts.only_b;
    }
  }
  counts.paired += rank_paired;
  counts.only_a += static_cast<std::int64_t>(ta.size()) - rank_paired;
  const char* what = reductions ? "reduction" : "op";
  const std::size_t n = std::min(ta.size(), tb.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (ta[i].key == tb[i].key) continue;
    if (std::find(p.ranks_in_different_order.begin(), p.ranks_in_different_order.end(), rank) ==
        p.ranks_in_different_order.end())
      p.ranks_in_different_order.push_back(rank);
    if (p.first_difference.empty())
      p.first_difference = "rank " + std::to_string(rank) + ": " + what + " " + std::to_string(i) +
                           " is " + describe(ta[i].key, reductions) + " in A, " +
                           describe(tb[i].key, reductions) + " in B";
    break;
  }
  if (p.first_difference.empty() && ta.size() != tb.size())
    p.first_difference = "rank " + std::to_string(rank) + " runs " + std::to_string(ta.size()) +
                         (reductions ? " R ops in A, " : " compute ops in A, ") +
                         std::to_string(tb.size()) + " in B";
}

}  // namespace

OpPairing pair_compute_ops(const Trace& a, const Trace& b, const TimeWindow& window_a,
                           const TimeWindow& window_b) {
  OpPairing p;
  std::vector<OpPairing::OpDifference> differences;
  for (const bool reductions : {false, true}) {
    const RankOps ops_a = rank_ops(a, window_a, reductions);
    const RankOps ops_b = rank_ops(b, window_b, reductions);
    std::map<std::int32_t, bool> ranks;
    for (const auto& [rank, ops] : ops_a) ranks[rank] = true;
    for (const auto& [rank, ops] : ops_b) ranks[rank] = true;
    static const std::vector<TimedOp> none;
    Counts counts;
    for (const auto& [rank, unused] : ranks) {
      const auto ia = ops_a.find(rank), ib = ops_b.find(rank);
      pair_rank(rank, ia != ops_a.end() ? ia->second : none, ib != ops_b.end() ? ib->second : none,
                reductions, counts, differences, p);
    }
    if (reductions) {
      p.reductions_paired = counts.paired;
      p.reductions_only_a = counts.only_a;
      p.reductions_only_b = counts.only_b;
    } else {
      p.paired = counts.paired;
      p.only_a = counts.only_a;
      p.only_b = counts.only_b;
    }
  }
  std::sort(p.ranks_in_different_order.begin(), p.ranks_in_different_order.end());
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
