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
#pragma once

#include <cstdint>
#include <span>

#include "engine/comm/communicator.hpp"
#include "engine/tensor/device_allocator.hpp"

namespace pipetune::runtime {

struct SparseRowsExchange {
  std::int64_t rows_sent = 0;      // this member's touched rows
  std::int64_t rows_received = 0;  // records from all members (padding excluded)
  std::int64_t floats_moved = 0;   // what each member's all-gather output holds
};

// `table`: (table_rows, width) floats on `storage`; `touched`: this member's touched rows (any
// order, repeats counted once), each in [0, table_rows) (std::invalid_argument otherwise). A
// group of one: nothing.
SparseRowsExchange all_reduce_touched_rows(comm::Communicator& comm,
                                           const comm::ProcessGroup& group,
                                           tensor::DeviceAllocator& storage, float* table,
                                           std::int64_t table_rows, std::int64_t width,
                                           std::span<const std::int32_t> touched);

}  // namespace pipetune::runtime
