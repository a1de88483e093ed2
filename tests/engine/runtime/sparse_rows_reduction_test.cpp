// The sparse rows exchange (engine/runtime/sparse_rows_reduction.hpp) on a thread cluster of 3:
// members touching different, overlapping and no rows (the padding path), listed in any order,
// against the dense sum of their tables in group-rank order, bit for bit, and the same on every
// member; untouched rows stay zero; a row outside the table is refused. Under ZeRO (the rows to
// their owners): each member's range, rows across two ranges and an empty range included, holds
// the same dense sum, written over its own gradient or added to a shard.
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

// The dense sum of the members' tables in group-rank order, element by element.
std::vector<float> dense_sum(const std::vector<std::vector<std::int32_t>>& touched) {
  std::vector<float> want(static_cast<std::size_t>(kRows * kWidth), 0.0f);
  for (std::size_t m = 0; m < touched.size(); ++m) {
    const std::vector<float> t = table_of(static_cast<int>(m), touched[m]);
    for (std::size_t k = 0; k < t.size(); ++k) want[k] += t[k];
  }
  return want;
}

TEST(SparseRowsReduceScatter, EachOwnerGetsTheDenseSumOfItsRange) {
  const std::vector<std::vector<std::int32_t>> touched = {{5, 0, 2, 0}, {3, 2, 6}, {}};
  const std::vector<float> want = dense_sum(touched);
  // Rows of 3: row 2 (elements 6 to 8) lies across members 0 and 1; row 6 is member 2's.
  const std::vector<TableRange> owned = {{0, 8}, {8, 15}, {15, 21}};
  comm::ProcessGroup group{"dp", {0, 1, 2}};
  std::vector<std::vector<float>> got(3);
  std::vector<SparseRowsExchange> stats(3);
  comm::ThreadCluster(3).run([&](comm::Communicator& comm) {
    const auto m = static_cast<std::size_t>(comm.rank());
    std::vector<float> t = table_of(comm.rank(), touched[m]);
    stats[m] =
        reduce_scatter_touched_rows(comm, group, tensor::host_allocator(), t.data(), kRows, kWidth,
                                    touched[m], owned, t.data() + owned[m].lo, RowsWrite::set);
    got[m] = std::move(t);
  });
  for (std::size_t m = 0; m < 3; ++m) {
    SCOPED_TRACE("member " + std::to_string(m));
    for (std::int64_t k = owned[m].lo; k < owned[m].hi; ++k)
      EXPECT_EQ(got[m][static_cast<std::size_t>(k)], want[static_cast<std::size_t>(k)])
          << "element " << k << " (row " << k / kWidth << ")";
  }
  // Member 0 sends rows 0 and 2 to itself, 2 and 5 to 1 and 2; member 1 rows 2, 3 to 0 and 1, 6
  // to 2. What each owner receives: 0 <- {0, 2} + {2}; 1 <- {2} + {2, 3}; 2 <- {5} + {6}.
  EXPECT_EQ(stats[0].rows_sent, 3);
  EXPECT_EQ(stats[1].rows_sent, 3);
  EXPECT_EQ(stats[2].rows_sent, 0);
  EXPECT_EQ(stats[0].rows_received, 3);
  EXPECT_EQ(stats[1].rows_received, 3);
  EXPECT_EQ(stats[2].rows_received, 2);
  EXPECT_EQ(stats[2].floats_moved, 2 * (kWidth + 1));
}

TEST(SparseRowsReduceScatter, AddsToAShardAndLeavesUntouchedRowsAlone) {
  const std::vector<std::vector<std::int32_t>> touched = {{1}, {4, 1}, {6}};
  const std::vector<float> want = dense_sum(touched);
  const std::vector<TableRange> owned = {{0, 10}, {10, 10}, {10, 21}};  // member 1 owns nothing
  comm::ProcessGroup group{"dp", {0, 1, 2}};
  std::vector<std::vector<float>> shards(3);
  comm::ThreadCluster(3).run([&](comm::Communicator& comm) {
    const auto m = static_cast<std::size_t>(comm.rank());
    const std::vector<float> t = table_of(comm.rank(), touched[m]);
    std::vector<float> shard(static_cast<std::size_t>(owned[m].hi - owned[m].lo), 0.5f);
    reduce_scatter_touched_rows(comm, group, tensor::host_allocator(), t.data(), kRows, kWidth,
                                touched[m], owned, shard.data(), RowsWrite::add);
    shards[m] = std::move(shard);
  });
  EXPECT_TRUE(shards[1].empty());
  for (const std::size_t m : {std::size_t{0}, std::size_t{2}})
    for (std::int64_t k = owned[m].lo; k < owned[m].hi; ++k) {
      const float touched_sum = want[static_cast<std::size_t>(k)];
      const float expected = touched_sum == 0.0f ? 0.5f : 0.5f + touched_sum;
      EXPECT_EQ(shards[m][static_cast<std::size_t>(k - owned[m].lo)], expected)
          << "member " << m << " element " << k;
    }
}

TEST(SparseRowsReduceScatter, RangesNotOnePerMemberAreRefused) {
  comm::ProcessGroup group{"dp", {0, 1}};
  std::vector<int> refused(2, 0);
  comm::ThreadCluster(2).run([&](comm::Communicator& comm) {
    std::vector<float> t(static_cast<std::size_t>(kRows * kWidth), 0.0f);
    const std::vector<TableRange> one = {{0, kRows * kWidth}};
    try {
      reduce_scatter_touched_rows(comm, group, tensor::host_allocator(), t.data(), kRows, kWidth,
                                  {}, one, t.data(), RowsWrite::set);
    } catch (const std::invalid_argument&) {
      refused[static_cast<std::size_t>(comm.rank())] = 1;
    }
  });
  EXPECT_EQ(refused, (std::vector<int>{1, 1}));
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
