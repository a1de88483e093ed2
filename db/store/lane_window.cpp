#include "db/store/lane_window.hpp"

#include <algorithm>

#include "db/store/lane_fold.hpp"
#include "engine/errors.hpp"

namespace pipetune::db {

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
        if (visible_in_window(p.start_ns, p.end_ns, t0, t1))
          out.push_back({to_span(p, lane.index), depth});
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
  LaneWindow window;
  window.pixel_ns = window_pixel_ns(t0, t1, width_px);
  LaneFolder folder(window);
  for (std::int32_t depth = 0; depth <= lane.max_depth; ++depth) {
    folder.begin_depth(depth);
    blocks_.reset();  // also after a read that a corrupt block ended with an exception
    blocks_.bind(1, lane.db_id).bind(2, depth).bind(3, t0);
    bool past = false;
    while (!past && blocks_.step()) {
      const std::int64_t id = blocks_.column_int64(0);
      const std::int64_t count = blocks_.column_int64(1);
      const std::int64_t start = blocks_.column_int64(2);
      const std::int64_t end = blocks_.column_int64(3);
      if (start >= t1) break;
      // A block inside the window whose spans and inner gaps are all under a pixel folds whole,
      // from its summary, without reading its spans.
      const bool whole =
          start >= t0 && end < t1 &&
          folder.under_pixel(fold_break_key(blocks_.column_int64(4), blocks_.column_int64(5)));
      if (whole && folder.add_run(start, end, count)) continue;
      load_block(id, count);
      for (const PackedSpan& p : block_) {
        if (p.start_ns >= t1) {
          past = true;
          break;
        }
        if (visible_in_window(p.start_ns, p.end_ns, t0, t1))
          folder.add_span(p.start_ns, p.end_ns, [&] { return to_span(p, lane.index); });
      }
    }
    blocks_.reset();
  }
  folder.finish();
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
