#include "db/store/lane_window.hpp"

#include <algorithm>

#include "engine/errors.hpp"

namespace pipetune::db {

namespace {

bool visible(std::int64_t start, std::int64_t end, std::int64_t t0, std::int64_t t1) {
  return start < t1 && (end > t0 || start >= t0);
}

void check_window(std::int64_t t0, std::int64_t t1) {
  if (t1 < t0)
    throw InputError("window [" + std::to_string(t0) + ", " + std::to_string(t1) +
                     ") ns ends before it starts");
}

// The fold being built at one depth.
struct Fold {
  bool active = false;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t count = 0;
  profiler::Span first;  // the span when count == 1
};

}  // namespace

LaneWindowReader::LaneWindowReader(sqlite::Connection& db) : db_(db) {
  sqlite::Statement s = db_.prepare("SELECT id, name FROM span_kinds");
  while (s.step()) {
    const std::int64_t id = s.column_int64(0);
    if (id < 0 || id > 255) continue;  // never written by pipetune; blocks cannot refer to it
    profiler::SpanKind kind = profiler::SpanKind::Other;
    profiler::parse_span_kind(s.column_text_view(1), kind);
    kinds_[static_cast<std::size_t>(id)] = kind;
    kind_known_[static_cast<std::size_t>(id)] = true;
  }
  blocks_ = db_.prepare(
      "SELECT id, span_count, start_ns, end_ns, max_duration_ns, max_gap_ns FROM span_blocks "
      "WHERE lane = ?1 AND depth = ?2 AND end_ns >= ?3 ORDER BY end_ns, first_ord",
      true);
  blob_ = db_.prepare("SELECT spans FROM span_blocks WHERE id = ?1", true);
}

profiler::Span LaneWindowReader::to_span(const PackedSpan& p, std::int32_t lane_index) const {
  if (!kind_known_[p.kind])
    throw InputError(db_.path() + ": corrupt span block (kind id " + std::to_string(p.kind) +
                     " is not in span_kinds)");
  profiler::Span s;
  s.lane = lane_index;
  s.kind = kinds_[p.kind];
  s.chunk = p.chunk;
  s.microbatch = p.microbatch;
  s.peer = p.peer;
  s.start_ns = p.start_ns;
  s.end_ns = p.end_ns;
  s.name = p.name;
  return s;
}

void LaneWindowReader::load_block(std::int64_t block_id, std::int64_t count) {
  blob_.bind(1, block_id);
  if (!blob_.step()) {
    blob_.reset();
    throw InputError(db_.path() + ": corrupt workspace (span block " + std::to_string(block_id) +
                     " is indexed but missing)");
  }
  try {
    decode_block(blob_.column_blob(0), blob_.column_bytes(0), count, block_id, db_.path(), block_);
  } catch (...) {
    blob_.reset();
    throw;
  }
  blob_.reset();
}

std::vector<SpanAt> LaneWindowReader::spans(const LaneRef& lane, std::int64_t t0, std::int64_t t1) {
  check_window(t0, t1);
  std::vector<SpanAt> out;
  for (std::int32_t depth = 0; depth <= lane.max_depth; ++depth) {
    blocks_.reset();  // also after a read that a corrupt block ended with an exception
    blocks_.bind(1, lane.db_id).bind(2, depth).bind(3, t0);
    bool past = false;
    while (!past && blocks_.step()) {
      if (blocks_.column_int64(2) >= t1) break;
      load_block(blocks_.column_int64(0), blocks_.column_int64(1));
      for (const PackedSpan& p : block_) {
        if (p.start_ns >= t1) {
          past = true;
          break;
        }
        if (visible(p.start_ns, p.end_ns, t0, t1)) out.push_back({to_span(p, lane.index), depth});
      }
    }
    blocks_.reset();
  }
  std::stable_sort(out.begin(), out.end(), [](const SpanAt& a, const SpanAt& b) {
    return a.span.start_ns != b.span.start_ns ? a.span.start_ns < b.span.start_ns
                                              : a.depth < b.depth;
  });
  return out;
}

LaneWindow LaneWindowReader::fold(const LaneRef& lane, std::int64_t t0, std::int64_t t1,
                                  int width_px) {
  check_window(t0, t1);
  if (width_px < 0) throw InputError("window width " + std::to_string(width_px) + " px < 0");
  LaneWindow window;
  window.pixel_ns = width_px == 0 ? 0 : std::max<std::int64_t>(1, (t1 - t0) / width_px);
  const std::int64_t px = window.pixel_ns;  // 0: nothing is shorter, nothing folds
  auto& items = window.items;

  for (std::int32_t depth = 0; depth <= lane.max_depth; ++depth) {
    Fold fold;
    const auto emit_fold = [&] {
      if (!fold.active) return;
      WindowItem item;
      item.depth = depth;
      item.start_ns = fold.start_ns;
      item.end_ns = fold.end_ns;
      item.count = fold.count;
      if (fold.count == 1) item.span = fold.first;
      items.push_back(item);
      fold.active = false;
    };
    const auto take = [&](const PackedSpan& p) {
      const bool short_span = p.end_ns - p.start_ns < px;
      if (fold.active) {
        if (short_span && p.start_ns - fold.end_ns < px) {
          ++fold.count;
          fold.end_ns = p.end_ns;
          return;
        }
        emit_fold();
      }
      if (short_span) {
        fold = Fold{true, p.start_ns, p.end_ns, 1, to_span(p, lane.index)};
      } else {
        WindowItem item;
        item.depth = depth;
        item.start_ns = p.start_ns;
        item.end_ns = p.end_ns;
        item.span = to_span(p, lane.index);
        items.push_back(item);
      }
    };

    blocks_.reset();  // also after a read that a corrupt block ended with an exception
    blocks_.bind(1, lane.db_id).bind(2, depth).bind(3, t0);
    bool past = false;
    while (!past && blocks_.step()) {
      const std::int64_t id = blocks_.column_int64(0);
      const std::int64_t count = blocks_.column_int64(1);
      const std::int64_t start = blocks_.column_int64(2);
      const std::int64_t end = blocks_.column_int64(3);
      if (start >= t1) break;
      // A block inside the window whose spans and inner gaps are all under a pixel folds whole:
      // its first span joins (or starts) a fold and every later one extends it.
      const bool whole =
          start >= t0 && end < t1 && blocks_.column_int64(4) < px && blocks_.column_int64(5) < px;
      if (whole && fold.active && start - fold.end_ns < px) {
        fold.count += count;
        fold.end_ns = end;
        continue;
      }
      if (whole && count >= 2) {
        emit_fold();
        fold = Fold{true, start, end, count, {}};
        continue;
      }
      load_block(id, count);
      for (const PackedSpan& p : block_) {
        if (p.start_ns >= t1) {
          past = true;
          break;
        }
        if (visible(p.start_ns, p.end_ns, t0, t1)) take(p);
      }
    }
    blocks_.reset();
    emit_fold();
  }
  return window;
}

void LaneWindowReader::all_spans(const LaneRef& lane, std::vector<SpanAt>& out,
                                 std::vector<std::int64_t>& seq) {
  sqlite::Statement s =
      db_.prepare("SELECT id, depth, span_count, spans FROM span_blocks WHERE lane = ?1");
  s.bind(1, lane.db_id);
  while (s.step()) {
    decode_block(s.column_blob(3), s.column_bytes(3), s.column_int64(2), s.column_int64(0),
                 db_.path(), block_);
    const auto depth = static_cast<std::int32_t>(s.column_int64(1));
    for (const PackedSpan& p : block_) {
      out.push_back({to_span(p, lane.index), depth});
      seq.push_back(p.seq);
    }
  }
}

}  // namespace pipetune::db
