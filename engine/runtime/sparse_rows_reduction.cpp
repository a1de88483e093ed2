#include "engine/runtime/sparse_rows_reduction.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "profiler/trace.hpp"

namespace pipetune::runtime {

namespace {

// Row indices travel as floats: exact below 2^24, far above any vocabulary shard.
constexpr std::int64_t kMaxRows = std::int64_t{1} << 24;

// fn(first, count) for each run of consecutive values in the sorted `rows`.
template <class Fn>
void for_each_run(const std::vector<std::int32_t>& rows, Fn&& fn) {
  std::size_t i = 0;
  while (i < rows.size()) {
    std::size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    fn(i, j - i);
    i = j;
  }
}

// The touched rows sorted, each once; std::invalid_argument for a table too long for float indices
// or a row outside it.
std::vector<std::int32_t> sorted_rows(std::span<const std::int32_t> touched,
                                      std::int64_t table_rows) {
  if (table_rows > kMaxRows)
    throw std::invalid_argument("sparse embedding gradient: a table of " +
                                std::to_string(table_rows) + " rows (at most 2^24)");
  for (const std::int32_t r : touched)
    if (r < 0 || r >= table_rows)
      throw std::invalid_argument("sparse embedding gradient: row " + std::to_string(r) +
                                  " outside the table's " + std::to_string(table_rows));
  std::vector<std::int32_t> rows(touched.begin(), touched.end());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// The values of `rows` (sorted) of `table`, (rows, w) on the host: a copy per run of consecutive
// rows, so only the touched rows leave the table's storage.
std::vector<float> read_rows(tensor::DeviceAllocator& storage, const float* table,
                             const std::vector<std::int32_t>& rows, std::size_t w) {
  std::vector<float> values(rows.size() * w);
  for_each_run(rows, [&](std::size_t first, std::size_t count) {
    storage.copy_to_host(values.data() + first * w,
                         table + static_cast<std::size_t>(rows[first]) * w,
                         count * w * sizeof(float));
  });
  return values;
}

// The rows `records` (index, w values each, in the order they arrived) name, sorted and each once,
// with their records added in that order from zero; a negative index is padding, skipped.
struct RowSums {
  std::vector<std::int32_t> rows;
  std::vector<float> sums;   // (rows, w)
  std::int64_t records = 0;  // added (padding excluded)
};
RowSums sum_records(const std::vector<float>& records, std::size_t w) {
  const std::size_t record = w + 1;
  RowSums out;
  for (std::size_t k = 0; k < records.size(); k += record)
    if (records[k] >= 0.0f) out.rows.push_back(static_cast<std::int32_t>(records[k]));
  std::sort(out.rows.begin(), out.rows.end());
  out.rows.erase(std::unique(out.rows.begin(), out.rows.end()), out.rows.end());
  out.sums.assign(out.rows.size() * w, 0.0f);
  for (std::size_t k = 0; k < records.size(); k += record) {
    if (records[k] < 0.0f) continue;
    ++out.records;
    const auto at = static_cast<std::size_t>(
        std::lower_bound(out.rows.begin(), out.rows.end(), static_cast<std::int32_t>(records[k])) -
        out.rows.begin());
    float* row = out.sums.data() + at * w;
    for (std::size_t j = 0; j < w; ++j) row[j] += records[k + 1 + j];
  }
  return out;
}

}  // namespace

SparseRowsExchange all_reduce_touched_rows(comm::Communicator& comm,
                                           const comm::ProcessGroup& group,
                                           tensor::DeviceAllocator& storage, float* table,
                                           std::int64_t table_rows, std::int64_t width,
                                           std::span<const std::int32_t> touched) {
  SparseRowsExchange out;
  const auto g = static_cast<std::size_t>(group.size());
  if (g <= 1) return out;
  const auto mem = profiler::MemoryCategory::Temporaries;
  const std::vector<std::int32_t> rows = sorted_rows(touched, table_rows);
  out.rows_sent = static_cast<std::int64_t>(rows.size());

  // 1. How many rows each member sends.
  tensor::FlatStorage count(1, mem, &storage), counts(g, mem, &storage);
  count.upload(std::vector<float>{static_cast<float>(rows.size())});
  comm.all_gather(group, {count.data(), 1}, {counts.data(), g});
  const std::vector<float> per_member = counts.to_host();
  const auto most =
      static_cast<std::size_t>(*std::max_element(per_member.begin(), per_member.end()));
  if (most == 0) return out;

  // 2. This member's records (index, row), padded to `most` with index -1. Only the touched rows
  // leave the table's storage, a run of consecutive rows at a time.
  const auto w = static_cast<std::size_t>(width), record = w + 1;
  const std::vector<float> values = read_rows(storage, table, rows, w);
  std::vector<float> mine(most * record, 0.0f);
  for (std::size_t i = 0; i < most; ++i) mine[i * record] = -1.0f;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    mine[i * record] = static_cast<float>(rows[i]);
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(i * w), w,
                mine.begin() + static_cast<std::ptrdiff_t>(i * record + 1));
  }
  tensor::FlatStorage sent(mine.size(), mem, &storage), gathered(g * mine.size(), mem, &storage);
  sent.upload(mine);
  comm.all_gather(group, {sent.data(), sent.size()}, {gathered.data(), gathered.size()});
  out.floats_moved = static_cast<std::int64_t>(gathered.size());

  // 3. Every row any member touched: the members' records added in group-rank order from zero,
  // then written back a run of consecutive rows at a time.
  const RowSums s = sum_records(gathered.to_host(), w);
  out.rows_received = s.records;
  for_each_run(s.rows, [&](std::size_t first, std::size_t count) {
    storage.copy_from_host(table + static_cast<std::size_t>(s.rows[first]) * w,
                           s.sums.data() + first * w, count * w * sizeof(float));
  });
  return out;
}

SparseRowsExchange reduce_scatter_touched_rows(comm::Communicator& comm,
                                               const comm::ProcessGroup& group,
                                               tensor::DeviceAllocator& storage, const float* table,
                                               std::int64_t table_rows, std::int64_t width,
                                               std::span<const std::int32_t> touched,
                                               std::span<const TableRange> owned, float* mine,
                                               RowsWrite write) {
  SparseRowsExchange out;
  const auto g = static_cast<std::size_t>(group.size());
  const std::int64_t elements = table_rows * width;
  if (owned.size() != g)
    throw std::invalid_argument("sparse embedding gradient: " + std::to_string(owned.size()) +
                                " owned ranges for a group of " + std::to_string(g));
  for (const TableRange& r : owned)
    if (r.lo < 0 || r.lo > r.hi || r.hi > elements)
      throw std::invalid_argument(
          "sparse embedding gradient: owned range [" + std::to_string(r.lo) + ", " +
          std::to_string(r.hi) + ") outside the table's " + std::to_string(elements) + " elements");
  const auto mem = profiler::MemoryCategory::Temporaries;
  const std::vector<std::int32_t> rows = sorted_rows(touched, table_rows);
  out.rows_sent = static_cast<std::int64_t>(rows.size());
  const auto w = static_cast<std::size_t>(width), record = w + 1;

  // 1. The records for each member: every touched row that meets its range, whole (a row across
  // two ranges goes to both), in row order.
  std::vector<std::vector<std::size_t>> to(g);  // indices into `rows`
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t begin = std::int64_t{rows[i]} * width, end = begin + width;
    for (std::size_t j = 0; j < g; ++j)
      if (owned[j].lo < end && begin < owned[j].hi) to[j].push_back(i);
  }
  const std::vector<float> values = read_rows(storage, table, rows, w);
  std::vector<float> records;
  std::vector<float> count_of(g);
  std::vector<std::size_t> send_sizes(g), recv_sizes(g);
  for (std::size_t j = 0; j < g; ++j) {
    count_of[j] = static_cast<float>(to[j].size());
    send_sizes[j] = to[j].size() * record;
    for (const std::size_t i : to[j]) {
      records.push_back(static_cast<float>(rows[i]));
      records.insert(records.end(), values.begin() + static_cast<std::ptrdiff_t>(i * w),
                     values.begin() + static_cast<std::ptrdiff_t>((i + 1) * w));
    }
  }

  // 2. How many records each member sends this one, then the records (group-rank order).
  tensor::FlatStorage counts_sent(g, mem, &storage), counts_got(g, mem, &storage);
  counts_sent.upload(count_of);
  comm.all_to_all(group, {counts_sent.data(), g}, {counts_got.data(), g});
  const std::vector<float> from = counts_got.to_host();
  std::size_t received = 0;
  for (std::size_t i = 0; i < g; ++i) {
    recv_sizes[i] = static_cast<std::size_t>(from[i]) * record;
    received += recv_sizes[i];
  }
  // At least one float each, so that no member passes a null buffer.
  tensor::FlatStorage sent(std::max<std::size_t>(records.size(), 1), mem, &storage),
      got(std::max<std::size_t>(received, 1), mem, &storage);
  if (!records.empty()) sent.upload(0, records);
  comm.all_to_all_v(group, {sent.data(), records.size()}, send_sizes, {got.data(), received},
                    recv_sizes);
  out.floats_moved = static_cast<std::int64_t>(received);
  if (received == 0) return out;

  // 3. Each row of the member's range that a member touched: the records added in group-rank
  // order from zero, then written over (or added to) the range, a run of consecutive rows at a
  // time, clipped to the range.
  std::vector<float> all(received);
  got.download(0, all);
  const RowSums s = sum_records(all, w);
  out.rows_received = s.records;
  const std::vector<std::int32_t>& any = s.rows;
  const std::vector<float>& sums = s.sums;
  const TableRange my = owned[static_cast<std::size_t>(group.index_of(comm.rank()))];
  for_each_run(any, [&](std::size_t first, std::size_t count) {
    const std::int64_t begin = std::max(std::int64_t{any[first]} * width, my.lo);
    const std::int64_t end =
        std::min((std::int64_t{any[first]} + static_cast<std::int64_t>(count)) * width, my.hi);
    if (begin >= end) return;
    const auto n = static_cast<std::size_t>(end - begin);
    const float* sum = sums.data() + first * w +
                       static_cast<std::size_t>(begin - std::int64_t{any[first]} * width);
    float* dst = mine + (begin - my.lo);
    if (write == RowsWrite::set) {
      storage.copy_from_host(dst, sum, n * sizeof(float));
      return;
    }
    std::vector<float> held(n);
    storage.copy_to_host(held.data(), dst, n * sizeof(float));
    for (std::size_t j = 0; j < n; ++j) held[j] += sum[j];
    storage.copy_from_host(dst, held.data(), n * sizeof(float));
  });
  return out;
}

}  // namespace pipetune::runtime
