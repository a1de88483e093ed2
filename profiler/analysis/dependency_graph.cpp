#include "profiler/analysis/dependency_graph.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "profiler/analysis/analysis_error.hpp"

namespace pipetune::profiler::analysis::detail {

namespace {

bool is_collective(SpanKind k) {
  return is_communication(k) && k != SpanKind::Send && k != SpanKind::Recv;
}

// The thread or stream that orders a span: on a rank thread (NestedComm::Wait, non-GPU lanes)
// the rank's slot; otherwise its lane, and on a P2P lane its lane and peer (one link each).
class Sequencer {
 public:
  Sequencer(const Trace& trace, const SpanRoles& roles) {
    const auto slots = static_cast<std::uint64_t>(roles.ranks().size());
    base_.resize(trace.lanes.size());
    per_peer_.resize(trace.lanes.size());
    merged_.resize(trace.lanes.size());
    for (std::size_t l = 0; l < trace.lanes.size(); ++l) {
      const Stream stream = trace.lanes[l].stream;
      const std::int32_t slot = roles.slot_of_lane(static_cast<std::int32_t>(l));
      const bool merged = roles.nested_waits() && stream != Stream::Gpu && slot >= 0;
      merged_[l] = merged ? 1 : 0;
      base_[l] = merged ? static_cast<std::uint64_t>(slot) : slots + l;
      per_peer_[l] = !merged && stream == Stream::P2P ? 1 : 0;
    }
  }
  std::uint64_t key(const Span& s) const {
    const auto l = static_cast<std::size_t>(s.lane);
    const std::uint64_t peer =
        per_peer_[l] ? static_cast<std::uint64_t>(static_cast<std::uint32_t>(s.peer + 1)) : 0;
    return (base_[l] << 32) | peer;
  }
  bool merged(const Span& s) const { return merged_[static_cast<std::size_t>(s.lane)] != 0; }

 private:
  std::vector<std::uint64_t> base_;
  std::vector<std::uint8_t> per_peer_, merged_;
};

class Builder {
 public:
  Builder(const Trace& trace, const SpanRoles& roles, const TimeWindow& window,
          const CriticalPathOptions& options, std::int64_t tolerance)
      : trace_(trace),
        roles_(roles),
        window_(window),
        options_(options),
        tol_(tolerance),
        seq_(trace, roles) {}

  DependencyGraph build() {
    make_nodes();
    const std::size_t n = g_.size();
    g_.data.assign(n, -1);
    g_.other.assign(n, -1);
    g_.other_kind.assign(n, PathEdge::Start);
    find_overlapped_pairs();
    infer_pipeline_data();
    link_overlapped_pairs();
    match_send_recv();
    add_issue_edges();
    add_completion_edges();
    group_collectives();
    return std::move(g_);
  }

 private:
  const Span& span_of(std::size_t node) const { return trace_.spans[g_.span[node]]; }
  std::int32_t slot_of(std::size_t node) const { return roles_.slot_of_lane(span_of(node).lane); }
  std::int32_t rank_of(std::size_t node) const {
    return trace_.lanes[static_cast<std::size_t>(span_of(node).lane)].rank;
  }

  std::int32_t add_node(std::uint32_t span, std::int64_t start, std::int64_t end,
                        std::uint8_t flags, std::int32_t prev) {
    g_.span.push_back(span);
    g_.start.push_back(start);
    g_.end.push_back(end);
    g_.flags.push_back(flags);
    g_.prev.push_back(prev);
    return static_cast<std::int32_t>(g_.span.size() - 1);
  }

  // Selected spans in (sequence, start, trace) order.
  std::vector<std::uint32_t> select() const {
    std::vector<std::uint32_t> sel;
    for (std::size_t i = 0; i < trace_.spans.size(); ++i) {
      const Span& s = trace_.spans[i];
      if (roles_.role(s) == SpanRole::None || roles_.slot_of_lane(s.lane) < 0) continue;
      if (!in_window(s, window_)) continue;
      sel.push_back(static_cast<std::uint32_t>(i));
    }
    const auto less = [&](std::uint32_t a, std::uint32_t b) {
      const Span& x = trace_.spans[a];
      const Span& y = trace_.spans[b];
      const std::uint64_t kx = seq_.key(x), ky = seq_.key(y);
      if (kx != ky) return kx < ky;
      if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
      // Same start: on a rank thread a compute span before the communication it may hold; then
      // trace order, which is execution order for the simulator and the recorder (a zero-length
      // op that ran first stays first).
      if (seq_.merged(x)) {
        const bool cx = roles_.role(x) == SpanRole::Compute;
        const bool cy = roles_.role(y) == SpanRole::Compute;
        if (cx != cy) return cx;
      }
      return a < b;
    };
    if (!std::is_sorted(sel.begin(), sel.end(), less)) std::sort(sel.begin(), sel.end(), less);
    return sel;
  }

  void make_nodes() {
    const std::vector<std::uint32_t> sel = select();
    const std::size_t reserve = sel.size() + sel.size() / 8;
    g_.span.reserve(reserve);
    g_.start.reserve(reserve);
    g_.end.reserve(reserve);
    g_.flags.reserve(reserve);
    g_.prev.reserve(reserve);
    for (std::size_t lo = 0; lo < sel.size();) {
      const std::uint64_t key = seq_.key(trace_.spans[sel[lo]]);
      std::size_t hi = lo;
      while (hi < sel.size() && seq_.key(trace_.spans[sel[hi]]) == key) ++hi;
      if (seq_.merged(trace_.spans[sel[lo]])) {
        thread_nodes(sel, lo, hi);
      } else {
        std::int32_t prev = -1;
        for (std::size_t i = lo; i < hi; ++i) {
          const Span& s = trace_.spans[sel[i]];
          const std::uint8_t role = roles_.role(s) == SpanRole::Compute ? kComputeNode : kCommNode;
          prev = add_node(sel[i], s.start_ns, s.end_ns, role | kFirstPiece | kLastPiece, prev);
        }
      }
      lo = hi;
    }
  }

  // One rank thread: compute spans split into pieces around the communication nested in them.
  void thread_nodes(const std::vector<std::uint32_t>& sel, std::size_t lo, std::size_t hi) {
    std::int32_t last = -1;
    struct Open {
      bool active = false;
      std::uint32_t span = 0;
      std::int64_t start = 0, cursor = 0, end = 0;
      std::int32_t first = -1, last = -1;
      bool has_recv = false;
    } open;
    const auto piece = [&](std::int64_t a, std::int64_t b) {
      const std::uint8_t first = open.first < 0 ? kFirstPiece : 0;
      last = add_node(open.span, a, b, kComputeNode | kThreadNode | first, last);
      if (open.first < 0) open.first = last;
      open.last = last;
    };
    const auto close = [&] {
      if (!open.active) return;
      if (open.cursor < open.end || open.first < 0)
        piece(std::min(open.cursor, open.end), open.end);
      g_.flags[static_cast<std::size_t>(open.last)] |= kLastPiece;
      if (open.has_recv) g_.flags[static_cast<std::size_t>(open.first)] |= kHasNestedRecv;
      open.active = false;
    };
    for (std::size_t i = lo; i < hi; ++i) {
      const std::uint32_t idx = sel[i];
      const Span& s = trace_.spans[idx];
      if (roles_.role(s) == SpanRole::Compute) {
        close();
        open = Open{};
        open.active = true;
        open.span = idx;
        open.start = open.cursor = s.start_ns;
        open.end = s.end_ns;
        continue;
      }
      const bool nested = open.active && s.start_ns >= open.start && s.end_ns <= open.end;
      if (nested) {
        if (s.start_ns > open.cursor) piece(open.cursor, s.start_ns);
        if (s.kind == SpanKind::Recv) open.has_recv = true;
        open.cursor = std::max(open.cursor, s.end_ns);
      } else {
        close();
      }
      last = add_node(idx, s.start_ns, s.end_ns, kCommNode | kThreadNode | kFirstPiece | kLastPiece,
                      last);
    }
    close();
  }

  // ---- pipeline data dependencies ----

  struct Entry {
    std::uint64_t key = 0;
    std::uint32_t first = 0;  // first piece of the span (consumer side)
    std::uint32_t last = 0;   // last piece (producer side)
  };
  static constexpr std::uint64_t kNoKey = std::numeric_limits<std::uint64_t>::max();

  static int op_class(SpanKind k) {
    switch (k) {
      case SpanKind::F:
        return 0;
      case SpanKind::B:
      case SpanKind::BW:
        return 1;
      case SpanKind::W:
        return 2;
      default:
        return -1;
    }
  }

  // replica (16 bits) | class (2) | group (14) | micro-batch (32); kNoKey when out of range.
  static std::uint64_t pack(std::int64_t replica, int cls, std::int64_t group, std::int64_t mb) {
    if (replica < 0 || replica >= (1 << 16) || group < 0 || group >= (1 << 14) || mb < 0 ||
        mb > std::numeric_limits<std::int32_t>::max())
      return kNoKey;
    return (static_cast<std::uint64_t>(replica) << 48) | (static_cast<std::uint64_t>(cls) << 46) |
           (static_cast<std::uint64_t>(group) << 32) | static_cast<std::uint64_t>(mb);
  }

  struct OpShape {
    int stages = 0;  // p
    int chunks = 0;  // v
  };

  // Where a rank sits: its stage and its replica (the key part that pairs producers with
  // consumers); stage -1 for a rank outside the layout.
  struct Place {
    int stage = -1;
    std::int64_t replica = 0;
  };

  // Per-stage layouts: rank r of stage s has local index r - first(s) = tp_rank + tp(s) *
  // dp_rank, and replica dp_rank * max_tp_ + tp_rank, so that a producer stage of another tp is
  // found by taking the tp rank modulo its tp (producer_replica).
  void make_places() {
    places_.clear();
    max_tp_ = 1;
    if (options_.stage_tp.empty()) return;
    if (options_.dp < 1)
      throw AnalysisError("critical_path: dp must be at least 1 (got " +
                          std::to_string(options_.dp) + ")");
    for (const std::int32_t t : options_.stage_tp) {
      if (t < 1)
        throw AnalysisError("critical_path: stage_tp entries must be at least 1 (got " +
                            std::to_string(t) + ")");
      max_tp_ = std::max(max_tp_, t);
    }
    // Up to the trace's highest rank only (the layout may name more ranks than it recorded).
    std::int64_t ranks = 0;
    for (const Lane& lane : trace_.lanes)
      ranks = std::max<std::int64_t>(ranks, static_cast<std::int64_t>(lane.rank) + 1);
    for (std::size_t stage = 0; stage < options_.stage_tp.size(); ++stage) {
      const std::int64_t t = options_.stage_tp[stage];
      for (std::int64_t local = 0; local < t * options_.dp; ++local) {
        if (static_cast<std::int64_t>(places_.size()) >= ranks) return;
        places_.push_back({static_cast<int>(stage), local / t * max_tp_ + local % t});
      }
    }
  }

  Place place_of(std::int32_t rank) const {
    if (rank < 0) return {};
    if (options_.stage_tp.empty())
      return {rank / options_.ranks_per_stage, rank % options_.ranks_per_stage};
    if (static_cast<std::size_t>(rank) >= places_.size()) return {};
    return places_[static_cast<std::size_t>(rank)];
  }

  // The replica of group `group`'s producer for a consumer of replica `replica` (itself unless
  // stages differ in tp); -1 when the group's stage is outside the layout.
  std::int64_t producer_replica(std::int64_t replica, std::int64_t group, ChunkPlacement placement,
                                const OpShape& shape) const {
    if (options_.stage_tp.empty()) return replica;
    const std::int64_t p = shape.stages;
    const std::int64_t stage =
        placement == ChunkPlacement::VShape ? (group < p ? group : 2 * p - 1 - group) : group % p;
    if (stage < 0 || stage >= static_cast<std::int64_t>(options_.stage_tp.size())) return -1;
    const std::int64_t tp = options_.stage_tp[static_cast<std::size_t>(stage)];
    return replica / max_tp_ * max_tp_ + replica % max_tp_ % tp;
  }

  OpShape op_shape() const {
    OpShape shape;
    for (std::size_t i = 0; i < g_.size(); ++i) {
      if (!(g_.flags[i] & kFirstPiece) || !(g_.flags[i] & kComputeNode)) continue;
      const Span& s = span_of(i);
      if (op_class(s.kind) < 0 || s.microbatch < 0) continue;
      const Place place = place_of(rank_of(i));
      if (place.stage < 0) continue;
      shape.stages = std::max(shape.stages, place.stage + 1);
      shape.chunks = std::max(shape.chunks, std::max<int>(s.chunk, 0) + 1);
    }
    return shape;
  }

  std::int64_t group_of(int stage, int chunk, ChunkPlacement placement,
                        const OpShape& shape) const {
    if (placement == ChunkPlacement::VShape) {
      if (chunk == 0) return stage;
      if (chunk == 1) return 2 * shape.stages - 1 - stage;
      return -1;
    }
    return static_cast<std::int64_t>(chunk) * shape.stages + stage;
  }

  // The entry key of a node (first piece of an F/B/BW/W span with a micro-batch), or kNoKey.
  std::uint64_t entry_key(std::size_t i, ChunkPlacement placement, const OpShape& shape) const {
    if (!(g_.flags[i] & kFirstPiece) || !(g_.flags[i] & kComputeNode)) return kNoKey;
    const Span& s = span_of(i);
    const int cls = op_class(s.kind);
    const Place place = place_of(rank_of(i));
    if (cls < 0 || s.microbatch < 0 || place.stage < 0) return kNoKey;
    const std::int64_t group = group_of(place.stage, std::max<int>(s.chunk, 0), placement, shape);
    return pack(place.replica, cls, group, s.microbatch);
  }

  // Entries sorted by (key, start). Built bucketed by (replica, class, group) (few buckets: a
  // stable counting sort in two passes), then a bucket is sorted only when out of order (one
  // lane's ops usually come in micro-batch order already).
  std::vector<Entry> entries(ChunkPlacement placement, const OpShape& shape) const {
    std::vector<std::uint64_t> prefixes;
    for (std::size_t i = 0; i < g_.size(); ++i) {
      const std::uint64_t key = entry_key(i, placement, shape);
      if (key == kNoKey) continue;
      const std::uint64_t p = key >> 32;
      if (!prefixes.empty() && prefixes.back() == p) continue;
      const auto it = std::lower_bound(prefixes.begin(), prefixes.end(), p);
      if (it == prefixes.end() || *it != p) prefixes.insert(it, p);
    }
    const auto bucket_of = [&](std::uint64_t key) {
      return static_cast<std::size_t>(
          std::lower_bound(prefixes.begin(), prefixes.end(), key >> 32) - prefixes.begin());
    };
    std::vector<std::size_t> offset(prefixes.size() + 1, 0);
    for (std::size_t i = 0; i < g_.size(); ++i) {
      const std::uint64_t key = entry_key(i, placement, shape);
      if (key != kNoKey) ++offset[bucket_of(key) + 1];
    }
    for (std::size_t b = 0; b < prefixes.size(); ++b) offset[b + 1] += offset[b];
    std::vector<Entry> out(offset.back());
    std::vector<std::size_t> next(offset.begin(), offset.end() - 1);
    for (std::size_t i = 0; i < g_.size(); ++i) {
      const std::uint64_t key = entry_key(i, placement, shape);
      if (key == kNoKey) continue;
      // Last piece: nested communication nodes may lie between the pieces of one span.
      std::size_t j = i;
      while (g_.span[j] != g_.span[i] || !(g_.flags[j] & kLastPiece)) ++j;
      out[next[bucket_of(key)]++] = {key, static_cast<std::uint32_t>(i),
                                     static_cast<std::uint32_t>(j)};
    }
    const auto less = [&](const Entry& a, const Entry& b) {
      if (a.key != b.key) return a.key < b.key;
      if (g_.start[a.first] != g_.start[b.first]) return g_.start[a.first] < g_.start[b.first];
      return a.first < b.first;
    };
    for (std::size_t b = 0; b < prefixes.size(); ++b) {
      const auto lo = out.begin() + static_cast<std::ptrdiff_t>(offset[b]);
      const auto hi = out.begin() + static_cast<std::ptrdiff_t>(offset[b + 1]);
      if (!std::is_sorted(lo, hi, less)) std::sort(lo, hi, less);
    }
    return out;
  }

  // Start of the run of entries with key `want` in [lo, hi) (sorted), or hi. Micro-batches are
  // usually dense within a (replica, class, group) block, so the position is tried directly
  // before a binary search.
  static std::size_t run_start(const std::vector<Entry>& all, std::size_t lo, std::size_t hi,
                               std::uint64_t want) {
    const std::uint64_t first_mb = all[lo].key & 0xFFFFFFFFu;
    const std::uint64_t mb = want & 0xFFFFFFFFu;
    if (mb >= first_mb) {
      const std::size_t guess = lo + static_cast<std::size_t>(mb - first_mb);
      if (guess < hi && all[guess].key == want && (guess == lo || all[guess - 1].key != want))
        return guess;
    }
    const auto it = std::lower_bound(all.begin() + static_cast<std::ptrdiff_t>(lo),
                                     all.begin() + static_cast<std::ptrdiff_t>(hi), want,
                                     [](const Entry& x, std::uint64_t k) { return x.key < k; });
    return static_cast<std::size_t>(it - all.begin());
  }

  // Counts (and with `fill`, records) the data edges under a placement.
  std::pair<std::size_t, std::size_t> data_edges(ChunkPlacement placement, const OpShape& shape,
                                                 bool fill) {
    const std::vector<Entry> all = entries(placement, shape);
    // Blocks of entries sharing (replica, class, group): [begin, end) each, by prefix.
    struct Block {
      std::uint64_t prefix;
      std::size_t lo, hi;
    };
    std::vector<Block> blocks;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const std::uint64_t prefix = all[i].key >> 32;
      if (blocks.empty() || blocks.back().prefix != prefix) blocks.push_back({prefix, i, i});
      blocks.back().hi = i + 1;
    }
    const std::int64_t groups = placement == ChunkPlacement::VShape
                                    ? 2 * shape.stages
                                    : static_cast<std::int64_t>(shape.stages) * shape.chunks;
    std::size_t inferred = 0, rejected = 0;
    std::size_t run = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (i > 0 && all[i].key != all[i - 1].key) run = i;
      const Entry& e = all[i];
      if (g_.flags[e.first] & kHasNestedRecv) continue;  // the nested recv carries it
      const auto replica = static_cast<std::int64_t>(e.key >> 48);
      const int cls = static_cast<int>((e.key >> 46) & 3u);
      const auto group = static_cast<std::int64_t>((e.key >> 32) & 0x3FFFu);
      const auto mb = static_cast<std::int64_t>(e.key & 0xFFFFFFFFu);
      const auto from = [&](std::int64_t g) {
        return producer_replica(replica, g, placement, shape);
      };
      // The entry of `want` at the same repeat as this one, or all.size().
      const auto find = [&](std::uint64_t want) {
        const auto block = std::lower_bound(
            blocks.begin(), blocks.end(), want >> 32,
            [](const Block& b, std::uint64_t prefix) { return b.prefix < prefix; });
        if (block == blocks.end() || block->prefix != (want >> 32)) return all.size();
        const std::size_t at = run_start(all, block->lo, block->hi, want) + (i - run);
        return at < block->hi && all[at].key == want ? at : all.size();
      };
      // The producing group: the one before (forward) or after (backward), or, where a micro-batch
      // skips stages (partial pipelining, as skippipe), the nearest one it ran on.
      std::size_t at = all.size();
      if (options_.reordered_paths && cls < 2) {
        // Reordered paths: of the micro-batch's passes in this direction on the other groups,
        // the one that ended last before this one began (none: the path's first forward, or the
        // last group's backward, whose producer is the loss).
        std::int64_t latest = std::numeric_limits<std::int64_t>::min();
        for (std::int64_t g = 0; g < groups; ++g) {
          if (g == group) continue;
          const std::size_t c = find(pack(from(g), cls, g, mb));
          if (c == all.size()) continue;
          const std::int64_t end = g_.end[all[c].last];
          if (end <= g_.start[e.first] + tol_ && end > latest) {
            latest = end;
            at = c;
          }
        }
        if (cls == 1 && group + 1 == groups) at = find(pack(replica, 0, group, mb));  // the loss
      } else if (cls == 0) {
        for (std::int64_t g = group - 1; g >= 0 && at == all.size(); --g)
          at = find(pack(from(g), 0, g, mb));
      } else if (cls == 1) {
        for (std::int64_t g = group + 1; g < groups && at == all.size(); ++g)
          at = find(pack(from(g), 1, g, mb));
        if (group + 1 == groups) at = find(pack(replica, 0, group, mb));  // the loss
      }
      if (cls == 2) at = find(pack(replica, 1, group, mb));
      if (at == all.size()) continue;
      const std::uint32_t producer = all[at].last;
      ++inferred;
      if (g_.start[e.first] < g_.end[producer] - tol_) {
        ++rejected;
      } else if (fill) {
        g_.data[e.first] = static_cast<std::int32_t>(producer);
      }
    }
    return {inferred, rejected};
  }

  void infer_pipeline_data() {
    if (options_.ranks_per_stage < 1)
      throw AnalysisError("critical_path: ranks_per_stage must be at least 1 (got " +
                          std::to_string(options_.ranks_per_stage) + ")");
    make_places();
    const OpShape shape = op_shape();
    if (shape.stages == 0) return;
    ChunkPlacement placement = options_.placement;
    if (placement == ChunkPlacement::Auto) {
      placement = ChunkPlacement::Linear;
      if (shape.chunks == 2) {
        const auto linear = data_edges(ChunkPlacement::Linear, shape, false);
        const auto v = data_edges(ChunkPlacement::VShape, shape, false);
        if (v.second < linear.second) placement = ChunkPlacement::VShape;
      }
    }
    g_.placement = placement;
    const auto counts = data_edges(placement, shape, true);
    g_.inferred_edges = counts.first;
    g_.rejected_edges = counts.second;
  }

  // Overlapped pairs (DualPipeV's "F & B"): two compute spans in a row on one lane, both named
  // after the pair ("F3.0&BW1.1"). The pair starts once both inputs are there, so its first op
  // may wait for the second's input: found here as (the first span's first piece, the second).
  void find_overlapped_pairs() {
    for (std::size_t j = 0; j < g_.size(); ++j) {
      const std::int32_t i = g_.prev[j];
      if (i < 0 || !(g_.flags[j] & kComputeNode) || !(g_.flags[j] & kFirstPiece)) continue;
      const auto ii = static_cast<std::size_t>(i);
      if (!(g_.flags[ii] & kComputeNode) || g_.span[ii] == g_.span[j]) continue;
      const std::uint32_t name = span_of(j).name;
      if (name == 0 || span_of(ii).name != name || name >= trace_.names.size() ||
          trace_.names[name].find('&') == std::string::npos)
        continue;
      std::size_t first = ii;
      while (g_.prev[first] >= 0 &&
             g_.span[static_cast<std::size_t>(g_.prev[first])] == g_.span[ii])
        first = static_cast<std::size_t>(g_.prev[first]);
      pairs_.emplace_back(first, j);
      if (partner_mb_.empty()) partner_mb_.assign(g_.size(), -1);
      partner_mb_[first] = span_of(j).microbatch;
    }
  }

  // The pair's first op takes the second's data edge when it ends later than its own.
  void link_overlapped_pairs() {
    for (const auto& [first, second] : pairs_) {
      const std::int32_t later = g_.data[second];
      if (later < 0 || g_.start[first] < g_.end[static_cast<std::size_t>(later)] - tol_) continue;
      const std::int32_t own = g_.data[first];
      if (own < 0 ||
          g_.end[static_cast<std::size_t>(later)] > g_.end[static_cast<std::size_t>(own)])
        g_.data[first] = later;
    }
  }

  // ---- communication ----

  void match_send_recv() {
    struct End {
      std::int32_t src, dst, mb;
      std::int64_t start;
      std::uint32_t node;
    };
    std::vector<End> sends, recvs;
    for (std::size_t i = 0; i < g_.size(); ++i) {
      const Span& s = span_of(i);
      if (s.peer < 0) continue;
      if (s.kind == SpanKind::Send)
        sends.push_back(
            {rank_of(i), s.peer, s.microbatch, g_.start[i], static_cast<std::uint32_t>(i)});
      if (s.kind == SpanKind::Recv)
        recvs.push_back(
            {s.peer, rank_of(i), s.microbatch, g_.start[i], static_cast<std::uint32_t>(i)});
    }
    const auto less = [](const End& a, const End& b) {
      if (a.src != b.src) return a.src < b.src;
      if (a.dst != b.dst) return a.dst < b.dst;
      if (a.mb != b.mb) return a.mb < b.mb;
      if (a.start != b.start) return a.start < b.start;
      return a.node < b.node;
    };
    const auto same = [](const End& a, const End& b) {
      return a.src == b.src && a.dst == b.dst && a.mb == b.mb;
    };
    std::sort(sends.begin(), sends.end(), less);
    std::sort(recvs.begin(), recvs.end(), less);
    std::size_t i = 0, j = 0;
    while (i < sends.size() && j < recvs.size()) {
      if (same(sends[i], recvs[j])) {
        // Pair the runs in order.
        std::size_t a = i, b = j;
        while (a < sends.size() && b < recvs.size() && same(sends[a], sends[i]) &&
               same(recvs[b], recvs[j])) {
          g_.other[recvs[b].node] = static_cast<std::int32_t>(sends[a].node);
          g_.other_kind[recvs[b].node] = PathEdge::SendRecv;
          ++a;
          ++b;
        }
        while (a < sends.size() && same(sends[a], sends[i])) ++a;
        while (b < recvs.size() && same(recvs[b], recvs[j])) ++b;
        i = a;
        j = b;
      } else if (less(sends[i], recvs[j])) {
        ++i;
      } else {
        ++j;
      }
    }
  }

  struct Timed {
    std::int32_t slot;
    std::int64_t end;
    std::uint32_t node;
  };
  static void sort_timed(std::vector<Timed>& v) {
    const auto less = [](const Timed& a, const Timed& b) {
      if (a.slot != b.slot) return a.slot < b.slot;
      if (a.end != b.end) return a.end < b.end;
      return a.node < b.node;
    };
    if (!std::is_sorted(v.begin(), v.end(), less)) std::sort(v.begin(), v.end(), less);
  }
  // [begin, end) of one slot's entries in a sorted list.
  static std::pair<std::size_t, std::size_t> slot_range(const std::vector<Timed>& v,
                                                        std::int32_t slot) {
    const auto lo = std::lower_bound(v.begin(), v.end(), slot,
                                     [](const Timed& t, std::int32_t s) { return t.slot < s; });
    const auto hi = std::upper_bound(lo, v.end(), slot,
                                     [](std::int32_t s, const Timed& t) { return s < t.slot; });
    return {static_cast<std::size_t>(lo - v.begin()), static_cast<std::size_t>(hi - v.begin())};
  }

  // Communication on its own stream was issued by the latest compute of its rank before it.
  void add_issue_edges() {
    bool needed = false;
    for (std::size_t i = 0; i < g_.size() && !needed; ++i)
      needed = (g_.flags[i] & kCommNode) && !(g_.flags[i] & kThreadNode);
    if (!needed) return;
    std::vector<Timed> compute;
    for (std::size_t i = 0; i < g_.size(); ++i)
      if (g_.flags[i] & kComputeNode)
        compute.push_back({slot_of(i), g_.end[i], static_cast<std::uint32_t>(i)});
    if (compute.empty()) return;
    sort_timed(compute);
    for (std::size_t i = 0; i < g_.size(); ++i) {
      if (!(g_.flags[i] & kCommNode) || (g_.flags[i] & kThreadNode)) continue;
      const auto [lo, hi] = slot_range(compute, slot_of(i));
      const std::int64_t limit = g_.start[i] + tol_;
      const auto it = std::upper_bound(compute.begin() + static_cast<std::ptrdiff_t>(lo),
                                       compute.begin() + static_cast<std::ptrdiff_t>(hi), limit,
                                       [](std::int64_t t, const Timed& x) { return t < x.end; });
      if (it == compute.begin() + static_cast<std::ptrdiff_t>(lo)) continue;
      const Timed& u = *(it - 1);
      const std::int32_t had = g_.other[i];
      if (had >= 0 && g_.end[static_cast<std::size_t>(had)] >= u.end) continue;
      g_.other[i] = static_cast<std::int32_t>(u.node);
      g_.other_kind[i] = PathEdge::Issue;
    }
  }

  // A compute span starting when a communication for its rank ends waited for it.
  void add_completion_edges() {
    std::vector<Timed> incoming;
    for (std::size_t i = 0; i < g_.size(); ++i) {
      if (!(g_.flags[i] & kCommNode) || (g_.flags[i] & kThreadNode)) continue;
      const Span& s = span_of(i);
      std::int32_t slot = slot_of(i);
      if (s.kind == SpanKind::Send) slot = s.peer >= 0 ? roles_.slot_of_rank(s.peer) : -1;
      if (slot >= 0) incoming.push_back({slot, g_.end[i], static_cast<std::uint32_t>(i)});
    }
    if (incoming.empty()) return;
    sort_timed(incoming);
    constexpr int kMaxScan = 64;  // bounds the work when many transfers end together
    for (std::size_t i = 0; i < g_.size(); ++i) {
      if (!(g_.flags[i] & kComputeNode) || (g_.flags[i] & kThreadNode)) continue;
      const auto [lo, hi] = slot_range(incoming, slot_of(i));
      if (lo == hi) continue;
      const std::int64_t t = g_.start[i];
      const std::int32_t mb = span_of(i).microbatch;
      // The first op of an overlapped pair also waits for its partner's input.
      const std::int32_t partner = partner_mb_.empty() ? -1 : partner_mb_[i];
      auto it = std::upper_bound(incoming.begin() + static_cast<std::ptrdiff_t>(lo),
                                 incoming.begin() + static_cast<std::ptrdiff_t>(hi), t + tol_,
                                 [](std::int64_t x, const Timed& e) { return x < e.end; });
      for (int scanned = 0;
           it != incoming.begin() + static_cast<std::ptrdiff_t>(lo) && scanned < kMaxScan;
           ++scanned) {
        --it;
        if (it->end < t - tol_) break;
        const Span& c = span_of(it->node);
        const bool p2p = c.kind == SpanKind::Send || c.kind == SpanKind::Recv;
        if (p2p && mb >= 0 && c.microbatch >= 0 && c.microbatch != mb && c.microbatch != partner)
          continue;
        g_.other[i] = static_cast<std::int32_t>(it->node);
        g_.other_kind[i] = PathEdge::Completion;
        break;
      }
    }
  }

  // The k-th collective of a kind on each rank, overlapping in time, is one instance.
  void group_collectives() {
    struct Member {
      std::int32_t slot;
      SpanKind kind;
      std::int64_t ordinal;
      std::int64_t start, end;
      std::uint32_t node;
    };
    std::vector<Member> m;
    for (std::size_t i = 0; i < g_.size(); ++i) {
      const Span& s = span_of(i);
      if ((g_.flags[i] & kCommNode) && is_collective(s.kind))
        m.push_back({slot_of(i), s.kind, 0, g_.start[i], g_.end[i], static_cast<std::uint32_t>(i)});
    }
    if (m.empty()) return;
    g_.instance.assign(g_.size(), -1);
    std::sort(m.begin(), m.end(), [](const Member& a, const Member& b) {
      if (a.slot != b.slot) return a.slot < b.slot;
      if (a.kind != b.kind) return a.kind < b.kind;
      if (a.start != b.start) return a.start < b.start;
      return a.node < b.node;
    });
    for (std::size_t i = 1; i < m.size(); ++i)
      if (m[i].slot == m[i - 1].slot && m[i].kind == m[i - 1].kind)
        m[i].ordinal = m[i - 1].ordinal + 1;
    std::sort(m.begin(), m.end(), [](const Member& a, const Member& b) {
      if (a.kind != b.kind) return a.kind < b.kind;
      if (a.ordinal != b.ordinal) return a.ordinal < b.ordinal;
      if (a.start != b.start) return a.start < b.start;
      return a.node < b.node;
    });
    std::int32_t id = -1;
    std::int64_t reach = 0;
    for (std::size_t i = 0; i < m.size(); ++i) {
      const bool same = i > 0 && m[i].kind == m[i - 1].kind && m[i].ordinal == m[i - 1].ordinal;
      if (!same || m[i].start > reach + tol_) {
        ++id;
        reach = m[i].end;
      } else {
        reach = std::max(reach, m[i].end);
      }
      g_.instance[m[i].node] = id;
    }
    g_.instances = static_cast<std::size_t>(id + 1);
  }

  const Trace& trace_;
  const SpanRoles& roles_;
  TimeWindow window_;
  const CriticalPathOptions& options_;
  std::int64_t tol_;
  Sequencer seq_;
  DependencyGraph g_;
  std::vector<Place> places_;                               // per rank, with per-stage layouts
  std::vector<std::pair<std::size_t, std::size_t>> pairs_;  // overlapped pairs: (first, second)
  // Per node: the micro-batch of the op paired with it (a pair's first piece), else -1; empty
  // when the trace has no pairs.
  std::vector<std::int32_t> partner_mb_;
  std::int32_t max_tp_ = 1;
};

}  // namespace

DependencyGraph build_dependency_graph(const Trace& trace, const SpanRoles& roles,
                                       const TimeWindow& window, const CriticalPathOptions& options,
                                       std::int64_t tolerance_ns) {
  return Builder(trace, roles, window, options, tolerance_ns).build();
}

}  // namespace pipetune::profiler::analysis::detail
