// The linear-placement generators (gpipe, 1f1b with its vocabulary variants, interleaved-1f1b,
// zb-h1) against references that do not use the generators' code: the validator, activation
// counts read straight off the op lists, hand-written orders, Megatron's worked interleaving
// example (schedules.md a.3), and the generators' error rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "support/schedule_helpers.hpp"

namespace pipetune::schedule {
namespace {

using testing::params;
using testing::where;

// Peak activations held by a rank, in micro-batches of the rank's layers, with the memory
// convention of the simulator: F adds 1/v, BW frees 1/v, B frees (1 - wf)/v and W frees wf/v.
double peak_activations(const Schedule& s, int rank, double wf = 1.0) {
  const double unit = 1.0 / s.chunks;
  double held = 0.0, peak = 0.0;
  for (const Op& op : s.ranks[static_cast<std::size_t>(rank)]) {
    switch (op.kind) {
      case OpKind::F:
        held += unit;
        break;
      case OpKind::BW:
        held -= unit;
        break;
      case OpKind::B:
        held -= (1.0 - wf) * unit;
        break;
      case OpKind::W:
        held -= wf * unit;
        break;
      default:
        break;
    }
    peak = std::max(peak, held);
  }
  return peak;
}

// "F0 F1 B0" (kind and micro-batch; chunk appended as ".c" when the schedule has several).
std::string render(const Schedule& s, int rank, bool only_forward = false) {
  std::string out;
  for (const Op& op : s.ranks[static_cast<std::size_t>(rank)]) {
    if (only_forward && op.kind != OpKind::F) continue;
    if (!out.empty()) out += ' ';
    out += std::string(op_kind_name(op.kind)) + std::to_string(op.microbatch);
    if (s.chunks > 1) out += "." + std::to_string(op.chunk);
  }
  return out;
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

using Generator = Schedule (*)(const GeneratorParams&);

struct Case {
  const char* name;
  Generator fn;
  VocabMode vocab;
  int ops_per_rank_and_microbatch;  // F + backward ops (+ the four vocabulary passes)
};

const Case kCases[] = {
    {"gpipe", generate_gpipe, VocabMode::None, 2},
    {"1f1b", generate_1f1b, VocabMode::None, 2},
    {"zb-h1", generate_zb_h1, VocabMode::None, 3},
    {"1f1b", generate_1f1b, VocabMode::Vocab1, 6},
    {"1f1b", generate_1f1b, VocabMode::Vocab2, 6},
    {"1f1b", generate_1f1b, VocabMode::Interlaced, 6},
};

TEST(LinearGenerators, EveryGeneratorValidatesForManySizes) {
  for (const Case& c : kCases)
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 3, 5, 8, 13, 24}) {
        const GeneratorParams g = params(c.name, p, m, c.vocab);
        SCOPED_TRACE(where(g));
        const Schedule s = c.fn(g);
        EXPECT_NO_THROW(validate(s));
        EXPECT_EQ(s.name, c.name);
        EXPECT_EQ(s.placement, Placement::Linear);
        EXPECT_EQ(s.vocab, c.vocab);
        EXPECT_EQ(s.chunks, 1);
        EXPECT_EQ(s.op_count(), static_cast<std::size_t>(c.ops_per_rank_and_microbatch * p * m));
        // The registry dispatches to the same generator.
        EXPECT_EQ(generate(g).op_count(), s.op_count());
      }
}

TEST(LinearGenerators, InterleavedValidatesWhereMegatronAllowsIt) {
  for (int p : {1, 2, 3, 4, 8})
    for (int v : {2, 3})
      for (int m : {p, 2 * p, 4 * p, 2 * p + 1}) {
        GeneratorParams g = params("interleaved-1f1b", p, m);
        g.chunks = v;
        // 2p + 1 micro-batches in groups of p + 1 leave a last group of p: allowed.
        if (m == 2 * p + 1) g.group_size = p + 1;
        SCOPED_TRACE(where(g));
        const Schedule s = generate_interleaved_1f1b(g);
        EXPECT_NO_THROW(validate(s));
        EXPECT_EQ(s.chunks, v);
        EXPECT_EQ(s.placement, Placement::Linear);
        EXPECT_EQ(s.op_count(), static_cast<std::size_t>(2 * p * m * v));
      }
  // chunks = 0 means the default of two chunks per rank.
  EXPECT_EQ(generate_interleaved_1f1b(params("interleaved-1f1b", 4, 8)).chunks, 2);
}

TEST(LinearGenerators, RejectsParametersWithAMessageNamingTheRule) {
  GeneratorParams g = params("gpipe", 4, 8);
  g.chunks = 2;
  EXPECT_NE(error_of([&] { generate_gpipe(g); }).find("gpipe supports chunks=1 only"),
            std::string::npos);
  g.name = "zb-h1";
  EXPECT_NE(error_of([&] { generate_zb_h1(g); }).find("zb-h1 supports chunks=1 only"),
            std::string::npos);

  for (Generator fn : {generate_gpipe, generate_zb_h1}) {
    const std::string msg = error_of([&] { fn(params("x", 4, 8, VocabMode::Vocab1)); });
    EXPECT_NE(msg.find("vocab-1 is supported on 1f1b, interleaved-1f1b and v-half only"),
              std::string::npos)
        << msg;
  }

  g = params("interleaved-1f1b", 4, 5);
  g.group_size = 6;
  EXPECT_NE(error_of([&] {
              generate_interleaved_1f1b(g);
            }).find("interleaved-1f1b: microbatches=5 is fewer than group size G=6"),
            std::string::npos);
  // G defaults to p, so m < p is an error for interleaved (but fine for 1f1b, tested above).
  std::string msg = error_of([&] { generate_interleaved_1f1b(params("i", 4, 3)); });
  EXPECT_NE(msg.find("microbatches=3 is fewer than group size G=4"), std::string::npos) << msg;
  g.microbatches = 8;
  g.group_size = 2;
  msg = error_of([&] { generate_interleaved_1f1b(g); });
  EXPECT_NE(msg.find("group size G=2 is smaller than stages p=4"), std::string::npos) << msg;
  g.group_size = 4;
  g.microbatches = 6;  // last group of 2 < p
  msg = error_of([&] { generate_interleaved_1f1b(g); });
  EXPECT_NE(msg.find("leaves a last group of 2"), std::string::npos) << msg;
  g.microbatches = 9;  // 9 mod 5 = 4 >= p: allowed
  g.group_size = 5;
  EXPECT_NO_THROW(validate(generate_interleaved_1f1b(g)));
  g.chunks = 1;
  msg = error_of([&] { generate_interleaved_1f1b(g); });
  EXPECT_NE(msg.find("needs chunks >= 2"), std::string::npos) << msg;

  g = params("1f1b", 4, 8);
  g.costs = CostTable::uniform(3, 1, 1, 1);
  msg = error_of([&] { generate_zb_h1(g); });
  EXPECT_NE(msg.find("cost table has 3 stages"), std::string::npos) << msg;
}

TEST(LinearGenerators, OneFOneBMatchesMegatronOrder) {
  // Written out by hand from schedules.md a.2: warm-up min(p - r - 1, m), (F, BW) pairs,
  // remaining BW.
  const Schedule s = generate_1f1b(params("1f1b", 3, 5));
  EXPECT_EQ(render(s, 0), "F0 F1 F2 BW0 F3 BW1 F4 BW2 BW3 BW4");
  EXPECT_EQ(render(s, 1), "F0 F1 BW0 F2 BW1 F3 BW2 F4 BW3 BW4");
  EXPECT_EQ(render(s, 2), "F0 BW0 F1 BW1 F2 BW2 F3 BW3 F4 BW4");
  const Schedule few = generate_1f1b(params("1f1b", 4, 2));
  EXPECT_EQ(render(few, 0), "F0 F1 BW0 BW1");
  EXPECT_EQ(render(few, 3), "F0 BW0 F1 BW1");
  EXPECT_EQ(render(generate_gpipe(params("gpipe", 2, 3)), 1), "F0 F1 F2 BW0 BW1 BW2");
}

TEST(LinearGenerators, OneFOneBHoldsPMinusRAndGpipeHoldsM) {
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 3, 8, 16}) {
      const Schedule one = generate_1f1b(params("1f1b", p, m));
      const Schedule gp = generate_gpipe(params("gpipe", p, m));
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " r=" + std::to_string(r));
        EXPECT_DOUBLE_EQ(peak_activations(one, r), std::min(p - r, m));
        EXPECT_DOUBLE_EQ(peak_activations(gp, r), m);
      }
    }
}

TEST(LinearGenerators, InterleavedReproducesMegatronWorkedExample) {
  // Megatron's get_schedule_table comment, p=2, G=3, m=5, v=2:
  //   virtual id  0 1 2 3 4 5 6 7 8 9
  //   micro-batch 0 1 2 0 1 2 3 4 3 4
  //   chunk       0 0 0 1 1 1 0 0 1 1
  GeneratorParams g = params("interleaved-1f1b", 2, 5);
  g.chunks = 2;
  g.group_size = 3;
  const Schedule s = generate_interleaved_1f1b(g);
  const std::string table = "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 F3.0 F4.0 F3.1 F4.1";
  EXPECT_EQ(render(s, 0, true), table);
  EXPECT_EQ(render(s, 1, true), table);
  // Backward k takes table entry k with the chunk reversed; rank 0 warms up with
  // 2(p - r - 1) + (v - 1)G = 5 forwards, rank 1 with 3, then alternates F, BW.
  EXPECT_EQ(render(s, 0),
            "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 BW0.1 F3.0 BW1.1 F4.0 BW2.1 F3.1 BW0.0 F4.1 BW1.0 "
            "BW2.0 BW3.1 BW4.1 BW3.0 BW4.0");
  EXPECT_EQ(render(s, 1),
            "F0.0 F1.0 F2.0 F0.1 BW0.1 F1.1 BW1.1 F2.1 BW2.1 F3.0 BW0.0 F4.0 BW1.0 F3.1 BW2.0 "
            "F4.1 BW3.1 BW4.1 BW3.0 BW4.0");
}

TEST(LinearGenerators, InterleavedWarmupIsCappedAtAllForwards) {
  // p=4, v=3, G=4, m=4: rank 0 would warm up with 2*3 + 2*4 = 14 > m*v = 12 forwards, so it
  // runs every forward first (Megatron's "all micro-batches in warm-up").
  GeneratorParams g = params("interleaved-1f1b", 4, 4);
  g.chunks = 3;
  const Schedule s = generate_interleaved_1f1b(g);
  const auto& ops = s.ranks[0];
  for (int k = 0; k < 12; ++k) EXPECT_EQ(ops[static_cast<std::size_t>(k)].kind, OpKind::F) << k;
}

TEST(LinearGenerators, ZbH1SplitsBackwardAndKeepsOneFOneBMemory) {
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 3, 8, 24}) {
      const Schedule s = generate_zb_h1(params("zb-h1", p, m));
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      for (int r = 0; r < p; ++r) {
        const auto& ops = s.ranks[static_cast<std::size_t>(r)];
        EXPECT_EQ(
            std::count_if(ops.begin(), ops.end(), [](const Op& o) { return o.kind == OpKind::W; }),
            m);
        EXPECT_LE(peak_activations(s, r), p + 1e-9);
      }
      // Stage 0 is as full as in 1F1B.
      EXPECT_DOUBLE_EQ(peak_activations(s, 0), std::min(p, m));
    }
}

TEST(LinearGenerators, VocabularyVariantsPeakAtPPlus2PPlus1AndOnePointFiveP) {
  // VocabularyParallelism README (schedules.md b.6): Vocab-1 p+2, Vocab-2 p+1, Interlaced 1.5p
  // micro-batches of activations on the first stage (enough micro-batches to fill the warm-up).
  for (int p : {1, 2, 3, 4, 8}) {
    const int m = 3 * p + 4;
    const Schedule v1 = generate_1f1b(params("1f1b", p, m, VocabMode::Vocab1));
    const Schedule v2 = generate_1f1b(params("1f1b", p, m, VocabMode::Vocab2));
    const Schedule il = generate_1f1b(params("1f1b", p, m, VocabMode::Interlaced));
    SCOPED_TRACE("p=" + std::to_string(p));
    EXPECT_DOUBLE_EQ(peak_activations(v1, 0), p + 2);
    EXPECT_DOUBLE_EQ(peak_activations(v2, 0), p + 1);
    EXPECT_DOUBLE_EQ(peak_activations(il, 0), (3 * p) / 2);
    for (int r = 0; r < p; ++r) {
      EXPECT_DOUBLE_EQ(peak_activations(v1, r), p - r + 2) << "vocab-1 rank " << r;
      EXPECT_DOUBLE_EQ(peak_activations(v2, r), p - r + 1) << "vocab-2 rank " << r;
    }
  }
}

TEST(LinearGenerators, VocabularyPassesRunOnEveryRankInTheSameBarrierOrder) {
  for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
    const Schedule s = generate_1f1b(params("1f1b", 4, 12, mode));
    SCOPED_TRACE(std::string(vocab_mode_name(mode)));
    // Barrier-joining ops, read off rank 0 and compared with every other rank.
    auto barriers = [&](int r) {
      std::string out;
      for (const Op& op : s.ranks[static_cast<std::size_t>(r)]) {
        const bool joins = op.kind == OpKind::S || op.kind == OpKind::IF ||
                           (op.kind == OpKind::T && mode != VocabMode::Vocab2);
        if (joins) out += std::string(op_kind_name(op.kind)) + std::to_string(op.microbatch) + " ";
      }
      return out;
    };
    for (int r = 1; r < 4; ++r) EXPECT_EQ(barriers(r), barriers(0)) << "rank " << r;
    // On every rank each S precedes its T and each IF its IB.
    for (int r = 0; r < 4; ++r) {
      const auto& ops = s.ranks[static_cast<std::size_t>(r)];
      for (int i = 0; i < 12; ++i) {
        auto at = [&](OpKind k) {
          return std::find(ops.begin(), ops.end(), Op{k, 0, i}) - ops.begin();
        };
        EXPECT_LT(at(OpKind::S), at(OpKind::T)) << "rank " << r << " mb " << i;
        EXPECT_LT(at(OpKind::IF), at(OpKind::IB)) << "rank " << r << " mb " << i;
      }
    }
  }
}

TEST(LinearGenerators, CostAwareGeneratorsAcceptUnequalStageCosts) {
  // A heavy last stage, expensive vocabulary passes and communication: still valid, and the
  // transformer memory rules do not change.
  for (int p : {2, 4, 8}) {
    CostTable c = CostTable::uniform(p, 1, 1, 1, 1.5, 1.0, 0.1);
    c.stages[static_cast<std::size_t>(p - 1)][OpKind::F] = 2;
    c.stages[static_cast<std::size_t>(p - 1)][OpKind::B] = 2;
    c.stages[static_cast<std::size_t>(p - 1)][OpKind::W] = 2;
    c.stages[static_cast<std::size_t>(p - 1)][OpKind::BW] = 4;
    for (OpKind k : {OpKind::IF, OpKind::IB}) c.stages[0][k] = 0.3;
    for (const Case& cs : kCases) {
      GeneratorParams g = params(cs.name, p, 3 * p, cs.vocab);
      g.costs = c;
      SCOPED_TRACE(where(g));
      const Schedule s = cs.fn(g);
      EXPECT_NO_THROW(validate(s));
      const double peak = peak_activations(s, 0);
      if (cs.vocab == VocabMode::Vocab2) {
        EXPECT_DOUBLE_EQ(peak, p + 1);
      } else if (cs.vocab == VocabMode::Vocab1) {
        EXPECT_DOUBLE_EQ(peak, p + 2);
      } else if (cs.ops_per_rank_and_microbatch == 3) {  // zb-h1
        EXPECT_LE(peak, p + 1e-9);
      }
    }
  }
}

}  // namespace
}  // namespace pipetune::schedule
