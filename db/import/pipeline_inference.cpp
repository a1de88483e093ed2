#include "db/import/pipeline_inference.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace pipetune::db {

namespace {

using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;

struct Transfer {
  std::int64_t start_ns = 0, end_ns = 0;
  std::int32_t rank = 0;
};

bool is_point_to_point(SpanKind k) {
  return k == SpanKind::Send || k == SpanKind::Recv;
}

// The point-to-point kernels on GPU lanes that take time, by end.
std::vector<Transfer> gpu_transfers(const profiler::Trace& trace) {
  std::vector<Transfer> transfers;
  for (const Span& s : trace.spans) {
    const profiler::Lane& lane = trace.lanes.at(static_cast<std::size_t>(s.lane));
    if (lane.stream == Stream::Gpu && is_point_to_point(s.kind) && s.end_ns > s.start_ns)
      transfers.push_back({s.start_ns, s.end_ns, lane.rank});
  }
  std::sort(transfers.begin(), transfers.end(),
            [](const Transfer& a, const Transfer& b) { return a.end_ns < b.end_ns; });
  return transfers;
}

// The two sides of one transfer end together (each completes when the data has moved), so a
// kernel's peer is the other rank's point-to-point kernel whose end is nearest to its own; -1
// when that is tied or does not overlap the kernel. `transfers` is sorted by end.
std::int64_t nearest_peer(const std::vector<Transfer>& transfers, std::size_t i) {
  const std::size_t n = transfers.size();
  std::int64_t best = -1, best_gap = INT64_MAX;
  bool tie = false;
  const auto consider = [&](std::size_t j) {
    if (transfers[j].rank == transfers[i].rank) return true;
    const std::int64_t gap = std::abs(transfers[j].end_ns - transfers[i].end_ns);
    if (gap > best_gap) return false;  // sorted by end: the rest of this side is farther
    tie = gap == best_gap;
    if (gap < best_gap) best_gap = gap, best = static_cast<std::int64_t>(j);
    return true;
  };
  for (std::size_t j = i + 1; j < n && consider(j);) ++j;
  for (std::size_t j = i; j-- > 0 && consider(j);) {
  }
  // The peer must at least overlap the kernel; a tie is no evidence.
  if (best < 0 || tie) return -1;
  const Transfer& t = transfers[static_cast<std::size_t>(best)];
  return t.start_ns < transfers[i].end_ns && transfers[i].start_ns < t.end_ns ? best : -1;
}

// Per pair of ranks (lower first): how many kernel pairs matched and the earliest start among
// them; per rank, its transfers.
struct PairCounts {
  std::map<std::pair<std::int32_t, std::int32_t>, std::pair<std::int64_t, std::int64_t>> pairs;
  std::map<std::int32_t, std::int64_t> per_rank;
};

// Transfers of different pairs at the same moment differ in size, hence in end; a pair is
// counted when the two kernels are each other's nearest (mutual, and unique).
PairCounts count_mutual_pairs(const std::vector<Transfer>& transfers) {
  const std::size_t n = transfers.size();
  std::vector<std::int64_t> peer(n);
  for (std::size_t i = 0; i < n; ++i) peer[i] = nearest_peer(transfers, i);
  PairCounts c;
  for (std::size_t i = 0; i < n; ++i) {
    ++c.per_rank[transfers[i].rank];
    const std::int64_t j = peer[i];
    if (j <= static_cast<std::int64_t>(i) ||
        peer[static_cast<std::size_t>(j)] != static_cast<std::int64_t>(i))
      continue;
    const Transfer& t = transfers[static_cast<std::size_t>(j)];
    const auto key = std::minmax(transfers[i].rank, t.rank);
    auto [it, fresh] = c.pairs.try_emplace({key.first, key.second}, 0, INT64_MAX);
    ++it->second.first;
    it->second.second = std::min({it->second.second, transfers[i].start_ns, t.start_ns});
  }
  return c;
}

// The pipeline links kept: each rank's neighbours, the matched kernels behind them, and the
// pair of the earliest matched transfer.
struct Links {
  std::map<std::int32_t, std::vector<std::int32_t>> neighbours;
  std::int64_t evidence = 0;
  std::pair<std::int32_t, std::int32_t> first_pair{-1, -1};
};

// A pipeline link pairs again and again; a chance pairing of two non-neighbours is rare: keep
// pairs matched for at least a quarter of the quieter rank's transfers.
Links pipeline_links(PairCounts& c) {
  Links l;
  std::int64_t earliest = INT64_MAX;
  for (const auto& [pair, stats] : c.pairs) {
    const std::int64_t quieter = std::min(c.per_rank[pair.first], c.per_rank[pair.second]);
    if (stats.first < 2 || 4 * stats.first < quieter) continue;
    l.neighbours[pair.first].push_back(pair.second);
    l.neighbours[pair.second].push_back(pair.first);
    l.evidence += stats.first;
    if (stats.second < earliest) {
      earliest = stats.second;
      l.first_pair = pair;
    }
  }
  return l;
}

// The ranks in stage order when the links make one line through all `rank_count` ranks: two
// ends of degree 1, the rest degree 2, connected; stage 0 is the end in the earliest transfer
// (else the lower rank). nullopt otherwise.
std::optional<std::vector<std::int32_t>> line_through(Links& l, std::size_t rank_count) {
  if (l.neighbours.size() != rank_count) return std::nullopt;
  std::vector<std::int32_t> ends;
  for (const auto& [rank, n] : l.neighbours) {
    if (n.size() > 2) return std::nullopt;
    if (n.size() == 1) ends.push_back(rank);
  }
  if (ends.size() != 2) return std::nullopt;
  std::int32_t start = std::min(ends[0], ends[1]);
  if (l.first_pair.first == ends[0] || l.first_pair.second == ends[0]) start = ends[0];
  if (l.first_pair.first == ends[1] || l.first_pair.second == ends[1]) start = ends[1];
  std::vector<std::int32_t> line;
  std::int32_t previous = -1, at = start;
  while (at >= 0 && line.size() <= rank_count) {
    line.push_back(at);
    std::int32_t next = -1;
    for (std::int32_t n : l.neighbours[at])
      if (n != previous) next = n;
    previous = at;
    at = next;
  }
  if (line.size() != rank_count) return std::nullopt;  // a ring or a broken line
  return line;
}

// Every rank the profile names (lanes and their names, memory, counters, kernels, ranks) through
// new_rank; ranks re-sorted.
void renumber_ranks(ImportedProfile& profile,
                    const std::map<std::int32_t, std::int32_t>& new_rank) {
  const auto renumber = [&](std::int32_t r) {
    auto it = new_rank.find(r);
    return it == new_rank.end() ? r : it->second;
  };
  profiler::Trace& t = profile.trace;
  for (profiler::Lane& l : t.lanes) {
    const std::string old_prefix = "rank " + std::to_string(l.rank);
    l.rank = renumber(l.rank);
    if (l.name.rfind(old_prefix, 0) == 0)
      l.name = "rank " + std::to_string(l.rank) + l.name.substr(old_prefix.size());
  }
  for (auto& m : t.memory) m.rank = renumber(m.rank);
  for (auto& c : t.counters) c.rank = renumber(c.rank);
  for (auto& k : profile.kernels) k.rank = renumber(k.rank);
  for (ImportedRank& r : profile.ranks) {
    r.source += "; stage " + std::to_string(renumber(r.rank)) + " of the pipeline inferred from " +
                "point-to-point partners (was rank " + std::to_string(r.rank) + ")";
    r.rank = renumber(r.rank);
  }
  std::sort(profile.ranks.begin(), profile.ranks.end(),
            [](const ImportedRank& a, const ImportedRank& b) { return a.rank < b.rank; });
}

// Lanes back in (rank, stream, index) order; returns each old lane's new index.
std::vector<std::int32_t> sort_lanes(profiler::Trace& t) {
  const std::size_t lane_count = t.lanes.size();
  std::vector<std::int32_t> order(lane_count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const auto& x = t.lanes[static_cast<std::size_t>(a)];
    const auto& y = t.lanes[static_cast<std::size_t>(b)];
    return std::tie(x.rank, x.stream, x.index) < std::tie(y.rank, y.stream, y.index);
  });
  std::vector<std::int32_t> lane_of(lane_count);
  std::vector<profiler::Lane> lanes;
  for (std::size_t i = 0; i < lane_count; ++i) {
    lane_of[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
    lanes.push_back(std::move(t.lanes[static_cast<std::size_t>(order[i])]));
  }
  t.lanes = std::move(lanes);
  return lane_of;
}

// Spans moved to their lanes' new indices and sorted by (lane, start, longer first), with the
// kernel records in the order of their spans, as the importers leave them.
void sort_spans_and_kernels(ImportedProfile& profile, const std::vector<std::int32_t>& lane_of) {
  profiler::Trace& t = profile.trace;
  // Which spans carry a kernel record: those on Gpu lanes of the kinds the importers record.
  std::vector<std::int64_t> record_of(t.spans.size(), -1);
  std::int64_t k = 0;
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    Span& s = t.spans[i];
    s.lane = lane_of[static_cast<std::size_t>(s.lane)];
    if (t.lanes[static_cast<std::size_t>(s.lane)].stream == Stream::Gpu &&
        k < static_cast<std::int64_t>(profile.kernels.size()))
      record_of[i] = k++;
  }
  std::vector<std::size_t> span_order(t.spans.size());
  std::iota(span_order.begin(), span_order.end(), std::size_t{0});
  std::stable_sort(span_order.begin(), span_order.end(), [&](std::size_t a, std::size_t b) {
    const Span& x = t.spans[a];
    const Span& y = t.spans[b];
    if (x.lane != y.lane) return x.lane < y.lane;
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    return x.end_ns > y.end_ns;
  });
  std::vector<Span> spans;
  std::vector<profiler::KernelRecord> kernels;
  spans.reserve(t.spans.size());
  kernels.reserve(profile.kernels.size());
  for (std::size_t i : span_order) {
    spans.push_back(t.spans[i]);
    if (record_of[i] >= 0)
      kernels.push_back(std::move(profile.kernels[static_cast<std::size_t>(record_of[i])]));
  }
  t.spans = std::move(spans);
  profile.kernels = std::move(kernels);
}

}  // namespace

std::optional<InferredPipeline> infer_pipeline_from_p2p(const profiler::Trace& trace) {
  std::set<std::int32_t> ranks;
  for (const profiler::Lane& l : trace.lanes) ranks.insert(l.rank);
  const std::vector<Transfer> transfers = gpu_transfers(trace);
  // Two ranks that exchange data form a "line" whatever they do (a sequence-parallel all-to-all
  // is point-to-point kernels between two ranks too): a pipeline is inferred from three ranks on.
  if (ranks.size() < 3 || transfers.empty()) return std::nullopt;
  PairCounts counts = count_mutual_pairs(transfers);
  Links links = pipeline_links(counts);
  std::optional<std::vector<std::int32_t>> line = line_through(links, ranks.size());
  if (!line) return std::nullopt;
  InferredPipeline p;
  p.stage_ranks = std::move(*line);
  std::string text;
  for (std::int32_t r : p.stage_ranks) text += (text.empty() ? "" : "-") + std::to_string(r);
  p.evidence =
      "ranks " + text + " by " + std::to_string(links.evidence) + " matched point-to-point kernels";
  return p;
}

void apply_inferred_pipeline(ImportedProfile& profile, const InferredPipeline& pipeline) {
  const bool explicit_ranks = std::any_of(profile.ranks.begin(), profile.ranks.end(),
                                          [](const ImportedRank& r) { return !r.ordered; });
  const std::size_t n = pipeline.stage_ranks.size();
  bool identity = true;
  for (std::size_t s = 0; s < n; ++s)
    identity = identity && pipeline.stage_ranks[s] == static_cast<std::int32_t>(s);
  if (explicit_ranks || identity) {
    profile.warnings.push_back(
        "pipeline stages inferred from point-to-point partners: " + pipeline.evidence +
        (identity ? " (already in stage order)" : " (ranks kept: the profile names them)"));
    return;
  }
  std::map<std::int32_t, std::int32_t> new_rank;
  for (std::size_t s = 0; s < n; ++s)
    new_rank[pipeline.stage_ranks[s]] = static_cast<std::int32_t>(s);
  renumber_ranks(profile, new_rank);
  sort_spans_and_kernels(profile, sort_lanes(profile.trace));
  profile.warnings.push_back("pipeline stages inferred from point-to-point partners: " +
                             pipeline.evidence + "; ranks renumbered in stage order");
}

}  // namespace pipetune::db
