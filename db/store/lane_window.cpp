#include "db/store/lane_window.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "db/store/lane_fold.hpp"
#include "engine/errors.hpp"

namespace pipetune::db {

BlockIndexEntry block_summary(const sqlite::Statement& walk_row) {
  return {walk_row.column_int64(0), walk_row.column_int64(1), walk_row.column_int64(2),
          walk_row.column_int64(3), walk_row.column_int64(4), walk_row.column_int64(5)};
}

LaneWindowReader::LaneWindowReader(sqlite::Connection& db, std::size_t cache_rows,
                                   std::size_t cache_pieces)
    : db_(db), cache_limit_(cache_rows), pieces_limit_(cache_pieces) {
  sqlite::Statement s = db_.prepare("SELECT id, name FROM span_kinds");
  while (s.step()) {
    const std::int64_t id = s.column_int64(0);
    if (id < 0 || id > 255) continue;  // never written by pipetune; blocks cannot refer to it
    profiler::SpanKind kind = profiler::SpanKind::Other;
    profiler::parse_span_kind(s.column_text_view(1), kind);
    kinds_[static_cast<std::size_t>(id)] = kind;
    kind_known_[static_cast<std::size_t>(id)] = true;
  }
  blocks_ = db_.prepare(kBlockWalkSql, true);
  blob_ = db_.prepare("SELECT spans FROM span_blocks WHERE id = ?1", true);
  data_version_ = db_.prepare("PRAGMA data_version", true);
  block_index_ = db_.prepare(
      "SELECT block_count, summaries FROM lane_block_index WHERE lane = ?1 AND depth = ?2", true);
}

void LaneWindowReader::check_cache() {
  std::pair<std::int64_t, std::int64_t> version{-1, sqlite3_total_changes64(db_.handle())};
  data_version_.reset();
  if (data_version_.step()) version.first = data_version_.column_int64(0);
  data_version_.reset();
  if (version == cache_version_) return;
  cache_.clear();
  cached_rows_ = 0;
  pieces_.clear();
  cached_pieces_ = 0;
  cache_version_ = version;
}

const std::vector<FoldPiece>* LaneWindowReader::fold_pieces(const BlockRow& b,
                                                            std::int64_t pixel_ns) {
  if (pieces_limit_ == 0) return nullptr;
  if (const auto it = pieces_.find(b.id); it != pieces_.end() && it->second.pixel_ns == pixel_ns)
    return &it->second.pieces;
  load_block(b.id, b.count);  // a corrupt block throws here, before anything is kept of it
  // LaneFolder's rule (lane_fold.hpp) within the block: a short span continues the run before
  // it when it starts less than a pixel after that run's last span ended.
  const auto short_span = [&](const PackedSpan& p) { return p.end_ns - p.start_ns < pixel_ns; };
  std::vector<FoldPiece> pieces;
  bool open = false;
  for (const PackedSpan& p : block_) {
    if (open && short_span(p) && p.start_ns - pieces.back().span.end_ns < pixel_ns) {
      ++pieces.back().count;
      pieces.back().span.end_ns = p.end_ns;
      continue;
    }
    pieces.push_back({p, 1});
    open = short_span(p);
  }
  if (const auto it = pieces_.find(b.id); it != pieces_.end()) {
    cached_pieces_ -= it->second.pieces.size();
    pieces_.erase(it);
  }
  if (cached_pieces_ + pieces.size() > pieces_limit_) {
    pieces_.clear();  // a pan needs the window's blocks, not older ones
    cached_pieces_ = 0;
  }
  cached_pieces_ += pieces.size();
  return &pieces_.emplace(b.id, BlockPieces{pixel_ns, std::move(pieces)}).first->second.pieces;
}

const std::vector<LaneWindowReader::BlockRow>* LaneWindowReader::block_rows(std::int64_t lane_db_id,
                                                                            std::int32_t depth) {
  const auto key = std::make_pair(lane_db_id, depth);
  if (const auto it = cache_.find(key); it != cache_.end()) return &it->second;
  if (cached_rows_ >= cache_limit_) return nullptr;
  std::vector<BlockRow> rows;
  block_index_.reset();
  block_index_.bind(1, lane_db_id).bind(2, depth);
  if (block_index_.step()) {
    const std::int64_t count = block_index_.column_int64(0);
    const std::size_t bytes = block_index_.column_bytes(1);
    if (count <= 0 || bytes != static_cast<std::size_t>(count) * sizeof(BlockRow) ||
        block_index_.column_blob(1) == nullptr) {
      block_index_.reset();
      throw InputError(db_.path() + ": corrupt block index of lane " + std::to_string(lane_db_id) +
                       " depth " + std::to_string(depth) + " (" + std::to_string(bytes) +
                       " bytes for " + std::to_string(count) + " blocks)");
    }
    if (cached_rows_ + static_cast<std::size_t>(count) > cache_limit_) {
      block_index_.reset();
      return nullptr;
    }
    rows.resize(static_cast<std::size_t>(count));
    std::memcpy(rows.data(), block_index_.column_blob(1), bytes);
    block_index_.reset();
    cached_rows_ += rows.size();
    return &cache_.emplace(key, std::move(rows)).first->second;
  }
  block_index_.reset();
  blocks_.reset();
  blocks_.bind(1, lane_db_id).bind(2, depth).bind(3, std::numeric_limits<std::int64_t>::min());
  while (blocks_.step()) {
    rows.push_back(block_summary(blocks_));
    if (cached_rows_ + rows.size() > cache_limit_) {
      blocks_.reset();
      return nullptr;  // this one would overflow the cache: the index serves it
    }
  }
  blocks_.reset();
  cached_rows_ += rows.size();
  return &cache_.emplace(key, std::move(rows)).first->second;
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
  // One block of the walk; false once past the window.
  const auto visit = [&](const BlockRow& b) {
    if (b.start_ns >= t1) return false;
    // A block inside the window whose spans and inner gaps are all under a pixel folds whole,
    // from its summary, without reading its spans.
    const bool inside = b.start_ns >= t0 && b.end_ns < t1;
    const bool whole =
        inside && folder.under_pixel(fold_break_key(b.max_duration_ns, b.max_gap_ns));
    if (whole && folder.add_run(b.start_ns, b.end_ns, b.count)) return true;
    // Inside the window every span is visible: the block's pieces at this pixel size fold as
    // its spans would.
    if (const std::vector<FoldPiece>* pieces = inside ? fold_pieces(b, window.pixel_ns) : nullptr) {
      for (const FoldPiece& piece : *pieces) {
        const PackedSpan& p = piece.span;
        if (piece.count > 1 && folder.add_run(p.start_ns, p.end_ns, piece.count)) continue;
        folder.add_span(p.start_ns, p.end_ns, [&] { return to_span(p, lane.index); });
      }
      return true;
    }
    load_block(b.id, b.count);
    for (const PackedSpan& p : block_) {
      if (p.start_ns >= t1) return false;
      if (visible_in_window(p.start_ns, p.end_ns, t0, t1))
        folder.add_span(p.start_ns, p.end_ns, [&] { return to_span(p, lane.index); });
    }
    return true;
  };
  const sqlite::ReadSnapshot snapshot(db_);  // one lock for the walk and its BLOB reads
  check_cache();
  for (std::int32_t depth = 0; depth <= lane.max_depth; ++depth) {
    folder.begin_depth(depth);
    if (const std::vector<BlockRow>* rows = block_rows(lane.db_id, depth)) {
      // The rows are in end order: the first that ends at or after t0 starts the walk.
      auto it = std::lower_bound(rows->begin(), rows->end(), t0,
                                 [](const BlockRow& b, std::int64_t t) { return b.end_ns < t; });
      while (it != rows->end() && visit(*it)) ++it;
      continue;
    }
    blocks_.reset();  // also after a read that a corrupt block ended with an exception
    blocks_.bind(1, lane.db_id).bind(2, depth).bind(3, t0);
    while (blocks_.step())
      if (!visit(block_summary(blocks_))) break;
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
