// The V-Half / V-Min building block (schedules.md a.8): slot offsets, W placement into free
// slots, and the memory-preserving "squeeze". Costs do not enter here: the block fixes each
// stage's op order, and the simulator (or the executor) times that order with real costs.
#include "engine/schedule/generators/v_building_block.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
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

int last_slot(const Lists& lists, int types) {
  int bound = 0;
  for (int t = 0; t < types; ++t)
    if (!lists[at(t)].empty()) bound = std::max(bound, lists[at(t)].back());
  return bound;
}

// The op in each slot of one stage, packed as index * 8 + type (-1 = free), where index is its
// place in its list. Walking slots in order replaces sorting ops by slot.
struct SlotMap {
  std::vector<int> code;

  static constexpr int kFree = -1;
  static int pack(int type, int index) { return index * 8 + type; }
  static int type_of(int code) { return code < 0 ? -1 : code & 7; }
  static int index_of(int code) { return code >> 3; }

  int size() const { return static_cast<int>(code.size()); }
  int type(int slot) const { return type_of(code[at(slot)]); }

  // Two ops in one slot would be a bug of this file.
  void fill(const Lists& lists, int types) {
    code.assign(at(last_slot(lists, types) + 1), kFree);
    for (int t = 0; t < types; ++t) {
      const auto& list = lists[at(t)];
      for (int k = 0; k < static_cast<int>(list.size()); ++k) {
        int& c = code[at(list[at(k)])];
        if (c != kFree) throw std::logic_error("v-block: two ops share one slot");
        c = pack(t, k);
      }
    }
  }
};

// Puts every W into the first free slot after its B (reference put_w). With `split` the W of
// chunk-1 and chunk-0 backwards go to separate lists and chunk 1's goes first when both wait.
// `map` holds the stage's compute ops on entry and every op on return.
void put_w(Lists& lists, bool split, SlotMap& map) {
  const int bound = last_slot(lists, kComputeTypes);
  map.code.resize(at(bound + 1));  // moves may have left free slots after the last op
  lists.resize(kComputeTypes);
  lists.resize(split ? 6 : 5);
  std::array<int, 2> pending{0, 0};
  auto place = [&](int w, int slot) {
    auto& list = lists[at(kW + w)];
    const int code = SlotMap::pack(kW + w, static_cast<int>(list.size()));
    if (slot < map.size())
      map.code[at(slot)] = code;
    else
      map.code.push_back(code);
    list.push_back(slot);
    --pending[at(w)];
  };
  for (int i = 0; i <= bound; ++i) {
    const int t = map.type(i);
    if (t >= 0) {
      if (t == kB1 || t == kB0) ++pending[split ? at(t - kB1) : 0];
      continue;
    }
    for (int w = 0; w < 2; ++w) {
      if (pending[at(w)] > 0) {
        place(w, i);
        break;
      }
    }
  }
  int slot = bound;
  for (int w = 0; w < 2; ++w)
    while (pending[at(w)] > 0) place(w, ++slot);
}

// Walk positions: key = slot * stages + stage orders ops by (slot, stage), and within one
// stage's slot there is one op, so this is the (slot, stage, type, index) order the reference
// walks ops in.
using Key = std::int64_t;

Key walk_end(const std::vector<const SlotMap*>& maps) {
  int horizon = 0;
  for (const SlotMap* map : maps) horizon = std::max(horizon, map->size());
  return static_cast<Key>(horizon) * static_cast<Key>(maps.size());
}

// Calls visit(slot, stage, type, index) for every op with a key in [begin, end), in key order,
// reading the stages' slot maps side by side. The walk reads them live, so `visit` may move the
// op it is given to an earlier slot of its stage (behind the walk), but not resize a map.
template <class Visit>
void walk_in_time_order(const std::vector<const SlotMap*>& maps, Key begin, Key end,
                        Visit&& visit) {
  const int stages = static_cast<int>(maps.size());
  for (Key key = begin; key < end;) {
    const int slot = static_cast<int>(key / stages);
    for (int s = static_cast<int>(key % stages); s < stages && key < end; ++s, ++key) {
      const SlotMap& map = *maps[at(s)];
      if (slot >= map.size()) continue;
      const int code = map.code[at(slot)];
      if (code != SlotMap::kFree) visit(slot, s, SlotMap::type_of(code), SlotMap::index_of(code));
    }
  }
}

// Re-times the slot order with unit costs and no communication (reference
// eager_execution_time with costs 1): idle slots that no dependency needs disappear, and each
// stage keeps its order. `maps` are the slot maps of `st`. Returns start times in the same shape.
//
// An op starts once its stage is free and its cross-stage input (the neighbour stage's op of the
// same type and micro-batch) has ended. Its same-stage dependencies (the previous op of its list,
// the previous op of the block) sit in earlier slots of its stage, so they have ended by the time
// the stage is free: checking their slots once replaces looking them up for every op.
std::vector<Lists> eager_unit_times(const std::vector<Lists>& st, int types,
                                    const std::vector<const SlotMap*>& maps) {
  constexpr int kUntimed = -2;  // start -1 (end 0) stands for "no input"
  const int p = static_cast<int>(st.size());
  std::size_t longest = 0;
  for (const Lists& lists : st)
    for (int t = 0; t < types; ++t) longest = std::max(longest, lists[at(t)].size());
  const std::vector<int> no_input(longest, -1);
  std::vector<Lists> start(at(p), Lists(at(types)));
  std::vector<int*> own(at(p * types));
  std::vector<const int*> input(at(p * types), no_input.data());
  for (int s = 0; s < p; ++s)
    for (int t = 0; t < types; ++t) {
      start[at(s)][at(t)].assign(st[at(s)][at(t)].size(), kUntimed);
      own[at(s * types + t)] = start[at(s)][at(t)].data();
    }
  for (int s = 0; s < p; ++s)
    for (int t = 0; t < types; ++t) {
      const auto& list = st[at(s)][at(t)];
      for (int k = 0; k < static_cast<int>(list.size()); ++k)
        if ((k > 0 && list[at(k - 1)] >= list[at(k)]) ||
            (t > 0 && t < kComputeTypes && st[at(s)][at(t - 1)][at(k)] >= list[at(k)]))
          throw std::logic_error("v-block: an op is timed before its dependency");
      int from = -1;
      if ((t == kF0 || t == kB1) && s > 0) from = s - 1;
      if ((t == kF1 || t == kB0) && s + 1 < p) from = s + 1;
      if (from < 0) continue;
      if (st[at(from)][at(t)].size() < list.size())
        throw std::logic_error("v-block: an op without its input");
      input[at(s * types + t)] = start[at(from)][at(t)].data();
    }
  std::vector<int> stage_free(at(p), 0);
  walk_in_time_order(maps, 0, walk_end(maps), [&](int, int s, int t, int k) {
    const int in = input[at(s * types + t)][at(k)];
    if (in == kUntimed) throw std::logic_error("v-block: an op is timed before its dependency");
    const int begin = std::max(stage_free[at(s)], in + 1);
    own[at(s * types + t)][at(k)] = begin;
    stage_free[at(s)] = begin + 1;
  });
  return start;
}

// Memory profile of one stage, slot by slot (reference mem_of_stage), kept up to date while the
// squeeze moves ops, so that trying a slot costs the slots the move affects rather than a
// rescan of the whole stage. Memory is counted in chunk units; without explicit W lists a
// pending W is assumed to run in every free slot, which `pending` tracks.
struct Profile {
  bool has_w = false;
  SlotMap map;
  std::vector<int> cur;      // memory after the slot
  std::vector<int> pending;  // backwards whose W has not run yet, after the slot (implicit W)

  int size() const { return map.size(); }

  // One slot of the reference's memory walk.
  void step(int t, int& mem, int& pend) const {
    if (t >= 0) {
      mem += kMemory[at(t)];
      if (t == kB1 || t == kB0) ++pend;
    } else if (!has_w && pend > 0) {
      mem += kMemory[kW];
      --pend;
    }
  }

  void build() {
    cur.assign(at(size()), 0);
    if (!has_w) pending.assign(at(size()), 0);
    int mem = 0, pend = 0;
    for (int s = 0; s < size(); ++s) {
      step(map.type(s), mem, pend);
      cur[at(s)] = mem;
      if (!has_w) pending[at(s)] = pend;
    }
  }

  // Highest memory over all slots (at least 0, as the walk starts there). Slots past the last
  // op are free and can only lower the memory, so they do not change the peak.
  int peak() const {
    int peak = 0;
    for (int m : cur) peak = std::max(peak, m);
    return peak;
  }

  // Whether the stage stays within `limit` with the op of type t moved from slot `from` to the
  // free slot `to` < from. Before `to` nothing changes; once past `from` the occupancy is the
  // old one again, so the walk stops as soon as its state matches the stored one. Every stored
  // value is within `limit` (the squeeze only keeps moves that are).
  bool fits(int t, int to, int from, int limit) const {
    if (has_w) return true;  // see squeeze: with explicit W the caller has ruled it out
    int mem = to > 0 ? cur[at(to - 1)] : 0;
    int pend = to > 0 ? pending[at(to - 1)] : 0;
    for (int s = to; s < size(); ++s) {
      step(s == to ? t : s == from ? -1 : map.type(s), mem, pend);
      if (mem > limit) return false;
      if (s >= from && mem == cur[at(s)] && pend == pending[at(s)]) return true;
    }
    return true;  // past the last slot only free slots follow: the memory cannot rise
  }

  void move(int to, int from) {
    const int t = map.type(from);
    map.code[at(to)] = map.code[at(from)];
    map.code[at(from)] = SlotMap::kFree;
    if (has_w) {
      // Explicit memory is a plain prefix sum: only the slots the op passes change.
      for (int s = to; s < from; ++s) cur[at(s)] += kMemory[at(t)];
      return;
    }
    int mem = to > 0 ? cur[at(to - 1)] : 0;
    int pend = to > 0 ? pending[at(to - 1)] : 0;
    for (int s = to; s < size(); ++s) {
      step(map.type(s), mem, pend);
      if (s >= from && mem == cur[at(s)] && pend == pending[at(s)]) break;
      cur[at(s)] = mem;
      pending[at(s)] = pend;
    }
  }
};

// The (k+1)-th smallest slot of two increasing lists (the stage's chunk-1 and chunk-0
// backwards), by binary search on how many come from the first: O(log m) where copying and
// partitioning both lists cost O(m) for every W.
int kth_smallest(const std::vector<int>& a, const std::vector<int>& b, int k) {
  const int na = static_cast<int>(a.size());
  const int nb = static_cast<int>(b.size());
  int lo = std::max(0, k + 1 - nb);
  int hi = std::min(k + 1, na);
  while (lo < hi) {
    const int i = lo + (hi - lo) / 2;
    if (a[at(i)] < b[at(k - i)])
      lo = i + 1;
    else
      hi = i;
  }
  const int j = k + 1 - lo;
  return std::max(lo > 0 ? a[at(lo - 1)] : -1, j > 0 ? b[at(j - 1)] : -1);
}

// The squeeze (reference `reorder`): walks the ops in slot order and moves each into the
// earliest free slot after its dependencies, as long as the peak memory of its stage stays
// within the schedule's current peak. The steady phase (from the first chunk-0 backward on
// stage 0 up to the last micro-batch's first forward) stays as the block placed it; the warm-up
// is squeezed only in the pass with explicit W. The memory bound is the peak over all stages, as
// in the reference code (a.8's text says "the stage's peak"). Takes the compute ops, returns
// unit-cost start times with one W list.
std::vector<Lists> squeeze(std::vector<Lists> st, bool consider_w, int m) {
  const int p = static_cast<int>(st.size());
  // Ops only move to earlier slots, so the profiles never need to grow.
  std::vector<Profile> profiles(at(p));
  std::vector<const SlotMap*> maps(at(p));
  int current_mem = 0;
  for (int s = 0; s < p; ++s) {
    Profile& profile = profiles[at(s)];
    profile.has_w = consider_w;
    profile.map.fill(st[at(s)], kComputeTypes);
    if (consider_w) put_w(st[at(s)], false, profile.map);
    profile.build();
    current_mem = std::max(current_mem, profile.peak());
    maps[at(s)] = &profile.map;
  }

  // The walk's phases: the steady phase starts at stage 0's first chunk-0 backward and ends
  // with the first last-micro-batch chunk-0 forward after it, both skipped. Ops only move when
  // walked, so both are found at the slots the pass starts with, and the walk jumps over the
  // steady phase (most of the ops) instead of stepping through it.
  const Key steady_begin = static_cast<Key>(st[0][kB0][0]) * p;
  Key steady_end = std::numeric_limits<Key>::max();
  for (int s = 0; s < p; ++s) {
    const Key key = static_cast<Key>(st[at(s)][kF0][at(m - 1)]) * p + s;
    if (key > steady_begin) steady_end = std::min(steady_end, key + 1);
  }
  auto visit = [&](int original, int stage, int type, int mb) {
    auto& lists = st[at(stage)];
    Profile& profile = profiles[at(stage)];
    int deps = -1;
    if ((type == kF0 || type == kB1) && stage > 0)
      deps = std::max(deps, st[at(stage - 1)][at(type)][at(mb)]);
    if ((type == kF1 || type == kB0) && stage + 1 < p)
      deps = std::max(deps, st[at(stage + 1)][at(type)][at(mb)]);
    if (type > 0 && type < kComputeTypes) deps = std::max(deps, lists[at(type - 1)][at(mb)]);
    // The k-th W waits for the k-th backward of the stage in slot order.
    if (type == kW) deps = std::max(deps, kth_smallest(lists[kB1], lists[kB0], mb));
    if (mb > 0) deps = std::max(deps, lists[at(type)][at(mb - 1)]);
    deps += 1;
    if (deps > original) throw std::logic_error("v-block: squeeze met an op before its dependency");
    // Slots in [deps, original) hold only ops already walked (the rest lie later), so the
    // profile's occupancy there is the reference's `occupied`. A forward raises the memory by at
    // least one in every slot it passes (implicit W can only run later), so a slot already at
    // the bound rules out every candidate up to it. With explicit W that is the whole test: the
    // forward adds exactly one there, and a backward (0) or a W (-1) never raises the memory.
    int first = deps;
    if (kMemory[at(type)] > 0)
      for (int s = original - 1; s >= deps; --s)
        if (profile.cur[at(s)] >= current_mem) {
          first = s + 1;
          break;
        }
    for (int candidate = first; candidate < original; ++candidate) {
      if (profile.map.code[at(candidate)] != SlotMap::kFree) continue;
      if (!profile.fits(type, candidate, original, current_mem)) continue;
      profile.move(candidate, original);
      lists[at(type)][at(mb)] = candidate;
      break;
    }
  };
  if (consider_w) walk_in_time_order(maps, 0, steady_begin, visit);
  walk_in_time_order(maps, steady_end, walk_end(maps), visit);
  if (!consider_w)
    for (int s = 0; s < p; ++s) put_w(st[at(s)], false, profiles[at(s)].map);
  return eager_unit_times(st, 5, maps);
}

__attribute__((always_inline)) inline Op op_of_type(int type, int mb) {
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

namespace {

// Every stage's slot map at the end: compute ops and both W lists (v_block_slots).
std::vector<SlotMap> final_maps(VKind kind, int p, int m, int extra_interval, bool squeeze_ops) {
  const std::vector<VBlockRow> offsets = v_block_offsets(kind, p, extra_interval);
  std::vector<Lists> st(at(p), Lists(kComputeTypes));
  for (int s = 0; s < p; ++s)
    for (int t = 0; t < kComputeTypes; ++t) {
      auto& list = st[at(s)][at(t)];
      list.reserve(at(m));
      for (int k = 0; k < m; ++k) list.push_back(offsets[at(s)][at(t)] + kVBlockPeriod * k);
    }

  if (squeeze_ops) {
    // Once with W placed explicitly (squeezes warm-up and cool-down), once with W implicit in
    // the free slots (cool-down only), as the reference does.
    st = squeeze(std::move(st), true, m);
    for (auto& lists : st) lists.resize(kComputeTypes);
    st = squeeze(std::move(st), false, m);
    for (auto& lists : st) lists.resize(kComputeTypes);
  }

  std::vector<SlotMap> maps(at(p));
  for (int s = 0; s < p; ++s) {
    maps[at(s)].fill(st[at(s)], kComputeTypes);
    put_w(st[at(s)], true, maps[at(s)]);
  }
  return maps;
}

}  // namespace

std::vector<std::vector<SlottedOp>> v_block_slots(VKind kind, int p, int m, int extra_interval,
                                                  bool squeeze_ops) {
  const std::vector<SlotMap> maps = final_maps(kind, p, m, extra_interval, squeeze_ops);
  std::vector<std::vector<SlottedOp>> out(maps.size());
  for (std::size_t s = 0; s < maps.size(); ++s) {
    out[s].reserve(at(6 * m));
    for (int slot = 0; slot < maps[s].size(); ++slot) {
      const int code = maps[s].code[at(slot)];
      if (code != SlotMap::kFree)
        out[s].push_back({op_of_type(SlotMap::type_of(code), SlotMap::index_of(code)), slot});
    }
  }
  return out;
}

std::vector<std::vector<Op>> v_block_order(VKind kind, int p, int m, int extra_interval,
                                           bool squeeze_ops) {
  const std::vector<SlotMap> maps = final_maps(kind, p, m, extra_interval, squeeze_ops);
  std::vector<std::vector<Op>> out(maps.size());
  for (std::size_t s = 0; s < maps.size(); ++s) {
    out[s].reserve(at(6 * m));
    for (int code : maps[s].code)
      if (code != SlotMap::kFree)
        out[s].push_back(op_of_type(SlotMap::type_of(code), SlotMap::index_of(code)));
  }
  return out;
}

void check_v_params(const GeneratorParams& params, std::string_view name, bool vocab_ok) {
  const std::string n(name);
  if (params.stages < 1)
    throw ScheduleError({"plan.pp", "plan.schedule"},
                        n + ": stages must be positive, got " + std::to_string(params.stages));
  if (params.microbatches < 1)
    throw ScheduleError(
        {"plan.microbatches", "plan.schedule"},
        n + ": micro-batches must be positive, got " + std::to_string(params.microbatches));
  if (params.chunks != 0 && params.chunks != 2)
    throw ScheduleError(
        {"plan.chunks", "plan.schedule"},
        n + " needs chunks=2 (V placement), got chunks=" + std::to_string(params.chunks));
  if (params.vocab != VocabMode::None && !vocab_ok)
    throw ScheduleError(
        {"plan.vocab", "plan.schedule"},
        n + " does not support vocabulary mode " + std::string(vocab_mode_name(params.vocab)));
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
