// The V-Half / V-Min building block (schedules.md a.8): slot offsets, W placement into free
// slots, and the memory-preserving "squeeze". Costs do not enter here: the block fixes each
// stage's op order, and the simulator (or the executor) times that order with real costs.
#include "engine/schedule/generators/v_building_block.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/errors.hpp"

namespace pipetune::schedule {

namespace {

// Op types of the block, in its order; the W types follow the four compute types. With one W
// list (the squeeze passes) it is type 4; split per chunk, type 4 is chunk 1's and 5 chunk 0's.
enum Type : int { kF0 = 0, kF1 = 1, kB1 = 2, kB0 = 3, kW = 4 };
constexpr int kComputeTypes = 4;
// Memory model inside the block, in chunk units: a forward holds its activations, the backward
// (input gradient) keeps them for the weight gradient, and W frees them.
constexpr std::array<int, 5> kMemory = {1, 1, 0, 0, -1};

// lists[t][k] = slot of the k-th op of type t on one stage (micro-batch k for F and B).
using Lists = std::vector<std::vector<int>>;

std::size_t at(int i) {
  return static_cast<std::size_t>(i);
}

int last_slot(const Lists& lists, int types) {
  int bound = 0;
  for (int t = 0; t < types; ++t)
    if (!lists[at(t)].empty()) bound = std::max(bound, lists[at(t)].back());
  return bound;
}

// Type of the op in each slot (-1 = free). Two ops in one slot would be a bug of this file.
void fill_occupancy(const Lists& lists, int types, int bound, std::vector<int>& slot_type) {
  slot_type.assign(at(bound + 1), -1);
  for (int t = 0; t < types; ++t) {
    for (int s : lists[at(t)]) {
      if (slot_type[at(s)] >= 0) throw std::logic_error("v-block: two ops share one slot");
      slot_type[at(s)] = t;
    }
  }
}

// Puts every W into the first free slot after its B (reference put_w). With `split` the W of
// chunk-1 and chunk-0 backwards go to separate lists and chunk 1's goes first when both wait.
Lists put_w(Lists lists, bool split) {
  const int bound = last_slot(lists, kComputeTypes);
  std::vector<int> slot_type;
  fill_occupancy(lists, kComputeTypes, bound, slot_type);
  lists.resize(kComputeTypes);
  lists.resize(split ? 6 : 5);
  std::array<int, 2> pending{0, 0};
  for (int i = 0; i <= bound; ++i) {
    const int t = slot_type[at(i)];
    if (t >= 0) {
      if (t == kB1 || t == kB0) ++pending[split ? at(t - kB1) : 0];
      continue;
    }
    for (int w = 0; w < 2; ++w) {
      if (pending[at(w)] > 0) {
        lists[at(kW + w)].push_back(i);
        --pending[at(w)];
        break;
      }
    }
  }
  int slot = bound;
  for (int w = 0; w < 2; ++w)
    for (; pending[at(w)] > 0; --pending[at(w)]) lists[at(kW + w)].push_back(++slot);
  return lists;
}

// Peak memory of one stage in chunk units (reference mem_of_stage). Without explicit W lists,
// a pending W is assumed to run in every free slot.
int peak_memory(const Lists& lists, bool has_w, std::vector<int>& scratch) {
  const int types = has_w ? 5 : kComputeTypes;
  const int bound = last_slot(lists, types);
  fill_occupancy(lists, types, bound, scratch);
  int cur = 0, peak = 0, pending_w = 0;
  for (int i = 0; i <= bound; ++i) {
    const int t = scratch[at(i)];
    if (t >= 0) {
      cur += kMemory[at(t)];
      if (t == kB1 || t == kB0) ++pending_w;
    } else if (!has_w && pending_w > 0) {
      cur += kMemory[kW];
      --pending_w;
    }
    peak = std::max(peak, cur);
  }
  return peak;
}

struct Item {
  int time, stage, type, mb;
  bool operator<(const Item& o) const {
    if (time != o.time) return time < o.time;
    if (stage != o.stage) return stage < o.stage;
    if (type != o.type) return type < o.type;
    return mb < o.mb;
  }
};

std::vector<Item> items_in_time_order(const std::vector<Lists>& st, int types) {
  std::vector<Item> items;
  for (int s = 0; s < static_cast<int>(st.size()); ++s)
    for (int t = 0; t < types; ++t)
      for (int k = 0; k < static_cast<int>(st[at(s)][at(t)].size()); ++k)
        items.push_back({st[at(s)][at(t)][at(k)], s, t, k});
  std::sort(items.begin(), items.end());
  return items;
}

// Re-times the slot order with unit costs and no communication (reference
// eager_execution_time with costs 1): idle slots that no dependency needs disappear, and each
// stage keeps its order. Returns start times in the same shape.
std::vector<Lists> eager_unit_times(const std::vector<Lists>& st, int types) {
  const int p = static_cast<int>(st.size());
  std::vector<Lists> end(st.size());
  for (int s = 0; s < p; ++s) {
    end[at(s)].resize(at(types));
    for (int t = 0; t < types; ++t) end[at(s)][at(t)].assign(st[at(s)][at(t)].size(), -1);
  }
  std::vector<int> stage_end(at(p), 0);
  auto need = [](int e) {
    if (e < 0) throw std::logic_error("v-block: an op is timed before its dependency");
    return e;
  };
  for (const Item& it : items_in_time_order(st, types)) {
    auto& e = end[at(it.stage)];
    int ready = stage_end[at(it.stage)];
    if ((it.type == kF0 || it.type == kB1) && it.stage > 0)
      ready = std::max(ready, need(end[at(it.stage - 1)][at(it.type)][at(it.mb)]));
    if ((it.type == kF1 || it.type == kB0) && it.stage + 1 < p)
      ready = std::max(ready, need(end[at(it.stage + 1)][at(it.type)][at(it.mb)]));
    if (it.type > 0 && it.type < kComputeTypes)
      ready = std::max(ready, need(e[at(it.type - 1)][at(it.mb)]));
    if (it.mb > 0) ready = std::max(ready, need(e[at(it.type)][at(it.mb - 1)]));
    e[at(it.type)][at(it.mb)] = ready + 1;
    stage_end[at(it.stage)] = ready + 1;
  }
  for (auto& stage : end)
    for (auto& list : stage)
      for (int& t : list) t -= 1;
  return end;
}

// The squeeze (reference `reorder`): walks the ops in slot order and moves each into the
// earliest free slot after its dependencies, as long as the peak memory of its stage stays
// within the schedule's current peak. The steady phase (from the first chunk-0 backward on
// stage 0 up to the last micro-batch's first forward) stays as the block placed it; the warm-up
// is squeezed only in the pass with explicit W. The memory bound is the peak over all stages, as
// in the reference code (a.8's text says "the stage's peak"). Returns unit-cost start times with
// one W list.
std::vector<Lists> squeeze(std::vector<Lists> st, bool consider_w, int m) {
  const int p = static_cast<int>(st.size());
  int types = kComputeTypes;
  if (consider_w) {
    for (auto& lists : st) lists = put_w(std::move(lists), false);
    types = 5;
  }
  std::vector<int> scratch;
  int current_mem = 0;
  for (const auto& lists : st)
    current_mem = std::max(current_mem, peak_memory(lists, consider_w, scratch));

  std::vector<std::vector<char>> occupied(at(p));
  for (int s = 0; s < p; ++s) occupied[at(s)].assign(at(st[at(s)][at(types - 1)].back() + 1), 0);

  int phase = 0;
  std::vector<int> b_times;
  for (const Item& it : items_in_time_order(st, types)) {
    auto& lists = st[at(it.stage)];
    auto& occ = occupied[at(it.stage)];
    const int original = it.time;
    if (it.type == kB0 && it.stage == 0 && phase == 0) phase = 1;
    if (phase == 1) {
      if (it.type == kF0 && it.mb == m - 1) phase = 2;
      occ[at(original)] = 1;
      continue;
    }
    if (phase == 0 && !consider_w) {
      occ[at(original)] = 1;
      continue;
    }
    int deps = -1;
    if ((it.type == kF0 || it.type == kB1) && it.stage > 0)
      deps = std::max(deps, st[at(it.stage - 1)][at(it.type)][at(it.mb)]);
    if ((it.type == kF1 || it.type == kB0) && it.stage + 1 < p)
      deps = std::max(deps, st[at(it.stage + 1)][at(it.type)][at(it.mb)]);
    if (it.type > 0 && it.type < kComputeTypes)
      deps = std::max(deps, lists[at(it.type - 1)][at(it.mb)]);
    if (it.type == kW) {
      // The k-th W waits for the k-th backward of the stage in slot order.
      b_times = lists[kB1];
      b_times.insert(b_times.end(), lists[kB0].begin(), lists[kB0].end());
      std::nth_element(b_times.begin(), b_times.begin() + it.mb, b_times.end());
      deps = std::max(deps, b_times[at(it.mb)]);
    }
    if (it.mb > 0) deps = std::max(deps, lists[at(it.type)][at(it.mb - 1)]);
    deps += 1;
    if (deps > original) throw std::logic_error("v-block: squeeze met an op before its dependency");
    int& slot = lists[at(it.type)][at(it.mb)];
    bool moved = false;
    for (int candidate = deps; candidate < original && !moved; ++candidate) {
      if (occ[at(candidate)]) continue;
      slot = candidate;
      moved = peak_memory(lists, consider_w, scratch) <= current_mem;
    }
    if (!moved) slot = original;
    occ[at(slot)] = 1;
  }
  if (!consider_w)
    for (auto& lists : st) lists = put_w(std::move(lists), false);
  return eager_unit_times(st, 5);
}

Op op_of_type(int type, int mb) {
  switch (type) {
    case kF0:
      return {OpKind::F, 0, mb};
    case kF1:
      return {OpKind::F, 1, mb};
    case kB1:
      return {OpKind::B, 1, mb};
    case kB0:
      return {OpKind::B, 0, mb};
    case kW:
      return {OpKind::W, 1, mb};
    default:
      return {OpKind::W, 0, mb};
  }
}

}  // namespace

std::vector<VBlockRow> v_block_offsets(VKind kind, int p, int extra_interval) {
  std::vector<VBlockRow> rows;
  rows.reserve(at(p));
  if (kind == VKind::Half) {
    const int interval = (p % 2 == 0 ? 3 : 0) + extra_interval;
    for (int i = 0; i < p; ++i)
      rows.push_back(
          {2 * i, 3 * p - i - 2, 3 * p + interval + 2 * i - 1, 6 * p + interval - i - 2});
  } else {
    const int interval = (p % 3 == 0 ? 2 : 0) + extra_interval;
    for (int i = 0; i < p; ++i)
      rows.push_back({i, 2 * p - i - 1, 2 * p + interval + i, 4 * p + interval - i - 1});
  }
  return rows;
}

std::vector<std::vector<SlottedOp>> v_block_slots(VKind kind, int p, int m, int extra_interval,
                                                  bool squeeze_ops) {
  const std::vector<VBlockRow> offsets = v_block_offsets(kind, p, extra_interval);
  std::vector<Lists> st(at(p), Lists(kComputeTypes));
  for (int s = 0; s < p; ++s)
    for (int t = 0; t < kComputeTypes; ++t)
      for (int k = 0; k < m; ++k)
        st[at(s)][at(t)].push_back(offsets[at(s)][at(t)] + kVBlockPeriod * k);

  if (squeeze_ops) {
    // Once with W placed explicitly (squeezes warm-up and cool-down), once with W implicit in
    // the free slots (cool-down only), as the reference does.
    st = squeeze(std::move(st), true, m);
    for (auto& lists : st) lists.resize(kComputeTypes);
    st = squeeze(std::move(st), false, m);
    for (auto& lists : st) lists.resize(kComputeTypes);
  }

  std::vector<std::vector<SlottedOp>> out(at(p));
  for (int s = 0; s < p; ++s) {
    const Lists lists = put_w(std::move(st[at(s)]), true);
    auto& ops = out[at(s)];
    for (int t = 0; t < static_cast<int>(lists.size()); ++t)
      for (int k = 0; k < static_cast<int>(lists[at(t)].size()); ++k)
        ops.push_back({op_of_type(t, k), lists[at(t)][at(k)]});
    std::sort(ops.begin(), ops.end(),
              [](const SlottedOp& a, const SlottedOp& b) { return a.slot < b.slot; });
  }
  return out;
}

void check_v_params(const GeneratorParams& params, std::string_view name, bool vocab_ok) {
  const std::string n(name);
  if (params.stages < 1)
    throw ScheduleError(n + ": stages must be positive, got " + std::to_string(params.stages));
  if (params.microbatches < 1)
    throw ScheduleError(n + ": micro-batches must be positive, got " +
                        std::to_string(params.microbatches));
  if (params.chunks != 0 && params.chunks != 2)
    throw ScheduleError(
        n + " needs chunks=2 (V placement), got chunks=" + std::to_string(params.chunks));
  if (params.vocab != VocabMode::None && !vocab_ok)
    throw ScheduleError(n + " does not support vocabulary mode " +
                        std::string(vocab_mode_name(params.vocab)));
  if (!params.costs.stages.empty() && static_cast<int>(params.costs.stages.size()) != params.stages)
    throw ScheduleError(n + ": cost table has " + std::to_string(params.costs.stages.size()) +
                        " stages, asked for " + std::to_string(params.stages));
}

Schedule make_v_schedule(const GeneratorParams& params, std::string_view name) {
  Schedule s;
  s.name = std::string(name);
  s.stages = params.stages;
  s.microbatches = params.microbatches;
  s.chunks = 2;
  s.placement = Placement::VShape;
  s.vocab = VocabMode::None;
  s.ranks.resize(at(params.stages));
  return s;
}

}  // namespace pipetune::schedule
