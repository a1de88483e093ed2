// What the search keeps or checks its shortcut way gives what the plain way gives: its caches'
// ring finds what a list of every entry would; the stage parameters a StageParameterMemo hands
// back are stage_parameters' for every plan, through more shapes than it keeps and a change of
// model; the offload ledger settles its changes as a replay of them in time order does; and the
// two plan rules the enumerator counts without a throw are worded as validate() throws them.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/cost/recent_ring.hpp"
#include "tuner/memory/memory_model.hpp"
#include "tuner/sim/unit_ledger.hpp"

namespace pipetune::tuner {
namespace {

std::string describe(const std::vector<StageParameters>& stages) {
  std::string s;
  for (const StageParameters& st : stages)
    s += "[dense " + std::to_string(st.dense) + " expert " + std::to_string(st.expert) +
         " vocabulary " + std::to_string(st.vocabulary) + " table " +
         std::to_string(st.largest_table) + "] ";
  return s;
}

// Plans of every setting the memo keys on, many more than it keeps.
std::vector<std::pair<spec::ParallelPlan, schedule::Placement>> shapes(std::int64_t layers) {
  std::vector<std::pair<spec::ParallelPlan, schedule::Placement>> out;
  for (int pp : {1, 2, 4})
    for (int chunks : {1, 2})
      for (int tp : {1, 2})
        for (int ep : {1, 2})
          for (auto vocab : {schedule::VocabMode::None, schedule::VocabMode::Vocab1})
            for (auto placement : {schedule::Placement::Linear, schedule::Placement::VShape}) {
              if (placement == schedule::Placement::VShape && chunks != 2) continue;
              if (pp == 1 && vocab != schedule::VocabMode::None) continue;
              spec::ParallelPlan p;
              p.pp = pp;
              p.chunks = chunks;
              p.tp = tp;
              p.ep = ep;
              p.vocab = vocab;
              out.emplace_back(p, placement);
              if (pp == 2 && chunks == 1) {  // an uneven split and per-stage tp on top
                p.layer_split = {static_cast<int>(layers) - 1, 1};
                out.emplace_back(p, placement);
                if (vocab == schedule::VocabMode::None) {
                  p.stage_tp = {1, 2};
                  out.emplace_back(p, placement);
                }
              }
            }
  return out;
}

TEST(StageParameterMemo, GivesWhatStageParametersGivesForEveryPlan) {
  const spec::ModelSpec moe = spec::load_model("tiny-moe");
  const spec::ModelSpec dense = spec::load_model("tiny");
  StageParameterMemo memo;
  std::mt19937 rng(7);
  for (const spec::ModelSpec* model : {&moe, &dense, &moe}) {
    std::vector<std::pair<spec::ParallelPlan, schedule::Placement>> plans = shapes(model->layers);
    ASSERT_GT(plans.size(), 40u);  // beyond the 16 it keeps
    // Each shape in turn (each just after the shapes it differs from in one setting), then
    // several times in an order that comes back to shapes seen long before.
    std::vector<std::size_t> order, again;
    for (std::size_t i = 0; i < plans.size(); ++i) order.push_back(i);
    for (int round = 0; round < 3; ++round) again.insert(again.end(), order.begin(), order.end());
    std::shuffle(again.begin(), again.end(), rng);
    order.insert(order.end(), again.begin(), again.end());
    for (const std::size_t i : order) {
      const auto& [plan, placement] = plans[i];
      if (model == &dense && plan.ep > 1) continue;
      const std::vector<StageParameters> want = stage_parameters(*model, plan, placement);
      const std::vector<StageParameters>& got = memo.get(*model, plan, placement);
      EXPECT_EQ(got, want) << model->name << " plan " << i << "\n got:  " << describe(got)
                           << "\n want: " << describe(want);
    }
  }
}

TEST(StageParameterMemo, EstimatesMemoryAsThePlainEstimate) {
  const spec::ModelSpec model = spec::load_model("llama2-7b");
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 64);
  StageParameterMemo memo;
  for (int zero : {0, 1, 2, 3}) {
    spec::ParallelPlan plan;
    plan.pp = 4;
    plan.dp = 16;
    plan.zero_stage = zero;
    const std::vector<double> peaks = {1e9, 2e9, 3e9, 4e9};
    const MemoryEstimate a =
        estimate_memory(model, cluster, plan, schedule::Placement::Linear, peaks);
    const MemoryEstimate b =
        estimate_memory(memo.get(model, plan, schedule::Placement::Linear), cluster, plan, peaks);
    EXPECT_EQ(a.peak_bytes, b.peak_bytes) << "zero " << zero;
    EXPECT_EQ(a.peak_stage, b.peak_stage) << "zero " << zero;
  }
  spec::ParallelPlan plan;
  plan.pp = 4;
  EXPECT_THROW(estimate_memory(memo.get(model, plan, schedule::Placement::Linear), cluster, plan,
                               std::vector<double>(3, 0.0)),
               InputError);
}

// The ring against a list of every entry added: it finds the newest match among the last N, and
// none older.
TEST(RecentRing, FindsTheNewestMatchAmongTheLastEntries) {
  RecentRing<std::pair<int, int>, 5> ring;  // (key, when added)
  std::vector<std::pair<int, int>> all;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> key(0, 7);
  for (int step = 0; step < 200; ++step) {
    if (step == 120) {
      ring.clear();
      all.clear();
    }
    const int k = key(rng);
    const std::pair<int, int>* got = ring.find([&](const auto& e) { return e.first == k; });
    const std::pair<int, int>* want = nullptr;
    const std::size_t kept = std::min<std::size_t>(all.size(), 5);
    for (std::size_t i = all.size(); i > all.size() - kept; --i)
      if (all[i - 1].first == k) {
        want = &all[i - 1];
        break;
      }
    ASSERT_EQ(got == nullptr, want == nullptr) << "step " << step << " key " << k;
    if (got != nullptr) {
      EXPECT_EQ(*got, *want) << "step " << step;
    }
    // Added whether found or not: keys repeat in the ring, and the newest must be found.
    EXPECT_EQ(ring.add({k, step}), std::make_pair(k, step));
    all.emplace_back(k, step);
    EXPECT_EQ(ring.size(), std::min<std::size_t>(all.size(), 5));
  }
}

// add_with fills the oldest entry's place in place; a fill that throws leaves the ring as if
// neither it nor the entry it was replacing had been added (checked against a list of every
// entry, and N = 1, where the ring empties).
TEST(RecentRing, AddWithFillsInPlaceAndForgetsAFillThatThrows) {
  for (const int seed : {5, 9}) {
    RecentRing<std::pair<int, int>, 4> ring;  // (key, when added)
    RecentRing<std::pair<int, int>, 1> one;
    std::deque<std::pair<int, int>> kept;  // what the ring should keep, oldest first
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::uniform_int_distribution<int> key(0, 5), fails(0, 4);
    for (int step = 0; step < 300; ++step) {
      const int k = key(rng);
      const bool fail = fails(rng) == 0;
      const auto fill = [&](std::pair<int, int>& e) {
        e.first = -1;  // half written
        if (fail) throw std::runtime_error("fill");
        e = {k, step};
      };
      if (fail) {
        EXPECT_THROW(ring.add_with(fill), std::runtime_error);
        EXPECT_THROW(one.add_with(fill), std::runtime_error);
        if (kept.size() == 4) kept.pop_front();  // the place it was filling is lost
        EXPECT_EQ(one.size(), 0u);
      } else {
        EXPECT_EQ(ring.add_with(fill), std::make_pair(k, step));
        EXPECT_EQ(one.add_with(fill), std::make_pair(k, step));
        kept.emplace_back(k, step);
        if (kept.size() > 4) kept.pop_front();
      }
      ASSERT_EQ(ring.size(), kept.size()) << "step " << step;
      for (int probe = -1; probe <= 5; ++probe) {
        const std::pair<int, int>* got = ring.find([&](const auto& e) { return e.first == probe; });
        const auto want = std::find_if(kept.rbegin(), kept.rend(),
                                       [&](const auto& e) { return e.first == probe; });
        ASSERT_EQ(got == nullptr, want == kept.rend()) << "step " << step << " key " << probe;
        if (got != nullptr) EXPECT_EQ(*got, *want) << "step " << step;
      }
    }
  }
}

// The ledger against a replay: every change before each watermark, sorted by time, summed per
// instant, the peak the largest sum.
TEST(UnitLedger, SettlesChangesInTimeOrderLikeASortedReplay) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> tick(0, 40);
  std::uniform_int_distribution<int> delta(-3, 4);
  for (int trial = 0; trial < 50; ++trial) {
    sim::detail::UnitLedger ledger;
    struct Change {
      double t, device, host;
    };
    std::vector<Change> all;
    std::vector<std::pair<double, double>> seen;  // (t, device) as the ledger reports them
    double watermark = 0.0;
    for (int step = 0; step < 30; ++step) {
      for (int k = 0; k < 3; ++k) {  // out of order, but never before the watermark
        const Change c{watermark + tick(rng) / 4.0, static_cast<double>(delta(rng)),
                       static_cast<double>(delta(rng))};
        all.push_back(c);
        ledger.add(c.t, c.device, c.host);
      }
      watermark += 2.5;
      ledger.settle(watermark,
                    [&](double t, double device, double) { seen.emplace_back(t, device); });
    }
    ledger.settle(1e9, [&](double t, double device, double) { seen.emplace_back(t, device); });
    std::stable_sort(all.begin(), all.end(),
                     [](const Change& a, const Change& b) { return a.t < b.t; });
    std::vector<std::pair<double, double>> want;
    double device = 0.0, host = 0.0, peak_device = 0.0, peak_host = 0.0;
    for (std::size_t i = 0; i < all.size();) {
      const double t = all[i].t;
      for (; i < all.size() && all[i].t == t; ++i) {
        device += all[i].device;
        host += all[i].host;
      }
      peak_device = std::max(peak_device, device);
      peak_host = std::max(peak_host, host);
      want.emplace_back(t, device);
    }
    ASSERT_EQ(seen, want) << "trial " << trial;
    EXPECT_EQ(ledger.peak_device(), peak_device);
    EXPECT_EQ(ledger.peak_host(), peak_host);
  }
}

// validate() throws what the enumerator's non-throwing checks return, for the plans they catch.
TEST(SearchPlanRules, TheUnthrownRulesAreWordedAsValidateThrowsThem) {
  const spec::ModelSpec dense = spec::load_model("llama2-7b");
  const spec::ModelSpec moe = spec::load_model("mixtral-8x7b");
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 64);
  const auto base = [](const std::string& schedule, int pp, int chunks) {
    spec::ParallelPlan p;
    p.schedule = schedule;
    p.pp = pp;
    p.chunks = chunks;
    p.dp = 64 / pp;
    p.micro_batch_size = 1;
    p.microbatches = 64;
    p.global_batch = 64 * p.dp;
    return p;
  };
  struct Case {
    const spec::ModelSpec* model;
    spec::ParallelPlan plan;
  };
  std::vector<Case> cases;
  spec::ParallelPlan offload = base("terapipe", 4, 1);
  offload.offload_activations = true;
  cases.push_back({&dense, offload});
  spec::ParallelPlan full = base("terapipe", 4, 1);
  full.recompute = spec::Recompute::Full;
  cases.push_back({&dense, full});
  spec::ParallelPlan per_stage = base("terapipe", 4, 1);
  per_stage.stage_recompute = {spec::Recompute::None, spec::Recompute::Full, spec::Recompute::None,
                               spec::Recompute::None};
  cases.push_back({&dense, per_stage});
  cases.push_back({&moe, base("terapipe", 4, 1)});
  cases.push_back({&dense, base("zb-v", 32, 2)});  // 64 layer groups, 32 layers
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [model, plan] = cases[i];
    std::optional<SpecError> broken = spec::token_slice_conflict(*model, plan);
    if (!broken) broken = spec::layer_group_shortage(*model, plan);
    ASSERT_TRUE(broken.has_value()) << "case " << i;
    try {
      spec::validate(*model, cluster, plan);
      ADD_FAILURE() << "case " << i << ": validate passed, expected: " << broken->what();
    } catch (const SpecError& e) {
      EXPECT_EQ(std::string(e.what()), std::string(broken->what())) << "case " << i;
    }
  }
  // Asked before validate(plan) bounds pp * chunks: counted in 64 bits (UBSan would catch an int).
  spec::ParallelPlan huge = base("zb-v", 1 << 20, 1 << 12);
  const std::optional<SpecError> too_many = spec::layer_group_shortage(dense, huge);
  ASSERT_TRUE(too_many.has_value());
  EXPECT_NE(std::string(too_many->what()).find("pp*chunks=4294967296"), std::string::npos)
      << too_many->what();
  // And nothing for plans that keep both rules.
  EXPECT_FALSE(spec::token_slice_conflict(dense, base("terapipe", 4, 1)).has_value());
  spec::ParallelPlan unsliced = offload;
  unsliced.schedule = "1f1b";
  EXPECT_FALSE(spec::token_slice_conflict(dense, unsliced).has_value());
  EXPECT_FALSE(spec::layer_group_shortage(dense, base("zb-v", 16, 2)).has_value());
}

}  // namespace
}  // namespace pipetune::tuner
