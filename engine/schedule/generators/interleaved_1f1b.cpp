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
//
// Vocabulary parallelism (vocab-1, vocab-2; asked for in the Vocabulary Parallelism repository,
// not built there): the transformer ops keep this order with a warm-up longer by `extra` forwards
// on every rank, as 1f1b's is (the last group's backward of micro-batch i waits for the
// vocabulary barrier(s) of i, not for its own forward), and the S/T/IF/IB passes are placed
// around them in simulated time by 1f1b-vocab's eager planner (one_f_one_b_vocab.cpp), with
// every rank joining the barriers in one order: IF for the first k micro-batches, then per
// micro-batch S(i), IF(i + k), [T(i) under vocab-1]. k = the micro-batches whose first-chunk
// forward stage 0 runs in its warm-up, + 2. extra follows 1f1b's rule, 1 under vocab-2 and 2
// under vocab-1, and grows (up to v+1 more) only where the planner cannot place the passes
// around it. With unit costs a longer warm-up is no faster (p = 8, m = 64, v = 2: 469 for
// every extra from 1f1b's on; one fewer is 543 under vocab-2). Barriers per
// iteration as on 1f1b: m input reduces and m C1 (vocab-2), and m C2 more (vocab-1).
#include <algorithm>
#include <optional>
#include <string>
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

// Every rank's transformer ops: 2(p-r-1) + (v-1)G + extra warm-up forwards (capped at m*v),
// then (F, BW) pairs, then the remaining backwards.
std::vector<std::vector<Op>> transformer_order(const std::vector<TableEntry>& table, int p, int m,
                                               int v, int G, int extra) {
  const int total = m * v;
  auto forward = [&](int k) {
    const TableEntry& e = table[static_cast<std::size_t>(k)];
    return Op{OpKind::F, static_cast<std::int16_t>(e.chunk), e.microbatch};
  };
  auto backward = [&](int k) {
    const TableEntry& e = table[static_cast<std::size_t>(k)];
    return Op{OpKind::BW, static_cast<std::int16_t>(v - 1 - e.chunk), e.microbatch};
  };
  std::vector<std::vector<Op>> ranks(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& ops = ranks[static_cast<std::size_t>(r)];
    ops.reserve(2 * static_cast<std::size_t>(total));
    const int warmup = std::min(2 * (p - r - 1) + (v - 1) * G + extra, total);
    for (int k = 0; k < warmup; ++k) ops.push_back(forward(k));
    for (int k = 0; k < total - warmup; ++k) {
      ops.push_back(forward(k + warmup));
      ops.push_back(backward(k));
    }
    for (int k = total - warmup; k < total; ++k) ops.push_back(backward(k));
  }
  return ranks;
}

// The input embeddings every rank reduces before the first S: those of the micro-batches whose
// first-chunk forward stage 0 runs before its first backward, and two more.
int if_lookahead(const std::vector<Op>& stage0, int m) {
  int first_chunk = 0;
  for (const Op& op : stage0) {
    if (op.kind != OpKind::F) break;
    if (op.chunk == 0) ++first_chunk;
  }
  return std::min(m, first_chunk + 2);
}

// The warm-ups the vocabulary passes are tried around, shortest first: 1f1b's longer warm-up
// (linear::one_f_one_b_warmup: one forward more under vocab-2, two under vocab-1), longer only
// where the passes do not fit around it.
std::pair<int, int> warmup_extras(VocabMode vocab, int v) {
  const int first = vocab == VocabMode::Vocab1 ? 2 : 1;
  return {first, first + v + 1};
}

// Vocab-1 / vocab-2 on the interleaved order (see the file comment): the shortest warm-up, from
// 1f1b's rule on, that the planner can place the vocabulary passes around, and the schedule it
// planned. Whether the planner can is a matter of the orders alone, not of the costs: each rank
// takes the first ready op of four fixed sequences (barriers, T, transformer ops, IB), so what
// can run at all does not depend on which ran first.
struct VocabularyOrder {
  int extra = 0;
  Schedule schedule;
};

VocabularyOrder with_vocabulary(const GeneratorParams& params, const std::vector<TableEntry>& table,
                                int v, int G) {
  const int p = params.stages;
  const int m = params.microbatches;
  const CostTable costs = linear::checked_planning_costs(kName, params);
  const auto [first_extra, last_extra] = warmup_extras(params.vocab, v);
  std::string last_error;
  for (int extra = first_extra; extra <= last_extra; ++extra) {
    const std::vector<std::vector<Op>> transformer = transformer_order(table, p, m, v, G, extra);
    try {
      return {extra, linear::plan_vocabulary_passes(kName, params, v, transformer,
                                                    if_lookahead(transformer.front(), m), costs)};
    } catch (const ScheduleError& e) {
      last_error = e.what();  // this warm-up cannot take the passes; try a longer one
    }
  }
  linear::fail(kName, {"plan.vocab", "plan.microbatches"},
               std::string(vocab_mode_name(params.vocab)) + " found no order for these sizes (" +
                   last_error + ")");
  return {};
}

// The checks generate_interleaved_1f1b makes, and its chunks v and group size G.
std::pair<int, int> checked_chunks_and_group(const GeneratorParams& params) {
  linear::check_sizes(kName, params);
  if (params.vocab == VocabMode::Interlaced) linear::require_no_vocab(kName, params);
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
  return {v, G};
}

}  // namespace

Schedule generate_interleaved_1f1b(const GeneratorParams& params) {
  const auto [v, G] = checked_chunks_and_group(params);
  const int p = params.stages;
  const int m = params.microbatches;
  const std::vector<TableEntry> table = forward_table(m, v, G);
  if (params.vocab == VocabMode::None) {
    Schedule s = linear::empty_schedule(kName, p, m, v, VocabMode::None);
    s.ranks = transformer_order(table, p, m, v, G, 0);
    return linear::validated(std::move(s), params);
  }
  return linear::validated(with_vocabulary(params, table, v, G).schedule, params);
}

Schedule transformer_ops_of_interleaved_1f1b(const GeneratorParams& params) {
  const auto [v, G] = checked_chunks_and_group(params);
  const int p = params.stages;
  const int m = params.microbatches;
  if (params.vocab == VocabMode::None)
    linear::fail(kName, {"plan.vocab"},
                 "the transformer order alone is asked of a vocabulary mode");
  const std::vector<TableEntry> table = forward_table(m, v, G);
  // with_vocabulary's warm-up, the shortest the passes fit around: whether they fit does not
  // depend on the costs (linear::vocabulary_passes_fit), so no planning in time finds it. Where
  // none fits, with_vocabulary plans them and fails naming why.
  Schedule s = linear::empty_schedule(kName, p, m, v, VocabMode::None);
  const auto [first_extra, last_extra] = warmup_extras(params.vocab, v);
  for (int extra = first_extra; extra <= last_extra; ++extra) {
    s.ranks = transformer_order(table, p, m, v, G, extra);
    if (linear::vocabulary_passes_fit(params, v, s.ranks, if_lookahead(s.ranks.front(), m)))
      return s;
  }
  s.ranks = transformer_order(table, p, m, v, G, with_vocabulary(params, table, v, G).extra);
  return s;
}

}  // namespace pipetune::schedule
