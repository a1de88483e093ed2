// embedding_rows on hand-made counters: each rank's four series zipped step by step in time
// order (samples pushed out of order), other counters ignored, a trace without them empty, and a
// series cut short refused.
#include "profiler/analysis/embedding_rows.hpp"

#include <gtest/gtest.h>

#include <string>

#include "profiler/analysis/analysis_error.hpp"

namespace pipetune::profiler::analysis {
namespace {

void sample(Trace& t, std::int32_t rank, std::string_view name, std::int64_t at, double value) {
  t.counters.push_back({rank, t.intern(std::string(name)), at, value});
}

// Rank `rank`'s step at time `at`: touched rows, tokens, shard rows and vocabulary.
void step(Trace& t, std::int32_t rank, std::int64_t at, double touched, double tokens) {
  sample(t, rank, kEmbeddingRowsTouched, at, touched);
  sample(t, rank, kEmbeddingTokens, at, tokens);
  sample(t, rank, kEmbeddingShardRows, at, 256.0);
  sample(t, rank, kEmbeddingVocab, at, 512.0);
}

TEST(EmbeddingRows, ZipsEachRanksSeriesStepByStep) {
  Trace t;
  sample(t, 0, "activations held", 5, 3.0);  // another series
  step(t, 1, 300, 7.0, 64.0);                // rank 1's second step, pushed first
  step(t, 0, 100, 5.0, 64.0);
  step(t, 1, 110, 6.0, 64.0);
  step(t, 0, 290, 4.0, 32.0);
  const EmbeddingRows rows = embedding_rows(t);
  ASSERT_EQ(rows.samples.size(), 4u);
  const std::vector<std::array<double, 4>> want = {
      {0, 0, 5, 64}, {0, 1, 4, 32}, {1, 0, 6, 64}, {1, 1, 7, 64}};  // rank, step, touched, tokens
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    const EmbeddingRowsSample& s = rows.samples[i];
    EXPECT_EQ(s.rank, want[i][0]);
    EXPECT_EQ(s.step, want[i][1]);
    EXPECT_EQ(s.touched, want[i][2]);
    EXPECT_EQ(s.tokens, want[i][3]);
    EXPECT_EQ(s.shard_rows, 256.0);
    EXPECT_EQ(s.vocab, 512.0);
  }
}

TEST(EmbeddingRows, ATraceWithoutTheCountersHasNone) {
  Trace t;
  sample(t, 0, "activations held", 5, 3.0);
  EXPECT_TRUE(embedding_rows(t).empty());
}

TEST(EmbeddingRows, ASeriesCutShortIsRefused) {
  Trace t;
  step(t, 0, 100, 5.0, 64.0);
  sample(t, 0, kEmbeddingRowsTouched, 200, 4.0);  // the step's other three never came
  try {
    embedding_rows(t);
    ADD_FAILURE() << "no AnalysisError";
  } catch (const AnalysisError& e) {
    EXPECT_NE(std::string(e.what()).find("a run cut short?"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipetune::profiler::analysis
