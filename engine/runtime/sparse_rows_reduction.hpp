// EmbRace's sparse embedding gradient (ParallelPlan::sparse_embedding_gradient): a vocabulary
// table's gradient is nonzero only in the rows of the tokens a rank embedded, so the reduction
// group exchanges those rows (and their indices) instead of all-reducing the whole table.
//
// Each member all-gathers the count of rows it touched, then its rows packed as (index, values)
// records padded to the largest count; every member then sets each row any member touched to the
// members' records added in group-rank order from zero. Only those rows move between the table's
// storage and the host (a copy per run of consecutive rows), not the table. The order is the same
// on every member, so the replicas stay bit for bit equal; the sums equal the dense all-reduce's up
// to fp32 rounding order. Rows no member touched are zero already (the gradients start each
// iteration at zero).
//
// Under ZeRO (EmbRace's AlltoAll) each member owns a range of the table's gradient, so a row goes
// only to the members whose range it meets: an all-to-all of the counts, then one of the records,
// and each member sums the records of its range in group-rank order. Each member then holds its
// range's sum; the rows it does not own are none of its business (the optimizer updates the
// owned range only).
#pragma once

#include <cstdint>
#include <span>

#include "engine/comm/communicator.hpp"
#include "engine/tensor/device_allocator.hpp"

namespace pipetune::runtime {

struct SparseRowsExchange {
  std::int64_t rows_sent = 0;      // this member's touched rows
  std::int64_t rows_received = 0;  // records from all members (padding excluded)
  std::int64_t floats_moved = 0;   // what this member's all-gather or all-to-all output holds
};

inline SparseRowsExchange& operator+=(SparseRowsExchange& a, const SparseRowsExchange& b) {
  a.rows_sent += b.rows_sent;
  a.rows_received += b.rows_received;
  a.floats_moved += b.floats_moved;
  return a;
}

// A member's range of a table, in elements from the table's first: [lo, hi), possibly empty.
struct TableRange {
  std::int64_t lo = 0, hi = 0;
};

// What the owner does with its range's sum: `set` writes it over the range (which held this
// member's own gradient, counted in the sum), `add` adds it (a shard accumulated over passes).
enum class RowsWrite { set, add };

// `table`: (table_rows, width) floats on `storage`; `touched`: this member's touched rows (any
// order, repeats counted once), each in [0, table_rows) (std::invalid_argument otherwise). A
// group of one: nothing.
SparseRowsExchange all_reduce_touched_rows(comm::Communicator& comm,
                                           const comm::ProcessGroup& group,
                                           tensor::DeviceAllocator& storage, float* table,
                                           std::int64_t table_rows, std::int64_t width,
                                           std::span<const std::int32_t> touched);

// The exchange under ZeRO: `owned[i]` is group rank i's range of `table` (within its
// table_rows x width elements; the ranges need not cover it); `mine` holds this member's range
// (owned[me].hi - owned[me].lo floats on `storage`, and may be the table's own elements there).
// Rows no member touched are left alone in `mine`. std::invalid_argument for a touched row
// outside the table, or ranges not one per member or outside the table.
SparseRowsExchange reduce_scatter_touched_rows(comm::Communicator& comm,
                                               const comm::ProcessGroup& group,
                                               tensor::DeviceAllocator& storage, const float* table,
                                               std::int64_t table_rows, std::int64_t width,
                                               std::span<const std::int32_t> touched,
                                               std::span<const TableRange> owned, float* mine,
                                               RowsWrite write);

}  // namespace pipetune::runtime
