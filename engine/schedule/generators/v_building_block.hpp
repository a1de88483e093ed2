// The V-shaped "building block" schedules of "Pipeline Parallelism with Controllable Memory"
// (arXiv 2405.15362; zero-bubble repo zbv_greedy.py, schedules.md a.8): V-Half and V-Min.
//
// Time is cut into unit slots. One micro-batch adds six slots per stage: a forward and a backward
// on each of the two chunks, and two weight-gradient passes. Stage i runs micro-batch k's op at
// slot offset + 6k, with offsets chosen so that every dependency lands on an earlier slot and the
// number of micro-batches in flight (the memory) is a half (V-Half) or a third (V-Min) of 1F1B's.
// W passes go into the first free slots, then a "squeeze" moves ops into earlier free slots where
// that does not raise the peak memory, and the slots give each stage's op order.
#pragma once

#include <cstddef>

#include <array>
#include <string_view>
#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::schedule {

// A vector index from the generators' int counters (ranks, slots), checked by their callers.
inline std::size_t at(int i) {
  return static_cast<std::size_t>(i);
}

enum class VKind { Half, Min };

// Slots of micro-batch 0 on one stage, in the block's op order: F of chunk 0, F of chunk 1,
// B of chunk 1, B of chunk 0 (the forward runs down chunk 0 and back up chunk 1, the backward the
// other way round).
using VBlockRow = std::array<int, 4>;
inline constexpr int kVBlockPeriod = 6;  // slots one micro-batch adds per stage

// Offsets per stage (index = stage). extra_interval stretches the gap between the forward and
// the backward half of the block (vocabulary parallelism makes room for its S/T passes with it).
//  V-Half: interval = 3 if p is even else 0; F0 = 2i, F1 = 3p-i-2, B1 = 3p+interval+2i-1,
//          B0 = 6p+interval-i-2.
//  V-Min:  interval = 2 if p mod 3 == 0 else 0; F0 = i, F1 = 2p-i-1, B1 = 2p+interval+i,
//          B0 = 4p+interval-i-1.
std::vector<VBlockRow> v_block_offsets(VKind kind, int p, int extra_interval = 0);

// One op with the slot the building block gives it.
struct SlottedOp {
  Op op;
  int slot = 0;
};

// Every stage's ops (F, B and W of both chunks) with their slots, in slot order: the block
// repeated m times, W in the first free slots (the chunk-1 W first when both wait), and, when
// `squeeze` is set, the two squeeze passes of the reference (with and without W).
std::vector<std::vector<SlottedOp>> v_block_slots(VKind kind, int p, int m, int extra_interval,
                                                  bool squeeze);
// The same ops without their slots: each stage's op order, what the generators hand on.
std::vector<std::vector<Op>> v_block_order(VKind kind, int p, int m, int extra_interval,
                                           bool squeeze);

// Checks what every V-placement generator shares: positive sizes, chunks 0 or 2, and no
// vocabulary mode unless `vocab_ok`, a cost table covering every stage. Throws ScheduleError
// naming the rule broken.
void check_v_params(const GeneratorParams& params, std::string_view name, bool vocab_ok);

// An empty Schedule with the V placement: name, sizes, chunks 2, one op list per rank.
Schedule make_v_schedule(const GeneratorParams& params, std::string_view name);

// Vocabulary parallelism on V-Half (branch v-half-vocab, schedules.md b.5): adds S, T, IF and IB
// on every rank of a V-Half schedule built with the stretched block, at the times b.5 gives,
// computed by list-scheduling the transformer ops with `costs`. Sets s.vocab = vocab.
void add_v_half_vocab_passes(Schedule& s, VocabMode vocab, const CostTable& costs);

}  // namespace pipetune::schedule
