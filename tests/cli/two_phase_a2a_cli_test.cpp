// Tutel's two-phase all-to-all from the command line: `train --moe-a2a-node-ranks 2` trains with
// the flat all-to-all's losses (the same values moved in two phases), the JSON says the node
// ranks, and counts that do not split the EP group are refused with exit 2 naming the rule;
// `export` refuses it for the frameworks that have no such setting.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

nlohmann::json train_json(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"train", "--model", "tiny-moe",       "--dp", "4",
                                   "--ep",  "4",       "--microbatches", "2",    "--steps",
                                   "3",     "--no-db", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const ProcessResult r = run_pipetune(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(TwoPhaseAllToAllCli, TrainsAsTheFlatAllToAll) {
  const nlohmann::json flat = train_json({});
  const nlohmann::json two = train_json({"--moe-a2a-node-ranks", "2"});
  EXPECT_FALSE(flat.at("plan").contains("moe_a2a_node_ranks"));
  EXPECT_EQ(two.at("plan").at("moe_a2a_node_ranks"), 2);
  ASSERT_EQ(two.at("steps").size(), 3u);
  ASSERT_EQ(flat.at("steps").size(), 3u);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(two.at("steps")[i].at("loss").get<double>(),
              flat.at("steps")[i].at("loss").get<double>())
        << "step " << i + 1;
}

TEST(TwoPhaseAllToAllCli, CountsThatDoNotSplitTheEpGroupAreRefused) {
  for (const auto& [extra, want] :
       {std::pair{std::vector<std::string>{"--model", "tiny-moe", "--ep", "4",
                                           "--moe-a2a-node-ranks", "3"},
                  "moe_a2a_node_ranks=3 must divide ep=4"},
        std::pair{std::vector<std::string>{"--model", "tiny-moe", "--ep", "4",
                                           "--moe-a2a-node-ranks", "4"},
                  "strictly between 1 and ep"},
        std::pair{std::vector<std::string>{"--model", "tiny-moe", "--ep", "4",
                                           "--moe-a2a-node-ranks", "0"},
                  "--moe-a2a-node-ranks must be at least 1"},
        std::pair{std::vector<std::string>{"--model", "tiny", "--moe-a2a-node-ranks", "2"},
                  "the model has none"}}) {
    expect_refused(with({"train", "--dp", "4", "--steps", "1", "--no-db"}, extra), want);
  }
}

// tiny-moe on 4 nodes of 2 GPUs: tune tries the two-phase all-to-all for EP groups that span
// nodes, and Megatron-LM and torchtitan refuse such a plan by name, writing nothing.
TEST(TwoPhaseAllToAllCli, TuneTriesItAndTheExportsRefuseIt) {
  ScratchWorkspace w;
  const ProcessResult r = w.run({"tune", "--model", "tiny-moe", "--hardware", "h100-sxm", "--gpus",
                                 "8", "--nodes-of", "2", "--global-batch", "32", "--seq", "32",
                                 "--schedules", "1f1b", "--json", "--top", "100000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json tuned = nlohmann::json::parse(r.out);
  int rank = -1;
  for (std::size_t i = 0; i < tuned["results"].size() && rank < 0; ++i) {
    const nlohmann::json& p = tuned["results"][i]["plan"];
    if (p.value("moe_a2a_node_ranks", 0) == 2 && p["tp"] == 1 && p.value("moe_chunks", 1) == 1 &&
        p["recompute"] != "selective")
      rank = static_cast<int>(i + 1);
  }
  ASSERT_GT(rank, 0) << "no two-phase plan among " << tuned["results"].size();
  const std::string out = w.path("export.out");
  for (const char* format : {"megatron", "torchtitan"}) {
    SCOPED_TRACE(format);
    const ProcessResult e =
        w.run({"export", "--format", format, "--rank", std::to_string(rank), "-o", out});
    EXPECT_EQ(e.exit_code, 2) << e.err;
    EXPECT_NE(e.err.find("moe_a2a_node_ranks=2"), std::string::npos) << e.err;
    EXPECT_NE(e.err.find("export the plan with a flat all-to-all"), std::string::npos) << e.err;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace pipetune::testing
