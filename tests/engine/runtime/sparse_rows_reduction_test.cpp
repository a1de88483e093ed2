// The sparse rows exchange (engine/runtime/sparse_rows_reduction.hpp) on a thread cluster of 3:
// members touching different, overlapping and no rows (the padding path), listed in any order,
// against the dense sum of their tables in group-rank order, bit for bit, and the same on every
// member; untouched rows stay zero; a row outside the table is refused.
#include "engine/runtime/sparse_rows_reduction.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "engine/comm/thread_cluster.hpp"

namespace pipetune::runtime {
namespace {

constexpr std::int64_t kRows = 7, kWidth = 3;

// Member m's table: nonzero exactly in its touched rows (as a gradient after the embedding's
// backward), values that change under another summation order.
std::vector<float> table_of(int member, const std::vector<std::int32_t>& touched) {
  std::vector<float> t(static_cast<std::size_t>(kRows * kWidth), 0.0f);
  for (const std::int32_t r : touched)
    for (std::int64_t j = 0; j < kWidth; ++j)
      t[static_cast<std::size_t>(r * kWidth + j)] =
          (member == 1 ? 1e7f : 1.0f) / static_cast<float>(3 + r + j + member);
  return t;
}

TEST(SparseRowsReduction, EqualsTheDenseSumInGroupOrderOnEveryMember) {
  // In any order, a repeat counted once.
  const std::vector<std::vector<std::int32_t>> touched = {{5, 0, 2, 0}, {3, 2}, {}};
  const std::vector<std::int64_t> distinct = {3, 2, 0};
  comm::ProcessGroup group{"dp", {0, 1, 2}};
  std::vector<float> want(static_cast<std::size_t>(kRows * kWidth), 0.0f);
  for (int m = 0; m < 3; ++m) {  // ((0 + t0) + t1) + t2, element by element
    const std::vector<float> t = table_of(m, touched[static_cast<std::size_t>(m)]);
    for (std::size_t k = 0; k < t.size(); ++k) want[k] += t[k];
  }
  std::vector<std::vector<float>> got(3);
  std::vector<SparseRowsExchange> stats(3);
  comm::ThreadCluster(3).run([&](comm::Communicator& comm) {
    const auto m = static_cast<std::size_t>(comm.rank());
    std::vector<float> t = table_of(comm.rank(), touched[m]);
    stats[m] = all_reduce_touched_rows(comm, group, tensor::host_allocator(), t.data(), kRows,
                                       kWidth, touched[m]);
    got[m] = std::move(t);
  });
  for (std::size_t m = 0; m < 3; ++m) {
    SCOPED_TRACE("member " + std::to_string(m));
    ASSERT_EQ(got[m].size(), want.size());
    EXPECT_EQ(std::memcmp(got[m].data(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_EQ(stats[m].rows_sent, distinct[m]);
    EXPECT_EQ(stats[m].rows_received, 5);                    // 3 + 2 + 0 records
    EXPECT_EQ(stats[m].floats_moved, 3 * 3 * (kWidth + 1));  // padded to 3 records each
  }
  for (const std::int64_t r : {1, 4, 6})  // nobody's
    for (std::int64_t j = 0; j < kWidth; ++j)
      EXPECT_EQ(got[0][static_cast<std::size_t>(r * kWidth + j)], 0.0f);
}

TEST(SparseRowsReduction, ARowOutsideTheTableIsRefused) {
  comm::ProcessGroup group{"dp", {0, 1}};
  std::vector<int> refused(2, 0);
  comm::ThreadCluster(2).run([&](comm::Communicator& comm) {
    std::vector<float> t(static_cast<std::size_t>(kRows * kWidth), 0.0f);
    const std::vector<std::int32_t> rows = {static_cast<std::int32_t>(kRows)};
    try {
      all_reduce_touched_rows(comm, group, tensor::host_allocator(), t.data(), kRows, kWidth, rows);
    } catch (const std::invalid_argument&) {
      refused[static_cast<std::size_t>(comm.rank())] = 1;
    }
  });
  EXPECT_EQ(refused, (std::vector<int>{1, 1}));
}

}  // namespace
}  // namespace pipetune::runtime
