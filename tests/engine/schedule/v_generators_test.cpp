// The V-placement generators (v-half, v-min, zb-v, dualpipe-v) against references that do not use
// the generators' code: the slot formulas of schedules.md a.8 worked out by hand, orders produced
// by running the reference algorithms (zero-bubble repo zbv_greedy.py and zbv.py, unit costs) and
// pasted here, DualPipeV's eight steps (a.10) written out by hand, activation counts read straight
// off the op lists, the validator, and the generators' error rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/v_building_block.hpp"
#include "engine/schedule/validator.hpp"
#include "support/schedule_helpers.hpp"

namespace pipetune::schedule {
namespace {

using testing::params;
using testing::where;

const std::vector<std::string> kVGenerators = {"v-half", "v-min", "zb-v", "dualpipe-v"};

// "F0.0 B0.1 ..." (op_label of each op) for one rank.
std::string render(const Schedule& s, int rank) {
  std::string out;
  for (const Op& op : s.ranks[static_cast<std::size_t>(rank)]) {
    if (!out.empty()) out += ' ';
    out += op_label(op);
  }
  return out;
}

// Peak activations of a rank in micro-batches of the rank's layers (two chunks: a chunk forward
// is half a micro-batch), with the simulator's convention: F adds 1/2, BW frees 1/2, B frees
// (1 - wf)/2, W frees wf/2.
double peak_activations(const Schedule& s, int rank, double wf = 1.0) {
  double held = 0.0, peak = 0.0;
  for (const Op& op : s.ranks[static_cast<std::size_t>(rank)]) {
    if (op.kind == OpKind::F) held += 0.5;
    if (op.kind == OpKind::BW) held -= 0.5;
    if (op.kind == OpKind::B) held -= (1.0 - wf) * 0.5;
    if (op.kind == OpKind::W) held -= wf * 0.5;
    peak = std::max(peak, held);
  }
  return peak;
}

double max_peak(const Schedule& s, double wf = 1.0) {
  double peak = 0.0;
  for (int r = 0; r < s.stages; ++r) peak = std::max(peak, peak_activations(s, r, wf));
  return peak;
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "(no error)";
}

int count_kind(const Schedule& s, int rank, OpKind k) {
  const auto& ops = s.ranks[static_cast<std::size_t>(rank)];
  return static_cast<int>(
      std::count_if(ops.begin(), ops.end(), [k](const Op& o) { return o.kind == k; }));
}

TEST(VGenerators, EveryGeneratorValidatesAcrossSizes) {
  for (const std::string& name : kVGenerators)
    for (int p : {2, 3, 4, 6, 8})
      for (int m : {1, 2, p, p + 1, 2 * p, 3 * p + 1, 4 * p}) {
        if (name == "dualpipe-v" && m < 2 * p) continue;
        const GeneratorParams g = params(name, p, m);
        SCOPED_TRACE(where(g));
        const Schedule s = generate(g);
        EXPECT_EQ(s.name, name);
        EXPECT_EQ(s.placement, Placement::VShape);
        EXPECT_EQ(s.chunks, 2);
        EXPECT_NO_THROW(validate(s));
        // Each rank runs every micro-batch through both of its chunks, forward and backward.
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(count_kind(s, r, OpKind::F), 2 * m) << "rank " << r;
          EXPECT_EQ(count_kind(s, r, OpKind::B) + count_kind(s, r, OpKind::BW), 2 * m)
              << "rank " << r;
          EXPECT_EQ(count_kind(s, r, OpKind::W), count_kind(s, r, OpKind::B)) << "rank " << r;
        }
      }
}

TEST(VGenerators, ChunksOtherThanTwoAreRejected) {
  for (const std::string& name : kVGenerators)
    for (int chunks : {1, 3, 4}) {
      GeneratorParams g = params(name, 4, 16);
      g.chunks = chunks;
      const std::string msg = error_of([&] { generate(g); });
      EXPECT_NE(msg.find(name + " needs chunks=2 (V placement)"), std::string::npos)
          << name << " chunks=" << chunks << ": " << msg;
    }
  GeneratorParams g = params("v-half", 4, 8);
  g.chunks = 2;  // explicit 2 is the V placement itself
  EXPECT_NO_THROW(generate(g));
}

TEST(VGenerators, DualPipeVNeedsTwiceAsManyMicroBatchesAsStages) {
  EXPECT_EQ(error_of([] { generate_dualpipe_v(params("dualpipe-v", 4, 3)); }),
            "dualpipe-v: microbatches=3 is fewer than 2*stages=8");
  EXPECT_NE(error_of([] { generate(params("dualpipe-v", 8, 15)); }).find("fewer than 2*stages=16"),
            std::string::npos);
  EXPECT_NO_THROW(generate(params("dualpipe-v", 8, 16)));
}

TEST(VGenerators, UnsupportedVocabularyModesAreRejected) {
  for (const std::string name : {"v-min", "zb-v", "dualpipe-v"})
    for (VocabMode v : {VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
      const GeneratorParams g = params(name, 4, 8, v);
      EXPECT_THROW(generate(g), ScheduleError) << where(g);
      EXPECT_THROW(name == "v-min"  ? generate_v_min(g)
                   : name == "zb-v" ? generate_zb_v(g)
                                    : generate_dualpipe_v(g),
                   ScheduleError)
          << where(g) << " (called directly)";
    }
  EXPECT_THROW(generate_v_half(params("v-half", 4, 8, VocabMode::Interlaced)), ScheduleError);
}

TEST(VGenerators, ZbvMemoryLimitBelowOneF1BIsRejected) {
  GeneratorParams g = params("zb-v", 4, 16);
  g.memory_limit = 3.5;
  const std::string msg = error_of([&] { generate(g); });
  EXPECT_NE(msg.find("zb-v: memory_limit=3.5"), std::string::npos) << msg;
}

// schedules.md a.8, example for p = 4: F0 at 0,2,4,6; F1 at 10,9,8,7; B1 at 14,16,18,20;
// B0 at 25,24,23,22 (stages 0..3).
TEST(VBuildingBlock, VHalfSlotsForFourStages) {
  const std::vector<VBlockRow> expected = {
      {0, 10, 14, 25}, {2, 9, 16, 24}, {4, 8, 18, 23}, {6, 7, 20, 22}};
  EXPECT_EQ(v_block_offsets(VKind::Half, 4), expected);
  // Odd p has no interval: F1 = 3p-i-2, B1 = 3p+2i-1, B0 = 6p-i-2 with p = 3.
  const std::vector<VBlockRow> odd = {{0, 7, 8, 16}, {2, 6, 10, 15}, {4, 5, 12, 14}};
  EXPECT_EQ(v_block_offsets(VKind::Half, 3), odd);
}

TEST(VBuildingBlock, VMinSlotsForFourStages) {
  // By hand from a.8 with p = 4 (interval 0, 4 mod 3 != 0): F0 = i, F1 = 2p-i-1 = 7-i,
  // B1 = 2p+i = 8+i, B0 = 4p-i-1 = 15-i.
  const std::vector<VBlockRow> expected = {
      {0, 7, 8, 15}, {1, 6, 9, 14}, {2, 5, 10, 13}, {3, 4, 11, 12}};
  EXPECT_EQ(v_block_offsets(VKind::Min, 4), expected);
  // p = 3 takes interval 2: B1 = 2p+2+i = 8+i, B0 = 4p+2-i-1 = 13-i.
  const std::vector<VBlockRow> three = {{0, 5, 8, 13}, {1, 4, 9, 12}, {2, 3, 10, 11}};
  EXPECT_EQ(v_block_offsets(VKind::Min, 3), three);
}

// Every op of the block sits in its own slot modulo the period (so the block repeats without
// collisions) and after everything it depends on: F0 after the previous stage's F0, F1 after the
// next stage's F1 (or after F0 on the last stage), B1 after the previous stage's B1 (or after F1
// on stage 0, the loss), B0 after the next stage's B0 (or after B1 on the last stage).
TEST(VBuildingBlock, OffsetsRespectDependenciesAndRepeat) {
  for (VKind kind : {VKind::Half, VKind::Min})
    for (int p : {1, 2, 3, 4, 5, 6, 8, 9, 12})
      for (int extra : {0, 6, 12}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " extra=" + std::to_string(extra) +
                     (kind == VKind::Half ? " v-half" : " v-min"));
        const auto o = v_block_offsets(kind, p, extra);
        for (int i = 0; i < p; ++i) {
          const auto& r = o[static_cast<std::size_t>(i)];
          std::vector<int> mod;
          for (int x : r) mod.push_back(x % kVBlockPeriod);
          std::sort(mod.begin(), mod.end());
          EXPECT_EQ(std::adjacent_find(mod.begin(), mod.end()), mod.end()) << "stage " << i;
          const auto* prev = i > 0 ? &o[static_cast<std::size_t>(i - 1)] : nullptr;
          const auto* next = i + 1 < p ? &o[static_cast<std::size_t>(i + 1)] : nullptr;
          if (prev) {
            EXPECT_LT((*prev)[0], r[0]);
          }
          EXPECT_LT(next ? (*next)[1] : r[0], r[1]);
          EXPECT_LT(prev ? (*prev)[2] : r[1], r[2]);
          EXPECT_LT(next ? (*next)[3] : r[2], r[3]);
        }
      }
}

// Unsqueezed V-Half, p = 4, m = 4, stage 0: F0 at 0,6,12,18, F1 at 10,16,22,28, B1 at
// 14,20,26,32, B0 at 25,31,37,43. Walking the slots by hand, each W takes the first free slot
// after its B, the chunk-1 W first when both wait: chunk-1 W at 15,21,27,33 and chunk-0 W at
// 29,34,38 and 44 (after the last B).
TEST(VBuildingBlock, WeightPassesTakeTheFirstFreeSlots) {
  const auto slots = v_block_slots(VKind::Half, 4, 4, 0, /*squeeze=*/false);
  std::vector<int> w1, w0;
  for (const SlottedOp& so : slots[0]) {
    if (so.op.kind != OpKind::W) continue;
    (so.op.chunk == 1 ? w1 : w0).push_back(so.slot);
  }
  EXPECT_EQ(w1, (std::vector<int>{15, 21, 27, 33}));
  EXPECT_EQ(w0, (std::vector<int>{29, 34, 38, 44}));
}

// Orders printed by the reference algorithms run with unit costs (zbv_greedy.py create_schedule
// for 'half' and 'min'; zbv.py create_schedule with f=b=w=1, c=0, max_mem = 2p): "F3.1" is the
// forward of micro-batch 3 on chunk 1.
const std::vector<std::string> kVHalfP4M8 = {
    "F0.0 F1.0 F2.0 F3.0 F4.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B0.0 B2.1 W2.1 F3.1 W0.0 F5.0 "
    "B1.0 B3.1 W3.1 F4.1 W1.0 F6.0 B2.0 B4.1 W4.1 F5.1 W2.0 F7.0 B3.0 B5.1 W5.1 F6.1 B6.1 W6.1 "
    "B4.0 W3.0 W4.0 F7.1 B7.1 B5.0 W7.1 B6.0 W5.0 W6.0 B7.0 W7.0",
    "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 B0.0 W0.0 F4.0 F3.1 B2.1 W2.1 B1.0 "
    "W1.0 F5.0 F4.1 B3.1 W3.1 B2.0 W2.0 F6.0 F5.1 B4.1 W4.1 B3.0 F7.0 W3.0 F6.1 B5.1 W5.1 B4.0 "
    "B6.1 W6.1 F7.1 W4.0 B5.0 B7.1 B6.0 W7.1 W5.0 W6.0 B7.0 W7.0",
    "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 B0.1 W0.1 F3.0 B1.1 B0.0 W1.1 W0.0 F3.1 F4.0 B1.0 B2.1 W2.1 "
    "F4.1 W1.0 F5.0 B2.0 B3.1 W3.1 F5.1 W2.0 F6.0 B3.0 B4.1 W4.1 F6.1 W3.0 F7.0 B4.0 B5.1 W5.1 "
    "F7.1 B6.1 B5.0 W6.1 B6.0 B7.1 W7.1 W4.0 B7.0 W5.0 W6.0 W7.0",
    "F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 B0.1 W0.1 B0.0 W0.0 F3.0 F3.1 B1.1 W1.1 B1.0 W1.0 F4.0 F4.1 "
    "B2.1 W2.1 B2.0 W2.0 F5.0 F5.1 B3.1 W3.1 B3.0 F6.0 W3.0 F6.1 B4.1 B4.0 W4.1 F7.0 W4.0 F7.1 "
    "B5.1 B5.0 B6.1 B6.0 W5.1 W6.1 B7.1 B7.0 W7.1 W5.0 W6.0 W7.0",
};
const std::vector<std::string> kVMinP4M8 = {
    "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 B0.0 W0.0 F3.0 F2.1 B2.1 B1.0 W2.1 W1.0 F4.0 "
    "F3.1 B3.1 B2.0 W3.1 W2.0 F5.0 F4.1 B4.1 B3.0 W4.1 W3.0 F6.0 F5.1 B5.1 B4.0 W5.1 W4.0 F7.0 "
    "F6.1 B6.1 B5.0 W6.1 W5.0 F7.1 B7.1 B6.0 W7.1 W6.0 B7.0 W7.0",
    "F0.0 F1.0 F0.1 F1.1 B0.1 W0.1 F2.0 B0.0 B1.1 W1.1 W0.0 F2.1 F3.0 B1.0 B2.1 W2.1 W1.0 F3.1 "
    "F4.0 B2.0 B3.1 W3.1 W2.0 F4.1 F5.0 B3.0 B4.1 W4.1 W3.0 F5.1 F6.0 B4.0 B5.1 W5.1 W4.0 F6.1 "
    "F7.0 B5.0 B6.1 W6.1 W5.0 F7.1 B6.0 B7.1 W7.1 W6.0 B7.0 W7.0",
    "F0.0 F1.0 F0.1 F1.1 B0.1 W0.1 F2.0 B0.0 W0.0 B1.1 F2.1 W1.1 B1.0 F3.0 W1.0 B2.1 F3.1 W2.1 "
    "B2.0 F4.0 W2.0 B3.1 F4.1 W3.1 B3.0 F5.0 W3.0 B4.1 F5.1 W4.1 B4.0 F6.0 W4.0 B5.1 F6.1 W5.1 "
    "B5.0 F7.0 W5.0 B6.1 F7.1 W6.1 B6.0 W6.0 B7.1 W7.1 B7.0 W7.0",
    "F0.0 F0.1 F1.0 F1.1 B0.1 B0.0 W0.1 W0.0 F2.0 F2.1 B1.1 B1.0 W1.1 W1.0 F3.0 F3.1 B2.1 B2.0 "
    "W2.1 W2.0 F4.0 F4.1 B3.1 B3.0 W3.1 W3.0 F5.0 F5.1 B4.1 B4.0 W4.1 W4.0 F6.0 F6.1 B5.1 B5.0 "
    "W5.1 W5.0 F7.0 F7.1 B6.1 B6.0 W6.1 W6.0 B7.1 B7.0 W7.1 W7.0",
};
const std::vector<std::string> kZbvP4M8 = {
    "F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 F6.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 B3.1 "
    "W3.1 F7.0 B0.0 W0.0 F4.1 B4.1 W4.1 B1.0 W1.0 F5.1 B5.1 W5.1 B2.0 W2.0 F6.1 B6.1 W6.1 B3.0 "
    "W3.0 F7.1 B7.1 B4.0 W7.1 B5.0 W4.0 B6.0 W5.0 B7.0 W6.0 W7.0",
    "F0.0 F1.0 F2.0 F3.0 F4.0 F0.1 F5.0 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 F3.1 B2.1 W2.1 F6.0 B0.0 "
    "W0.0 F4.1 B3.1 W3.1 F7.0 B1.0 W1.0 F5.1 B4.1 W4.1 B2.0 W2.0 F6.1 B5.1 W5.1 B3.0 W3.0 F7.1 "
    "B6.1 B4.0 B7.1 B5.0 W6.1 B6.0 W4.0 B7.0 W7.1 W5.0 W6.0 W7.0",
    "F0.0 F1.0 F2.0 F0.1 F3.0 F1.1 F4.0 F2.1 B0.1 W0.1 F3.1 B1.1 W1.1 F5.0 B0.0 W0.0 F4.1 B2.1 "
    "W2.1 F6.0 B1.0 W1.0 F5.1 B3.1 W3.1 F7.0 B2.0 W2.0 F6.1 B4.1 W4.1 B3.0 W3.0 F7.1 B5.1 B4.0 "
    "B6.1 B5.0 B7.1 B6.0 W5.1 B7.0 W4.0 W6.1 W5.0 W7.1 W6.0 W7.0",
    "F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 B0.1 W0.1 F4.0 B0.0 W0.0 F4.1 B1.1 W1.1 F5.0 B1.0 "
    "W1.0 F5.1 B2.1 W2.1 F6.0 B2.0 W2.0 F6.1 B3.1 W3.1 F7.0 B3.0 W3.0 F7.1 B4.1 B4.0 B5.1 B5.0 "
    "B6.1 B6.0 B7.1 B7.0 W4.1 W4.0 W5.1 W5.0 W6.1 W6.0 W7.1 W7.0",
};

void expect_order(const Schedule& s, const std::vector<std::string>& golden) {
  ASSERT_EQ(static_cast<std::size_t>(s.stages), golden.size());
  for (int r = 0; r < s.stages; ++r)
    EXPECT_EQ(render(s, r), golden[static_cast<std::size_t>(r)]) << s.name << " rank " << r;
}

TEST(VGenerators, OrdersMatchTheReferenceAlgorithms) {
  expect_order(generate(params("v-half", 4, 8)), kVHalfP4M8);
  expect_order(generate(params("v-min", 4, 8)), kVMinP4M8);
  expect_order(generate(params("zb-v", 4, 8)), kZbvP4M8);
}

// DualPipeV's steps (a.10) written out by hand for R = 2, m = 4. Rank 0: 2 x F0; 1 x [F0, F1];
// 1 x [B1 split, W, F1]; 1 x [F0&B1, F1&B0]; 1 x [B1, F1&B0]; [B1, B0] switching to split at its
// B0 (even rank); 1 x [W, B0 split]; 1 x W. Rank 1: 2 x [F0, F1]; 2 x [F0&B1, F1&B0];
// [B1, B0], [B1, B0] split from the second B1 (odd rank); 2 x W.
TEST(VGenerators, DualPipeVFollowsItsEightSteps) {
  const Schedule s = generate(params("dualpipe-v", 2, 4));
  EXPECT_EQ(render(s, 0),
            "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 F3.0 BW1.1 F2.1 BW0.0 BW2.1 F3.1 BW1.0 BW3.1 "
            "B2.0 W2.0 B3.0 W3.0");
  EXPECT_EQ(render(s, 1),
            "F0.0 F0.1 F1.0 F1.1 F2.0 BW0.1 F2.1 BW0.0 F3.0 BW1.1 F3.1 BW1.0 BW2.1 BW2.0 B3.1 "
            "B3.0 W3.1 W3.0");
}

// Every rank issues 2p chunk forwards before its first backward (steps 1 and 2:
// 2(R-r-1) + 2(r+1) = 2R; the last rank, with no step 3, opens step 4 with the forward of
// "F0 & B1", one more), and holds 2p+1 chunk activations at its peak: DualPipe's "PP+1" with
// PP = 2p stages, i.e. p + 1/2 micro-batches of a rank's layers.
TEST(VGenerators, DualPipeVHoldsPPPlusOneChunks) {
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {2 * p, 3 * p + 1}) {
      const GeneratorParams g = params("dualpipe-v", p, m);
      SCOPED_TRACE(where(g));
      const Schedule s = generate(g);
      for (int r = 0; r < p; ++r) {
        const auto& ops = s.ranks[static_cast<std::size_t>(r)];
        const auto first_b = std::find_if(ops.begin(), ops.end(), [](const Op& o) {
          return o.kind == OpKind::B || o.kind == OpKind::BW;
        });
        EXPECT_EQ(first_b - ops.begin(), r == p - 1 ? 2 * p + 1 : 2 * p) << "rank " << r;
        EXPECT_DOUBLE_EQ(peak_activations(s, r), p + 0.5) << "rank " << r;
      }
    }
}

// 1F1B holds p micro-batches on stage 0 (schedules.md a.2); V-Half about half and V-Min about a
// third of that (a.4), ZB-V the same as 1F1B (its default cap).
TEST(VGenerators, PeakActivationsAgainstOneFOneB) {
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {2 * p, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const double half = max_peak(generate(params("v-half", p, m)));
      const double third = max_peak(generate(params("v-min", p, m)));
      const double zbv = max_peak(generate(params("zb-v", p, m)));
      EXPECT_GE(half, p / 2.0) << "v-half";
      EXPECT_LE(half, std::ceil(p / 2.0) + 1.0) << "v-half";
      if (p % 2 == 0) {
        EXPECT_DOUBLE_EQ(half, p / 2.0 + 1.0) << "v-half, even p";
      }
      EXPECT_GE(third, p / 3.0) << "v-min";
      EXPECT_LE(third, std::ceil(p / 3.0) + 1.0) << "v-min";
      EXPECT_LE(third, half) << "v-min holds no more than v-half";
      EXPECT_DOUBLE_EQ(zbv, p) << "zb-v";
    }
}

TEST(VGenerators, ZbvStaysWithinItsMemoryLimit) {
  for (int p : {2, 4, 6})
    for (double limit : {1.0 * p, p + 1.0, 1.5 * p, 2.0 * p})
      for (double wf : {1.0, 0.5}) {
        GeneratorParams g = params("zb-v", p, 4 * p);
        g.memory_limit = limit;
        g.costs = CostTable::uniform(p, 1, 1, 1);
        g.costs.w_free_fraction = wf;
        SCOPED_TRACE(where(g) + " limit=" + std::to_string(limit) + " wf=" + std::to_string(wf));
        const Schedule s = generate(g);
        EXPECT_LE(max_peak(s, wf), limit + 1e-9);
      }
}

// Per-stage costs differ (a heavy last stage, then pseudo-random ones): the cost-aware generators
// still produce valid schedules, and zb-v keeps its cap.
TEST(VGenerators, UnequalStageCostsStillValidate) {
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {p, 2 * p, 3 * p + 1})
      for (int variant = 0; variant < 4; ++variant) {
        CostTable c = CostTable::uniform(p, 1, 1, 1, 0.5, 0.5, 0.1);
        std::srand(static_cast<unsigned>(variant * 131 + p * 7 + m));
        for (int r = 0; r < p; ++r) {
          auto& st = c.stages[static_cast<std::size_t>(r)];
          if (variant == 0) {
            if (r == p - 1) st[OpKind::F] = 2.0, st[OpKind::B] = 4.0, st[OpKind::W] = 2.0;
          } else {
            st[OpKind::F] = 0.2 + 2.0 * std::rand() / RAND_MAX;
            st[OpKind::B] = 0.2 + 3.0 * std::rand() / RAND_MAX;
            st[OpKind::W] = 0.1 + 2.0 * std::rand() / RAND_MAX;
          }
          st[OpKind::BW] = st[OpKind::B] + st[OpKind::W];
        }
        for (const char* name : {"zb-v", "v-half"}) {
          GeneratorParams g = params(name, p, m);
          g.costs = c;
          SCOPED_TRACE(where(g) + " costs variant " + std::to_string(variant));
          Schedule s;
          ASSERT_NO_THROW(s = generate(g));
          if (std::string(name) == "zb-v") {
            EXPECT_LE(max_peak(s), p + 1e-9);
          }
          for (VocabMode v : {VocabMode::Vocab1, VocabMode::Vocab2}) {
            if (std::string(name) != "v-half") continue;
            g.vocab = v;
            EXPECT_NO_THROW(generate(g)) << vocab_mode_name(v);
          }
        }
      }
}

// V-Half with vocabulary parallelism (b.5): every rank runs S, T, IF and IB once per micro-batch;
// the first p/2+1 IF come before any transformer op; on the rank holding the loss (rank 0) S(i)
// follows the chunk-1 forward of i and precedes the chunk-1 backward of i, and so does T(i) under
// vocab-1, whose C2 that backward waits for.
TEST(VGenerators, VHalfVocabularyPassesSitWhereB5PutsThem) {
  for (VocabMode v : {VocabMode::Vocab1, VocabMode::Vocab2})
    for (int p : {2, 3, 4, 6, 8})
      for (int m : {1, 2, p, 2 * p + 1, 4 * p}) {
        const GeneratorParams g = params("v-half", p, m, v);
        SCOPED_TRACE(where(g));
        const Schedule s = generate(g);
        EXPECT_EQ(s.vocab, v);
        for (int r = 0; r < p; ++r) {
          for (OpKind k : {OpKind::S, OpKind::T, OpKind::IF, OpKind::IB})
            EXPECT_EQ(count_kind(s, r, k), m) << "rank " << r << " " << op_kind_name(k);
          const auto& ops = s.ranks[static_cast<std::size_t>(r)];
          const int warm = std::min(m, p / 2 + 1);
          for (int i = 0; i < warm; ++i)
            EXPECT_EQ(op_label(ops[static_cast<std::size_t>(i)]), "IF" + std::to_string(i))
                << "rank " << r;
        }
        const auto& ops = s.ranks[0];
        auto pos = [&](OpKind k, int chunk, int mb) {
          for (std::size_t i = 0; i < ops.size(); ++i)
            if (ops[i].kind == k && ops[i].microbatch == mb &&
                (is_vocab_op(k) || ops[i].chunk == chunk))
              return static_cast<long>(i);
          return -1L;
        };
        for (int i = 0; i < m; ++i) {
          EXPECT_LT(pos(OpKind::F, 1, i), pos(OpKind::S, 0, i)) << "S" << i;
          EXPECT_LT(pos(OpKind::S, 0, i), pos(OpKind::B, 1, i)) << "S" << i;
          EXPECT_LT(pos(OpKind::S, 0, i), pos(OpKind::T, 0, i)) << "T" << i;
          if (v == VocabMode::Vocab1) {
            EXPECT_LT(pos(OpKind::T, 0, i), pos(OpKind::B, 1, i)) << "T" << i;
          }
        }
      }
}

}  // namespace
}  // namespace pipetune::schedule
