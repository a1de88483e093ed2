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

}  // namespace

SparseRowsExchange all_reduce_touched_rows(comm::Communicator& comm,
                                           const comm::ProcessGroup& group,
                                           tensor::DeviceAllocator& storage, float* table,
                                           std::int64_t table_rows, std::int64_t width,
                                           std::span<const std::int32_t> touched) {
  SparseRowsExchange out;
  const auto g = static_cast<std::size_t>(group.size());
  if (g <= 1) return out;
  if (table_rows > kMaxRows)
    throw std::invalid_argument("sparse embedding gradient: a table of " +
                                std::to_string(table_rows) + " rows (at most 2^24)");
  for (const std::int32_t r : touched)
    if (r < 0 || r >= table_rows)
      throw std::invalid_argument("sparse embedding gradient: row " + std::to_string(r) +
                                  " outside the table's " + std::to_string(table_rows));
  const auto mem = profiler::MemoryCategory::Temporaries;
  std::vector<std::int32_t> rows(touched.begin(), touched.end());  // sorted, each once
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
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
  std::vector<float> values(rows.size() * w);
  for_each_run(rows, [&](std::size_t first, std::size_t count) {
    storage.copy_to_host(values.data() + first * w,
                         table + static_cast<std::size_t>(rows[first]) * w,
                         count * w * sizeof(float));
  });
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
  const std::vector<float> all = gathered.to_host();
  std::vector<std::int32_t> any;
  for (std::size_t k = 0; k < g * most; ++k)
    if (all[k * record] >= 0.0f) any.push_back(static_cast<std::int32_t>(all[k * record]));
  std::sort(any.begin(), any.end());
  any.erase(std::unique(any.begin(), any.end()), any.end());
  std::vector<float> sums(any.size() * w, 0.0f);
  for (std::size_t k = 0; k < g * most; ++k) {
    const float index = all[k * record];
    if (index < 0.0f) continue;
    ++out.rows_received;
    const auto at = static_cast<std::size_t>(
        std::lower_bound(any.begin(), any.end(), static_cast<std::int32_t>(index)) - any.begin());
    float* row = sums.data() + at * w;
    const float* add = all.data() + k * record + 1;
    for (std::size_t j = 0; j < w; ++j) row[j] += add[j];
  }
  for_each_run(any, [&](std::size_t first, std::size_t count) {
    storage.copy_from_host(table + static_cast<std::size_t>(any[first]) * w,
                           sums.data() + first * w, count * w * sizeof(float));
  });
  return out;
}

}  // namespace pipetune::runtime
