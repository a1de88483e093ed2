// EmbRace under ZeRO-1 (DataParallelOptimizer with a sparse unit): the flat buffer's owned ranges
// are reduced around the table by an uneven reduce-scatter on each side of it, and the table's
// part by its touched rows. With the table in the middle of the buffer, at its end and at its
// start, each member's owned range equals the dense sum in group-rank order, ((g0 + g1) + g2),
// bit for bit, as the dense ZeRO-1 reduce-scatter gives it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/thread_cluster.hpp"
#include "engine/model/parameters.hpp"
#include "engine/runtime/optimizer.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::runtime {
namespace {

constexpr std::int64_t kMembers = 3, kWidth = 3, kTableRows = 5;

model::ParamEntry vector_entry(const std::string& name, std::int64_t n) {
  model::ParamEntry e;
  e.name = name;
  e.shape = tensor::Shape{n};
  e.layout = model::ShardLayout::whole(n);
  return e;
}

// The rows each member touched (the table's gradient is nonzero there only).
const std::vector<std::vector<std::int32_t>> kTouched = {{0, 3}, {3, 4, 1}, {}};

// Member m's gradient at flat element k: the dense units everywhere, the table in its touched
// rows; values whose sum depends on the order.
float gradient_of(int member, std::int64_t k, std::int64_t table_at) {
  if (k >= table_at && k < table_at + kTableRows * kWidth) {
    const std::int64_t row = (k - table_at) / kWidth;
    bool touched = false;
    for (const std::int32_t r : kTouched[static_cast<std::size_t>(member)]) touched |= r == row;
    if (!touched) return 0.0f;
  }
  return (member == 1 ? 1e7f : 1.0f) / static_cast<float>(3 + k + member);
}

// `before` dense elements, the table, then `after` dense elements (units "h.0", "wte", "lnf").
void expect_owned_ranges_are_the_dense_sum(std::int64_t before, std::int64_t after) {
  std::vector<std::vector<float>> owned(kMembers);
  std::vector<std::int64_t> lo(kMembers), hi(kMembers);
  std::int64_t padded = 0;
  std::vector<SparseRowsExchange> stats(kMembers);
  comm::ThreadCluster(kMembers).run([&](comm::Communicator& comm) {
    const int m = comm.rank();
    const auto i = static_cast<std::size_t>(m);
    model::ParameterSet set;
    if (before > 0) set.add(vector_entry("h.0.a", before));
    set.add(vector_entry("wte", kTableRows * kWidth));
    if (after > 0) set.add(vector_entry("lnf.w", after));
    set.allocate(kMembers);
    tensor::CpuBackend backend(1);
    DataParallelOptimizer opt(set, comm, comm::ProcessGroup{"dp", {0, 1, 2}}, 0, 1, backend);
    opt.set_sparse_unit(set.find_unit("wte"), kWidth);
    std::span<float> g = set.flat_grads().host_span();
    for (std::size_t k = 0; k < g.size(); ++k)
      g[k] = static_cast<std::int64_t>(k) < before + kTableRows * kWidth + after
                 ? gradient_of(m, static_cast<std::int64_t>(k), before)
                 : 0.0f;
    opt.reduce_gradients(kTouched[i]);
    lo[i] = opt.owned_lo();
    hi[i] = opt.owned_hi();
    owned[i].assign(g.begin() + lo[i], g.begin() + hi[i]);
    stats[i] = opt.last_sparse_exchange();
    if (m == 0) padded = set.padded_size();
  });
  for (int m = 0; m < kMembers; ++m) {
    const auto i = static_cast<std::size_t>(m);
    SCOPED_TRACE("member " + std::to_string(m));
    ASSERT_EQ(hi[i] - lo[i], padded / kMembers);
    for (std::int64_t k = lo[i]; k < hi[i]; ++k) {
      float want = 0.0f;
      if (k < before + kTableRows * kWidth + after)  // ((0 + g0) + g1) + g2
        for (int s = 0; s < kMembers; ++s) want += gradient_of(s, k, before);
      EXPECT_EQ(owned[i][static_cast<std::size_t>(k - lo[i])], want) << "element " << k;
    }
    EXPECT_EQ(stats[i].rows_sent, static_cast<std::int64_t>(kTouched[i].size()));
  }
}

TEST(SparseZeroOneReduction, TableInTheMiddleOfTheBuffer) {
  expect_owned_ranges_are_the_dense_sum(10, 5);  // 30 elements: shards of 10
}

TEST(SparseZeroOneReduction, TableAtTheBuffersEnd) {
  expect_owned_ranges_are_the_dense_sum(12, 0);  // 27 elements: the table ends the buffer
}

TEST(SparseZeroOneReduction, TableAtTheBuffersStartWithPadding) {
  expect_owned_ranges_are_the_dense_sum(0, 4);  // 19 elements padded to 21
}

}  // namespace
}  // namespace pipetune::runtime
