// Experts inside the TP group from the command line: `train --expert-layout whole` (and dedup)
// trains with the sharded layout's losses (the same model, its experts placed otherwise), the JSON
// says the layout, a per-layer list is taken, and bad values are refused with exit 2 naming the
// flag.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

std::vector<double> losses(const std::vector<std::string>& layout) {
  std::vector<std::string> args = {"train", "--model", "tiny-moe", "--tp",    "2",
                                   "--dp",  "2",       "--ep",     "2",       "--microbatches",
                                   "2",     "--steps", "3",        "--no-db", "--json"};
  args.insert(args.end(), layout.begin(), layout.end());
  const ProcessResult r = run_pipetune(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  if (!layout.empty()) EXPECT_TRUE(j.at("plan").contains("expert_layout")) << j.at("plan").dump();
  std::vector<double> out;
  for (const auto& s : j.at("steps")) out.push_back(s.at("loss").get<double>());
  return out;
}

TEST(ExpertLayoutCli, WholeAndDedupExpertsTrainAsShardedOnes) {
  const std::vector<double> sharded = losses({});
  const std::vector<double> whole = losses({"--expert-layout", "whole"});
  const std::vector<double> mixed =
      losses({"--expert-layout", "whole,sharded,whole,sharded,whole,sharded,whole,sharded"});
  const std::vector<double> dedup = losses({"--expert-layout", "dedup"});
  ASSERT_EQ(sharded.size(), 3u);
  ASSERT_EQ(whole.size(), sharded.size());
  ASSERT_EQ(mixed.size(), sharded.size());
  ASSERT_EQ(dedup.size(), sharded.size());
  for (std::size_t i = 0; i < sharded.size(); ++i) {
    EXPECT_NEAR(whole[i], sharded[i], 1e-5 * std::abs(sharded[i])) << "step " << i + 1;
    EXPECT_NEAR(mixed[i], sharded[i], 1e-5 * std::abs(sharded[i])) << "step " << i + 1;
    EXPECT_NEAR(dedup[i], sharded[i], 1e-5 * std::abs(sharded[i])) << "step " << i + 1;
  }
}

// Adaptive experts: train's JSON lists each layer's choice with its two measured times, and the
// stored run's report shows how each layer computed each step: sharded, deduplicated, then its
// choice.
TEST(ExpertLayoutCli, AdaptiveChoicesAreReportedAndStored) {
  ScratchWorkspace w;
  const ProcessResult r =
      w.run({"train",    "--model", "tiny-moe", "--tp",      "2", "--dp",
             "2",        "--ep",    "2",        "--pp",      "1", "--microbatches",
             "2",        "--steps", "4",        "--threads", "1", "--expert-layout",
             "adaptive", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& choices = j.at("expert_layout_choices");
  ASSERT_EQ(choices.size(), 8u);
  std::vector<std::string> chosen;
  for (const nlohmann::json& c : choices) {
    const double sharded = c.at("sharded_seconds").get<double>();
    const double dedup = c.at("dedup_seconds").get<double>();
    EXPECT_GT(sharded, 0.0);
    EXPECT_GT(dedup, 0.0);
    chosen.push_back(c.at("chosen").get<std::string>());
    EXPECT_EQ(chosen.back(), dedup < sharded ? "dedup" : "sharded");
  }
  const ProcessResult report =
      w.run({"report", std::to_string(j.at("run_id").get<int>()), "--json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const nlohmann::json layers =
      nlohmann::json::parse(report.out).at("expert_load").at("adaptive_layers");
  ASSERT_EQ(layers.size(), 8u);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const bool d = chosen[l] == "dedup";
    EXPECT_EQ(layers[l].at("layer").get<int>(), static_cast<int>(l));
    EXPECT_EQ(layers[l].at("deduplicated").get<std::vector<bool>>(),
              (std::vector<bool>{false, true, d, d}))
        << "layer " << l;
  }
}

TEST(ExpertLayoutCli, BadLayoutsAreRefused) {
  const std::vector<std::string> base = {"train", "--tp",    "2", "--dp",
                                         "2",     "--steps", "1", "--no-db"};
  for (const auto& [extra, want] :
       {std::pair{std::vector<std::string>{"--model", "tiny-moe", "--expert-layout", "halved"},
                  "--expert-layout: expert_layout[0]: unknown layout 'halved' (valid: sharded, "
                  "whole, dedup, adaptive)"},
        std::pair{
            std::vector<std::string>{"--model", "tiny-moe", "--expert-layout", "whole,sharded"},
            "expert_layout has 2 entries"},
        std::pair{std::vector<std::string>{"--model", "tiny", "--expert-layout", "whole"},
                  "the model has none"}}) {
    expect_refused(with(base, extra), want);
  }
}

}  // namespace
}  // namespace pipetune::testing
