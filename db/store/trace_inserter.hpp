// The writer thread's half of the store: turns Trace parts into rows of one run. Parts join by
// lane (rank, stream, index) and by name text, so a run can arrive in pieces (per step, per
// rank). Each lane's spans get a nesting depth (span_nesting.hpp: a span starting before the
// innermost open one ends nests inside it) and are packed into blocks per (lane, depth).
//
// Depths assume each lane's spans arrive in start order across parts (within a part any order
// is fine: a part is sorted per lane first). A lane that breaks this is rebuilt by
// rebuild_unordered_lanes() at finish; until then its windows may show wrong depths.
//
// Not thread-safe; every call but the constructor's reads must run inside a write transaction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "db/store/counter_block.hpp"
#include "db/store/span_block.hpp"
#include "db/store/span_nesting.hpp"
#include "db/store/sqlite_util.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db {

class TraceInserter {
 public:
  // Inside a write transaction: adds span kinds this binary knows and span_kinds lacks.
  TraceInserter(sqlite::Connection& db, std::int64_t run_id);

  // Returns the rows added (spans + memory samples + counters + step metrics).
  std::size_t add_part(const profiler::Trace& part);
  std::size_t add_kernels(const std::vector<profiler::KernelRecord>& kernels);
  void set_summary_json(const std::string& json);

  // Writes partial blocks and lane statistics changed since the last call, and the commit
  // time; call before each commit so a reader sees every span appended so far.
  void write_pending(std::int64_t now_unix_ns);
  // Re-packs the lanes whose spans arrived out of start order; then writes pending state.
  void rebuild_unordered_lanes(std::int64_t now_unix_ns);
  // Once the run's spans are final: each lane and depth's block summaries into one
  // lane_block_index row, as a window walk reads them.
  void write_block_index();

 private:
  struct DepthState {
    std::int64_t next_ord = 0;
    bool has_last = false;
    std::int64_t last_end = 0;      // end of the last span placed at this depth
    std::vector<PackedSpan> block;  // the open block
    std::int64_t block_first_ord = 0;
    bool block_has_pred = false;
    std::int64_t block_pred_end = 0;
    std::int64_t block_row = -1;  // span_blocks.id once written
    bool block_dirty = false;
  };
  struct LaneState {
    std::int64_t db_id = 0;
    std::int64_t span_count = 0;
    std::int32_t max_depth = -1;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    bool stats_dirty = false;
    SpanNesting nesting;  // depths of the spans placed so far
    std::vector<DepthState> depths;
  };
  using LaneKey = std::tuple<std::int32_t, profiler::Stream, std::int32_t>;
  struct LaneKeyHash {
    std::size_t operator()(const LaneKey& k) const;
  };

  std::uint32_t name_id(const std::string& text);
  std::size_t lane_slot(const profiler::Lane& lane);  // index into lanes_, created on first use
  void place(LaneState& lane, const PackedSpan& span);
  void mark_dirty(LaneState& lane);  // its stats (and blocks) to write at the next commit
  void write_block(LaneState& lane, std::int32_t depth, DepthState& d);
  void write_counter_block();  // the open counter block, inserted or rewritten

  sqlite::Connection& db_;
  std::int64_t run_id_;
  std::array<std::uint8_t, profiler::kSpanKindCount> kind_ids_{};
  std::unordered_map<std::string, std::uint32_t> names_;
  std::vector<LaneState> lanes_;
  std::vector<std::size_t> dirty_lanes_;  // lanes_ slots with stats_dirty set
  std::unordered_map<LaneKey, std::size_t, LaneKeyHash> lane_index_;
  std::int64_t span_seq_ = 0, memory_seq_ = 0, counter_seq_ = 0, step_seq_ = 0, kernel_seq_ = 0;

  sqlite::Statement insert_lane_, insert_name_, insert_block_, update_block_, update_lane_;
  // The open counter block: samples from counter_block_first_seq_ on, its row once written.
  std::vector<std::uint8_t> encoded_;  // a span or counter block's BLOB as it is written
  std::vector<PackedCounter> counter_block_;
  std::int64_t counter_block_first_seq_ = 0;
  std::int64_t counter_block_row_ = -1;
  bool counter_block_dirty_ = false;

  sqlite::Statement insert_memory_, insert_counter_block_, update_counter_block_, insert_step_,
      insert_kernel_;
  sqlite::Statement update_commit_, update_summary_;
};

}  // namespace pipetune::db
