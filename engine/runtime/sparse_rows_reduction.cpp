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
  out.rows_sent = static_cast<std::int64_t>(touched.size());

  // 1. How many rows each member sends.
  tensor::FlatStorage count(1, mem, &storage), counts(g, mem, &storage);
  count.upload(std::vector<float>{static_cast<float>(touched.size())});
  comm.all_gather(group, {count.data(), 1}, {counts.data(), g});
  const std::vector<float> per_member = counts.to_host();
  const auto most =
      static_cast<std::size_t>(*std::max_element(per_member.begin(), per_member.end()));
  if (most == 0) return out;

  // 2. This member's records (index, row), padded to `most` with index -1.
  const auto w = static_cast<std::size_t>(width), record = w + 1;
  const tensor::TensorView whole{table, tensor::Shape{table_rows * width}};
  std::vector<float> mine(most * record, 0.0f);
  {
    const tensor::HostAccess rows(storage, tensor::ConstTensorView(whole));
    for (std::size_t i = 0; i < most; ++i) mine[i * record] = -1.0f;
    for (std::size_t i = 0; i < touched.size(); ++i) {
      const auto r = static_cast<std::size_t>(touched[i]);
      mine[i * record] = static_cast<float>(r);
      std::copy_n(rows.data() + r * w, w,
                  mine.begin() + static_cast<std::ptrdiff_t>(i * record + 1));
    }
  }
  tensor::FlatStorage sent(mine.size(), mem, &storage), gathered(g * mine.size(), mem, &storage);
  sent.upload(mine);
  comm.all_gather(group, {sent.data(), sent.size()}, {gathered.data(), gathered.size()});
  out.floats_moved = static_cast<std::int64_t>(gathered.size());

  // 3. Every row any member touched: zero, then each member's record added in group-rank order.
  const std::vector<float> all = gathered.to_host();
  tensor::HostAccess rows(storage, whole, tensor::HostAccess::Mode::read_write);
  for (std::size_t k = 0; k < g * most; ++k) {
    const float index = all[k * record];
    if (index < 0.0f) continue;
    std::fill_n(rows.data() + static_cast<std::size_t>(index) * w, w, 0.0f);
  }
  for (std::size_t k = 0; k < g * most; ++k) {
    const float index = all[k * record];
    if (index < 0.0f) continue;
    ++out.rows_received;
    float* row = rows.data() + static_cast<std::size_t>(index) * w;
    const float* add = all.data() + k * record + 1;
    for (std::size_t j = 0; j < w; ++j) row[j] += add[j];
  }
  rows.commit();
  return out;
}

}  // namespace pipetune::runtime
