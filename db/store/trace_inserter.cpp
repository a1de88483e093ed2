#include "db/store/trace_inserter.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "db/store/lane_window.hpp"
#include "db/store/span_nesting.hpp"
#include "engine/errors.hpp"

namespace pipetune::db {

namespace {

using profiler::Span;
using profiler::Trace;

void bind_real(sqlite::Statement& s, int index, double value) {
  if (std::isnan(value))
    s.bind_null(index);  // SQLite would store NaN as NULL anyway; say so
  else
    s.bind(index, value);
}

}  // namespace

std::size_t TraceInserter::LaneKeyHash::operator()(const LaneKey& k) const {
  const auto [rank, stream, index] = k;
  std::size_t h = static_cast<std::uint32_t>(rank);
  h = h * 1000003u ^ static_cast<std::size_t>(stream);
  return h * 1000003u ^ static_cast<std::uint32_t>(index);
}

TraceInserter::TraceInserter(sqlite::Connection& db, std::int64_t run_id)
    : db_(db), run_id_(run_id) {
  // Kind ids of this workspace; kinds it lacks (added to SpanKind since) get new ids.
  std::int64_t max_id = -1;
  std::vector<std::pair<std::int64_t, std::string>> known;
  {
    sqlite::Statement s = db_.prepare("SELECT id, name FROM span_kinds");
    while (s.step()) {
      known.emplace_back(s.column_int64(0), s.column_text(1));
      max_id = std::max(max_id, s.column_int64(0));
    }
  }
  for (int k = 0; k < profiler::kSpanKindCount; ++k) {
    const std::string_view name = profiler::span_kind_name(static_cast<profiler::SpanKind>(k));
    const auto it = std::find_if(known.begin(), known.end(),
                                 [&](const auto& row) { return row.second == name; });
    std::int64_t id = it != known.end() ? it->first : ++max_id;
    if (id < 0 || id > 255)
      throw std::runtime_error(db_.path() + ": span_kinds id " + std::to_string(id) +
                               " does not fit a span block");
    if (it == known.end()) {
      sqlite::Statement add = db_.prepare("INSERT INTO span_kinds(id, name) VALUES (?1, ?2)");
      add.bind(1, id).bind(2, name).run();
    }
    kind_ids_[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(id);
  }

  insert_lane_ = db_.prepare(
      "INSERT INTO lanes(run, idx, rank, stream, stream_index, name) VALUES (?1, ?2, ?3, ?4, ?5, "
      "?6)",
      true);
  insert_name_ = db_.prepare("INSERT INTO names(run, id, text) VALUES (?1, ?2, ?3)", true);
  insert_block_ = db_.prepare(
      "INSERT INTO span_blocks(lane, depth, first_ord, span_count, start_ns, end_ns, pred_end_ns, "
      "max_duration_ns, max_gap_ns, spans) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
      true);
  update_block_ = db_.prepare(
      "UPDATE span_blocks SET span_count = ?2, start_ns = ?3, end_ns = ?4, max_duration_ns = ?5, "
      "max_gap_ns = ?6, spans = ?7 WHERE id = ?1",
      true);
  update_lane_ = db_.prepare(
      "UPDATE lanes SET span_count = ?2, max_depth = ?3, start_ns = ?4, end_ns = ?5 WHERE id = ?1",
      true);
  insert_memory_ = db_.prepare(
      "INSERT INTO memory_samples(run, seq, rank, category, t_ns, bytes) VALUES (?1, ?2, ?3, ?4, "
      "?5, ?6)",
      true);
  insert_counter_block_ = db_.prepare(
      "INSERT INTO counter_blocks(run, first_seq, sample_count, samples) VALUES (?1, ?2, ?3, ?4)",
      true);
  update_counter_block_ =
      db_.prepare("UPDATE counter_blocks SET sample_count = ?2, samples = ?3 WHERE id = ?1", true);
  insert_step_ = db_.prepare(
      "INSERT INTO step_metrics(run, seq, step, t_ns, loss, tokens_per_s) VALUES (?1, ?2, ?3, ?4, "
      "?5, ?6)",
      true);
  insert_kernel_ = db_.prepare(
      "INSERT INTO kernels(run, seq, rank, device, stream, correlation, start_ns, end_ns, name, "
      "grid_x, grid_y, grid_z, block_x, block_y, block_z, bytes, op, phase, microbatch, chunk) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
      "?19, ?20)",
      true);
  update_commit_ = db_.prepare("UPDATE runs SET last_commit_unix_ns = ?2 WHERE id = ?1", true);
  update_summary_ = db_.prepare("UPDATE runs SET summary_json = ?2 WHERE id = ?1", true);

  name_id("");  // names[0] is the empty name, as in a Trace
}

std::uint32_t TraceInserter::name_id(const std::string& text) {
  const auto it = names_.find(text);
  if (it != names_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(names_.size());
  insert_name_.bind(1, run_id_).bind(2, std::int64_t{id}).bind(3, text).run();
  names_.emplace(text, id);
  return id;
}

std::size_t TraceInserter::lane_slot(const profiler::Lane& lane) {
  const LaneKey key{lane.rank, lane.stream, lane.index};
  const auto it = lane_index_.find(key);
  if (it != lane_index_.end()) return it->second;
  const auto idx = static_cast<std::int64_t>(lanes_.size());
  insert_lane_.bind(1, run_id_)
      .bind(2, idx)
      .bind(3, lane.rank)
      .bind(4, profiler::stream_name(lane.stream))
      .bind(5, lane.index)
      .bind(6, lane.name)
      .run();
  LaneState state;
  state.db_id = db_.last_insert_rowid();
  lanes_.push_back(std::move(state));
  lane_index_.emplace(key, lanes_.size() - 1);
  return lanes_.size() - 1;
}

std::size_t TraceInserter::add_part(const Trace& part) {
  std::vector<std::size_t> lane_of(part.lanes.size());
  for (std::size_t i = 0; i < part.lanes.size(); ++i) lane_of[i] = lane_slot(part.lanes[i]);
  std::vector<std::uint32_t> name_of(std::max<std::size_t>(part.names.size(), 1), 0);
  for (std::size_t i = 0; i < part.names.size(); ++i) name_of[i] = name_id(part.names[i]);

  const std::size_t n = part.spans.size();
  auto place_index = [&](std::size_t k) {
    const Span& s = part.spans[k];
    PackedSpan p{};
    p.start_ns = s.start_ns;
    p.end_ns = s.end_ns;
    p.seq = span_seq_ + static_cast<std::int64_t>(k);
    p.name = name_of[s.name];
    p.microbatch = s.microbatch;
    p.peer = s.peer;
    p.chunk = s.chunk;
    p.kind = kind_ids_[static_cast<std::size_t>(s.kind)];
    place(lanes_[lane_of[static_cast<std::size_t>(s.lane)]], p);
  };
  for_each_in_nesting_order(part.spans, part.lanes.size(), place_index);
  span_seq_ += static_cast<std::int64_t>(n);

  for (const profiler::MemorySample& m : part.memory) {
    insert_memory_.bind(1, run_id_)
        .bind(2, memory_seq_++)
        .bind(3, m.rank)
        .bind(4, profiler::memory_category_name(m.category))
        .bind(5, m.t_ns)
        .bind(6, m.bytes)
        .run();
  }
  for (const profiler::CounterSample& c : part.counters) {
    if (counter_block_.empty()) counter_block_first_seq_ = counter_seq_;
    counter_block_.push_back(pack_counter(c, name_of[c.name]));
    ++counter_seq_;
    counter_block_dirty_ = true;
    if (counter_block_.size() == kCounterBlockSamples) {
      write_counter_block();
      counter_block_.clear();
      counter_block_row_ = -1;
    }
  }
  for (const profiler::StepMetric& m : part.steps) {
    insert_step_.bind(1, run_id_).bind(2, step_seq_++).bind(3, m.step).bind(4, m.t_ns);
    bind_real(insert_step_, 5, m.loss);
    bind_real(insert_step_, 6, m.tokens_per_s);
    insert_step_.run();
  }
  return n + part.memory.size() + part.counters.size() + part.steps.size();
}

void TraceInserter::place(LaneState& lane, const PackedSpan& span) {
  const std::int32_t depth = lane.nesting.place(span.start_ns, span.end_ns);
  if (static_cast<std::size_t>(depth) >= lane.depths.size()) lane.depths.resize(depth + 1);
  DepthState& d = lane.depths[static_cast<std::size_t>(depth)];
  if (d.block.empty()) {
    // No reserve(kBlockSpans): 10 KB for every lane and depth, up front, would make a profile of
    // a million one-span lanes take gigabytes; the block grows as spans come.
    d.block_first_ord = d.next_ord;
    d.block_has_pred = d.has_last;
    d.block_pred_end = d.last_end;
  }
  d.block.push_back(span);
  ++d.next_ord;
  d.has_last = true;
  d.last_end = span.end_ns;
  d.block_dirty = true;

  if (lane.span_count == 0) {
    lane.start_ns = span.start_ns;
    lane.end_ns = span.end_ns;
  } else {
    lane.start_ns = std::min(lane.start_ns, span.start_ns);
    lane.end_ns = std::max(lane.end_ns, span.end_ns);
  }
  ++lane.span_count;
  lane.max_depth = std::max(lane.max_depth, depth);
  mark_dirty(lane);

  if (d.block.size() == kBlockSpans) {
    write_block(lane, depth, d);
    d.block.clear();
    d.block_row = -1;
  }
}

void TraceInserter::write_block(LaneState& lane, std::int32_t depth, DepthState& d) {
  const BlockSummary s = summarize_block(d.block.data(), d.block.size());
  const auto count = static_cast<std::int64_t>(d.block.size());
  encode_block(d.block.data(), d.block.size(), encoded_);
  if (d.block_row < 0) {
    insert_block_.bind(1, lane.db_id)
        .bind(2, depth)
        .bind(3, d.block_first_ord)
        .bind(4, count)
        .bind(5, s.start_ns)
        .bind(6, s.end_ns);
    if (d.block_has_pred)
      insert_block_.bind(7, d.block_pred_end);
    else
      insert_block_.bind_null(7);
    insert_block_.bind(8, s.max_duration_ns)
        .bind(9, s.max_gap_ns)
        .bind_static_blob(10, encoded_.data(), encoded_.size())
        .run();
    d.block_row = db_.last_insert_rowid();
  } else {
    update_block_.bind(1, d.block_row)
        .bind(2, count)
        .bind(3, s.start_ns)
        .bind(4, s.end_ns)
        .bind(5, s.max_duration_ns)
        .bind(6, s.max_gap_ns)
        .bind_static_blob(7, encoded_.data(), encoded_.size())
        .run();
  }
  d.block_dirty = false;
}

void TraceInserter::write_counter_block() {
  const auto count = static_cast<std::int64_t>(counter_block_.size());
  encode_counter_block(counter_block_.data(), counter_block_.size(), encoded_);
  if (counter_block_row_ < 0) {
    insert_counter_block_.bind(1, run_id_)
        .bind(2, counter_block_first_seq_)
        .bind(3, count)
        .bind_static_blob(4, encoded_.data(), encoded_.size())
        .run();
    counter_block_row_ = db_.last_insert_rowid();
  } else {
    update_counter_block_.bind(1, counter_block_row_)
        .bind(2, count)
        .bind_static_blob(3, encoded_.data(), encoded_.size())
        .run();
  }
  counter_block_dirty_ = false;
}

std::size_t TraceInserter::add_kernels(const std::vector<profiler::KernelRecord>& kernels) {
  for (const profiler::KernelRecord& k : kernels) {
    insert_kernel_.bind(1, run_id_)
        .bind(2, kernel_seq_++)
        .bind(3, k.rank)
        .bind(4, k.device)
        .bind(5, k.stream)
        .bind(6, k.correlation)
        .bind(7, k.start_ns)
        .bind(8, k.end_ns)
        .bind(9, std::int64_t{name_id(k.name)})
        .bind(10, k.grid[0])
        .bind(11, k.grid[1])
        .bind(12, k.grid[2])
        .bind(13, k.block[0])
        .bind(14, k.block[1])
        .bind(15, k.block[2])
        .bind(16, k.bytes);
    if (k.op.empty())
      insert_kernel_.bind_null(17);
    else
      insert_kernel_.bind(17, std::int64_t{name_id(k.op)});
    if (k.phase)
      insert_kernel_.bind(18, profiler::span_kind_name(*k.phase));
    else
      insert_kernel_.bind_null(18);
    if (k.microbatch >= 0)
      insert_kernel_.bind(19, k.microbatch);
    else
      insert_kernel_.bind_null(19);
    if (k.chunk >= 0)
      insert_kernel_.bind(20, std::int64_t{k.chunk});
    else
      insert_kernel_.bind_null(20);
    insert_kernel_.run();
  }
  return kernels.size();
}

void TraceInserter::set_summary_json(const std::string& json) {
  update_summary_.bind(1, run_id_);
  if (json.empty())
    update_summary_.bind_null(2);
  else
    update_summary_.bind(2, json);
  update_summary_.run();
}

void TraceInserter::mark_dirty(LaneState& lane) {
  if (lane.stats_dirty) return;
  lane.stats_dirty = true;
  dirty_lanes_.push_back(static_cast<std::size_t>(&lane - lanes_.data()));
}

void TraceInserter::write_pending(std::int64_t now_unix_ns) {
  // Only the lanes changed since the last commit: a commit costs what it adds, not the run's
  // lane count.
  for (const std::size_t slot : dirty_lanes_) {
    LaneState& lane = lanes_[slot];
    for (std::size_t depth = 0; depth < lane.depths.size(); ++depth) {
      DepthState& d = lane.depths[depth];
      if (d.block_dirty && !d.block.empty()) write_block(lane, static_cast<std::int32_t>(depth), d);
    }
    if (lane.stats_dirty) {
      update_lane_.bind(1, lane.db_id)
          .bind(2, lane.span_count)
          .bind(3, lane.max_depth)
          .bind(4, lane.start_ns)
          .bind(5, lane.end_ns)
          .run();
      lane.stats_dirty = false;
    }
  }
  dirty_lanes_.clear();
  if (counter_block_dirty_ && !counter_block_.empty()) write_counter_block();
  update_commit_.bind(1, run_id_).bind(2, now_unix_ns).run();
}

void TraceInserter::write_block_index() {
  sqlite::Statement read = db_.prepare(kBlockWalkSql);
  sqlite::Statement insert = db_.prepare(
      "INSERT OR REPLACE INTO lane_block_index(lane, depth, block_count, summaries) VALUES (?1, "
      "?2, ?3, ?4)");
  std::vector<BlockIndexEntry> entries;
  for (const LaneState& lane : lanes_) {
    for (std::int32_t depth = 0; depth <= lane.max_depth; ++depth) {
      entries.clear();
      read.bind(1, lane.db_id).bind(2, depth).bind(3, std::numeric_limits<std::int64_t>::min());
      while (read.step()) entries.push_back(block_summary(read));
      read.reset();
      if (entries.empty()) continue;
      insert.bind(1, lane.db_id)
          .bind(2, depth)
          .bind(3, static_cast<std::int64_t>(entries.size()))
          .bind_static_blob(4, entries.data(), entries.size() * sizeof(BlockIndexEntry))
          .run();
    }
  }
}

void TraceInserter::rebuild_unordered_lanes(std::int64_t now_unix_ns) {
  write_pending(now_unix_ns);
  sqlite::Statement read =
      db_.prepare("SELECT id, span_count, spans FROM span_blocks WHERE lane = ?1");
  sqlite::Statement erase = db_.prepare("DELETE FROM span_blocks WHERE lane = ?1");
  std::vector<PackedSpan> all, block;
  for (LaneState& lane : lanes_) {
    if (!lane.nesting.out_of_order()) continue;
    all.clear();
    read.bind(1, lane.db_id);
    while (read.step()) {
      decode_block(read.column_blob(2), read.column_bytes(2), read.column_int64(1),
                   read.column_int64(0), db_.path(), block);
      all.insert(all.end(), block.begin(), block.end());
    }
    read.reset();
    erase.bind(1, lane.db_id).run();
    // Nesting order; spans that start and end together keep their order of appending.
    std::sort(all.begin(), all.end(), [](const PackedSpan& a, const PackedSpan& b) {
      if (a.start_ns != b.start_ns || a.end_ns != b.end_ns) return nests_before(a, b);
      return a.seq < b.seq;
    });
    const std::int64_t db_id = lane.db_id;
    lane = LaneState{};
    lane.db_id = db_id;
    for (const PackedSpan& p : all) place(lane, p);
    mark_dirty(lane);
  }
  write_pending(now_unix_ns);
}

}  // namespace pipetune::db
