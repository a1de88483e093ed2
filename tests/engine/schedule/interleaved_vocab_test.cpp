// Vocab-1 and vocab-2 on interleaved 1F1B (interleaved_1f1b.cpp): every op once, no deadlock
// (the validator), the vocabulary passes on every rank in one barrier order, the transformer ops
// in Megatron's interleaved order with a longer warm-up, and interlaced refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/dependencies.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "support/schedule_helpers.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams interleaved(int p, int m, int v, VocabMode vocab, int group = 0) {
  GeneratorParams g = testing::params("interleaved-1f1b", p, m, vocab);
  g.chunks = v;
  g.group_size = group;
  return g;
}

TEST(InterleavedVocab, EverySizeValidatesWithThePassesOnEveryRank) {
  for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2})
    for (int p : {1, 2, 3, 4, 8})
      for (int v : {2, 3, 4})
        for (int m : {p, 2 * p, 3 * p, 4 * p + 1}) {
          const GeneratorParams g = interleaved(p, m, v, mode);
          SCOPED_TRACE(testing::where(g));
          if (m % p != 0) continue;  // a last group under p: Megatron's rule, tested elsewhere
          Schedule s;
          ASSERT_NO_THROW(s = generate(g));
          EXPECT_EQ(s.vocab, mode);
          EXPECT_EQ(s.chunks, v);
          EXPECT_NO_THROW(validate(s));
          for (int r = 0; r < p; ++r) {
            int counts[kOpKindCount] = {};
            for (const Op& op : s.ranks[static_cast<std::size_t>(r)])
              ++counts[static_cast<int>(op.kind)];
            for (OpKind k : {OpKind::S, OpKind::T, OpKind::IF, OpKind::IB})
              EXPECT_EQ(counts[static_cast<int>(k)], m) << "rank " << r << " " << op_kind_name(k);
            EXPECT_EQ(counts[static_cast<int>(OpKind::F)], m * v) << "rank " << r;
            EXPECT_EQ(counts[static_cast<int>(OpKind::BW)], m * v) << "rank " << r;
          }
        }
}

// Without the vocabulary passes, each rank's transformer ops are the plain interleaved order
// with the same table (forwards walk micro-batch groups chunk by chunk, backwards the same
// entries with the chunk reversed): the forwards in the same order, the backwards too.
TEST(InterleavedVocab, TheTransformerOpsKeepTheInterleavedOrder) {
  for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2}) {
    const Schedule plain = generate(interleaved(4, 8, 2, VocabMode::None));
    const Schedule vocab = generate(interleaved(4, 8, 2, mode));
    for (int r = 0; r < 4; ++r) {
      std::vector<Op> f_plain, b_plain, f_vocab, b_vocab;
      for (const Op& op : plain.ranks[static_cast<std::size_t>(r)])
        (op.kind == OpKind::F ? f_plain : b_plain).push_back(op);
      for (const Op& op : vocab.ranks[static_cast<std::size_t>(r)]) {
        if (op.kind == OpKind::F) f_vocab.push_back(op);
        if (op.kind == OpKind::BW) b_vocab.push_back(op);
      }
      EXPECT_EQ(f_vocab, f_plain) << "rank " << r;
      EXPECT_EQ(b_vocab, b_plain) << "rank " << r;
    }
  }
}

// Every rank joins the barriers (S, IF, and T under vocab-1) in one order, or a real run would
// deadlock inside the pipeline group's all-reduces.
TEST(InterleavedVocab, EveryRankJoinsTheBarriersInOneOrder) {
  for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2}) {
    const Schedule s = generate(interleaved(4, 12, 3, mode));
    std::vector<std::vector<Event>> order(4);
    for (int r = 0; r < 4; ++r)
      for (const Op& op : s.ranks[static_cast<std::size_t>(r)]) {
        const Production prod = production_of(s, r, op);
        if (prod.present && prod.joins_barrier)
          order[static_cast<std::size_t>(r)].push_back(prod.event);
      }
    const std::size_t per_microbatch = mode == VocabMode::Vocab1 ? 3 : 2;
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(order[static_cast<std::size_t>(r)].size(), per_microbatch * 12) << "rank " << r;
      EXPECT_EQ(order[static_cast<std::size_t>(r)], order[0]) << "rank " << r;
    }
  }
}

TEST(InterleavedVocab, InterlacedIsRefusedNamingTheSchedules) {
  try {
    (void)generate(interleaved(4, 8, 2, VocabMode::Interlaced));
    FAIL();
  } catch (const ScheduleError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("interlaced is supported on 1f1b only"), std::string::npos) << what;
  }
  EXPECT_TRUE(supports_vocab("interleaved-1f1b", VocabMode::Vocab1));
  EXPECT_TRUE(supports_vocab("interleaved-1f1b", VocabMode::Vocab2));
  EXPECT_FALSE(supports_vocab("interleaved-1f1b", VocabMode::Interlaced));
}

}  // namespace
}  // namespace pipetune::schedule
