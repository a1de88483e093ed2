// interleaved-1f1b: Megatron's virtual-pipeline schedule with a micro-batch group size G
// (schedules.md a.3; forward_backward_pipelining_with_interleaving, get_schedule_table).
//
// Chunk c of rank r is layer group c*p + r. Forwards follow a table that walks micro-batches in
// groups of G: for each group, for each chunk, every micro-batch of the group. Backward k uses the
// same table entry with the chunk reversed (v-1-c): backwards of a chunk pop its oldest stored
// activations, and per chunk the table lists micro-batches in order, so the micro-batch is the
// table's. Rank r runs 2(p-r-1) + (v-1)G warm-up forwards (capped at m*v), then steady
// (F of entry k + warm-up, B of entry k) pairs, then the remaining backwards. Megatron requires
// p <= G <= m and a last group of 0 or >= p micro-batches (a shorter one creates dependency
// bubbles); we reject the same parameters.
#include <algorithm>
#include <utility>
#include <vector>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"

namespace pipetune::schedule {

namespace {

constexpr std::string_view kName = "interleaved-1f1b";

struct TableEntry {
  int microbatch;
  int chunk;
};

std::vector<TableEntry> forward_table(int m, int v, int group) {
  std::vector<TableEntry> table;
  table.reserve(static_cast<std::size_t>(m) * static_cast<std::size_t>(v));
  for (int first = 0; first < m; first += group) {
    const int end = std::min(first + group, m);
    for (int c = 0; c < v; ++c)
      for (int i = first; i < end; ++i) table.push_back({i, c});
  }
  return table;
}

}  // namespace

Schedule generate_interleaved_1f1b(const GeneratorParams& params) {
  linear::check_sizes(kName, params);
  linear::require_no_vocab(kName, params);
  const int p = params.stages;
  const int m = params.microbatches;
  const int v = params.chunks == 0 ? 2 : params.chunks;
  if (v < 2)
    linear::fail(kName, {"plan.chunks"},
                 "needs chunks >= 2 (got chunks=" + std::to_string(v) +
                     "); use 1f1b for one chunk per rank");
  const int G = params.group_size == 0 ? p : params.group_size;
  const std::string g_text =
      "G=" + std::to_string(G) + (params.group_size == 0 ? " (the default, = stages)" : "");
  // G is the plan's group size when given, else its stages.
  const auto group_fields = [&](std::vector<std::string> fields) {
    fields.emplace_back(params.group_size == 0 ? "plan.pp" : "plan.group_size");
    return fields;
  };
  if (m < G)
    linear::fail(kName, group_fields({"plan.microbatches"}),
                 "microbatches=" + std::to_string(m) + " is fewer than group size " + g_text);
  if (G < p)
    linear::fail(kName, {"plan.group_size", "plan.pp"},
                 "group size G=" + std::to_string(G) +
                     " is smaller than stages p=" + std::to_string(p) + " (needs p <= G <= m)");
  const int last_group = m % G;
  if (last_group != 0 && last_group < p)
    linear::fail(kName, group_fields({"plan.microbatches"}),
                 "microbatches=" + std::to_string(m) + " leaves a last group of " +
                     std::to_string(last_group) + " (m mod G, " + g_text +
                     "), which must be 0 or at least p=" + std::to_string(p));

  const std::vector<TableEntry> table = forward_table(m, v, G);
  const int total = m * v;
  Schedule s = linear::empty_schedule(kName, p, m, v, VocabMode::None);
  auto forward = [&](int k) {
    const TableEntry& e = table[static_cast<std::size_t>(k)];
    return Op{OpKind::F, static_cast<std::int16_t>(e.chunk), e.microbatch};
  };
  auto backward = [&](int k) {
    const TableEntry& e = table[static_cast<std::size_t>(k)];
    return Op{OpKind::BW, static_cast<std::int16_t>(v - 1 - e.chunk), e.microbatch};
  };
  for (int r = 0; r < p; ++r) {
    auto& ops = s.ranks[static_cast<std::size_t>(r)];
    ops.reserve(2 * static_cast<std::size_t>(total));
    const int warmup = std::min(2 * (p - r - 1) + (v - 1) * G, total);
    for (int k = 0; k < warmup; ++k) ops.push_back(forward(k));
    for (int k = 0; k < total - warmup; ++k) {
      ops.push_back(forward(k + warmup));
      ops.push_back(backward(k));
    }
    for (int k = total - warmup; k < total; ++k) ops.push_back(backward(k));
  }
  return linear::validated(std::move(s));
}

}  // namespace pipetune::schedule
