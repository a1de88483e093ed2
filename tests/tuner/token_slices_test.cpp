// TeraPipe's dynamic programming over token-slice lengths (tuner/predict/token_slices.hpp)
// against brute force over every way to cut a short sequence (seed_techniques.md's oracle), the
// slice time against CostTable::slice_cost, and what a plan gets from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/predict/token_slices.hpp"

namespace pipetune::tuner {
namespace {

// F = 1, B = 2 per micro-batch per stage, `attention` of each op its causal attention, `fixed` of
// each op paid whole by every slice; transfers of 0.05 s latency and 0.2 s of bytes.
schedule::CostTable costs(int stages, double attention, double fixed) {
  schedule::CostTable c = schedule::CostTable::uniform(stages, 1.0, 2.0, 0.0);
  for (auto& st : c.stages) {
    st[schedule::OpKind::BW] = 0.0;  // B + W, with their parts, as the cost model leaves it
    for (schedule::OpKind k : {schedule::OpKind::F, schedule::OpKind::B}) {
      st.attention[static_cast<std::size_t>(k)] = attention * st[k];
      st.fixed[static_cast<std::size_t>(k)] = fixed;
    }
  }
  c.p2p_latency = 0.05;
  c.p2p_bytes = 0.2;
  c.p2p_bandwidth = 1.0;
  return c;
}

double estimate_of(const schedule::CostTable& c, int p, int m, std::int64_t seq,
                   const std::vector<int>& tokens) {
  double sum = 0.0, most = 0.0;
  std::int64_t context = 0;
  for (int t : tokens) {
    const double v = slice_time(c, seq, t, context);
    sum += v;
    most = std::max(most, v);
    context += t;
  }
  return m * sum + (p - 1) * most;
}

// Every composition of seq (2^(seq-1) of them): the least estimate.
double brute_force(const schedule::CostTable& c, int p, int m, int seq) {
  double best = INFINITY;
  for (unsigned cuts = 0; cuts < (1u << (seq - 1)); ++cuts) {
    std::vector<int> tokens;
    int run = 1;
    for (int i = 0; i + 1 < seq; ++i) {
      if (cuts & (1u << i)) {
        tokens.push_back(run);
        run = 1;
      } else {
        ++run;
      }
    }
    tokens.push_back(run);
    best = std::min(best, estimate_of(c, p, m, seq, tokens));
  }
  return best;
}

// The dynamic programme as first written: every distinct cap, each with the whole least sum
// worked out again (the first cut reaching the least taken, a tie kept). The incremental one
// must choose the very same cuts.
TokenSlicing every_cap_again(const schedule::CostTable& c, int p, int m, std::int64_t seq,
                             int grid) {
  std::vector<std::int64_t> at;
  for (int i = 0; i < grid; ++i) {
    const std::int64_t cut = seq * i / grid;
    if (at.empty() || cut > at.back()) at.push_back(cut);
  }
  at.push_back(seq);
  const std::size_t N = at.size();
  std::vector<double> t(N * N, 0.0), caps;
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = i + 1; j < N; ++j) {
      t[i * N + j] = slice_time(c, seq, at[j] - at[i], at[i]);
      caps.push_back(t[i * N + j]);
    }
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  TokenSlicing best;
  best.estimate = INFINITY;
  for (double cap : caps) {
    std::vector<double> S(N, INFINITY);
    std::vector<std::size_t> last(N, 0);
    S[0] = 0.0;
    for (std::size_t j = 1; j < N; ++j)
      for (std::size_t i = 0; i < j; ++i)
        if (t[i * N + j] <= cap && S[i] + t[i * N + j] < S[j]) {
          S[j] = S[i] + t[i * N + j];
          last[j] = i;
        }
    if (S[N - 1] == INFINITY) continue;
    const double estimate = m * S[N - 1] + (p - 1) * cap;
    if (estimate < best.estimate) {
      best.estimate = estimate;
      best.tokens.clear();
      for (std::size_t j = N - 1; j > 0; j = last[j])
        best.tokens.push_back(static_cast<int>(at[j] - at[last[j]]));
      std::reverse(best.tokens.begin(), best.tokens.end());
    }
  }
  return best;
}

TEST(TokenSlices, TheIncrementalProgrammeChoosesTheCutsOfTheWholeOne) {
  // Uniform costs (no attention, no fixed part) tie many slicings: the cuts must still be the
  // ones the whole programme takes.
  for (const auto& [p, m, attention, fixed] :
       {std::tuple{4, 1, 0.0, 0.0}, std::tuple{8, 4, 0.0, 0.0}, std::tuple{4, 2, 0.5, 0.02},
        std::tuple{16, 8, 0.8, 0.1}, std::tuple{2, 16, 0.3, 0.0}, std::tuple{32, 1, 0.6, 0.05}})
    for (const std::int64_t seq : {std::int64_t{64}, std::int64_t{2048}, std::int64_t{4099}}) {
      const schedule::CostTable c = costs(p, attention, fixed);
      const TokenSlicing want = every_cap_again(c, p, m, seq, 32);
      const TokenSlicing got = best_token_slicing(c, p, m, seq, 32);
      EXPECT_EQ(got.tokens, want.tokens) << "p=" << p << " m=" << m << " attention=" << attention
                                         << " fixed=" << fixed << " seq=" << seq;
      EXPECT_EQ(got.estimate, want.estimate);
    }
}

TEST(TokenSlices, TheDynamicProgrammingFindsTheBruteForceOptimum) {
  const int seq = 12;
  for (const auto& [p, m, attention, fixed] :
       {std::tuple{4, 1, 0.0, 0.0}, std::tuple{4, 1, 0.5, 0.02}, std::tuple{8, 2, 0.3, 0.05},
        std::tuple{2, 4, 0.6, 0.01}, std::tuple{16, 1, 0.8, 0.1}}) {
    const schedule::CostTable c = costs(p, attention, fixed);
    const TokenSlicing got = best_token_slicing(c, p, m, seq, seq);
    EXPECT_EQ(std::accumulate(got.tokens.begin(), got.tokens.end(), 0), seq);
    EXPECT_NEAR(got.estimate, estimate_of(c, p, m, seq, got.tokens), 1e-12);
    EXPECT_NEAR(got.estimate, brute_force(c, p, m, seq), 1e-12)
        << "p=" << p << " m=" << m << " attention=" << attention << " fixed=" << fixed;
  }
}

// Causal attention makes later slices dearer: with it the best slices shorten along the
// sequence (TeraPipe's figure of uneven slices); without it and with no fixed part, many equal
// slices win.
TEST(TokenSlices, AttentionMakesTheLaterSlicesShorter) {
  const TokenSlicing with = best_token_slicing(costs(8, 0.9, 0.02), 8, 1, 64, 64);
  ASSERT_GE(with.tokens.size(), 2u);
  EXPECT_GT(with.tokens.front(), with.tokens.back());
  schedule::CostTable free = costs(8, 0.0, 0.0);
  free.p2p_latency = free.p2p_bytes = 0.0;
  const TokenSlicing flat = best_token_slicing(free, 8, 1, 64, 16);
  EXPECT_EQ(flat.tokens, std::vector<int>(16, 4));  // the finest grid: no cost per slice
}

TEST(TokenSlices, ASliceTimeIsItsForwardAndBackwardAndTwoTransfers) {
  const schedule::CostTable c = costs(2, 0.5, 0.1);
  // F: 0.1 + 0.4 * 0.25 + 0.5 * 0.25 * (0.5 + 0.25) = 0.29375; BW = B + W: B = 2 with attention
  // 1 and fixed 0.1: 0.1 + 0.9 * 0.25 + 1 * 0.1875 = 0.5125; transfers 2 * (0.05 + 0.05).
  EXPECT_NEAR(slice_time(c, 8, 2, 2), 0.29375 + 0.5125 + 0.2, 1e-12);
}

TEST(TokenSlices, OnlyATerapipePlanWithoutSlicesIsGivenThem) {
  const schedule::CostTable c = costs(4, 0.5, 0.02);
  spec::ParallelPlan plan;
  plan.pp = 4;
  plan.microbatches = 2;
  plan.schedule = "terapipe";
  choose_token_slices(plan, 48, c);
  EXPECT_EQ(std::accumulate(plan.slice_tokens.begin(), plan.slice_tokens.end(), 0), 48);
  EXPECT_EQ(plan.slice_tokens, best_token_slicing(c, 4, 2, 48).tokens);
  spec::ParallelPlan given = plan;
  given.slice_tokens.clear();
  given.slices = 3;
  choose_token_slices(given, 48, c);
  EXPECT_TRUE(given.slice_tokens.empty());
  spec::ParallelPlan other = given;
  other.slices = 0;
  other.schedule = "gpipe";
  choose_token_slices(other, 48, c);
  EXPECT_TRUE(other.slice_tokens.empty());
}

TEST(TokenSlices, TheCacheChoosesWhatChooseTokenSlicesChooses) {
  // More distinct inputs than the cache holds, each asked for twice and again after the others:
  // every answer is the direct choice's, for hits, misses and evicted entries alike.
  TokenSlicingCache cache;
  for (int round = 0; round < 3; ++round)
    for (int k = 0; k < 40; ++k) {
      const schedule::CostTable c = costs(2 + k % 3, 0.1 + 0.02 * k, 0.01 * (k % 5));
      spec::ParallelPlan plan;
      plan.pp = 2 + k % 3;
      plan.microbatches = 1 + k % 4;
      plan.schedule = "terapipe";
      spec::ParallelPlan direct = plan, cached = plan;
      choose_token_slices(direct, 64 + 8 * (k % 2), c);
      cache.choose(cached, 64 + 8 * (k % 2), c);
      ASSERT_FALSE(direct.slice_tokens.empty());
      EXPECT_EQ(cached.slice_tokens, direct.slice_tokens) << "round " << round << " input " << k;
    }
  spec::ParallelPlan given;
  given.pp = 2;
  given.schedule = "terapipe";
  given.slices = 3;
  cache.choose(given, 48, costs(2, 0.5, 0.02));
  EXPECT_TRUE(given.slice_tokens.empty());  // slices given: nothing chosen
}

}  // namespace
}  // namespace pipetune::tuner
