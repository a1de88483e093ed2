// A prediction and a measurement of one plan run the same Schedule, op for op. For every
// generator and vocabulary mode the engine runs, `simulate --config RUN` and `train --config RUN`
// store a run each, and `pipetune diff` pairs every compute op of one with an op of the other
// (same rank, kind, micro-batch and chunk) in the same order on every rank. The cost-aware
// generators (zb-h1, zb-h2, zb-v, the vocabulary modes) order ops by the op costs, so this holds
// only when both commands plan with the cost model of the run's hardware.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

struct Case {
  std::string schedule;
  std::string vocab;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.schedule << " vocab " << c.vocab;
}

class ScheduleEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(ScheduleEquivalence, SimulateAndTrainOfOneRunFileRunTheSameOps) {
  const Case& c = GetParam();
  const std::string dir = default_child_cwd();
  const std::string tag = c.schedule + "-" + c.vocab;
  const std::string run_file = dir + "/" + tag + ".toml";
  std::ofstream(run_file) << "model = \"tiny\"\n[cluster]\nhardware = \"a100-80gb\"\ndevices = 4\n"
                          << "[plan]\npp = 4\nmicrobatches = 8\nschedule = \"" << c.schedule
                          << "\"\nvocab = \"" << c.vocab << "\"\n";
  const std::string db = dir + "/" + tag + ".db";
  const auto sim = run_pipetune({"simulate", "--config", run_file, "--db", db, "--name",
                                 "predicted", "--json", "--no-gantt"});
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const auto train = run_pipetune(
      {"train", "--config", run_file, "--db", db, "--name", "measured", "--steps", "1", "--json"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const auto diff = run_pipetune({"diff", "predicted", "measured", "--db", db, "--json"});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  const auto pairing = nlohmann::json::parse(diff.out).at("op_pairing");
  EXPECT_TRUE(pairing.at("identical").get<bool>()) << pairing.dump();
  EXPECT_EQ(pairing.at("only_a"), 0) << pairing.dump();
  EXPECT_EQ(pairing.at("only_b"), 0) << pairing.dump();
  const nlohmann::json simulated = nlohmann::json::parse(sim.out);
  // The layered schedule's R ops pair too: one per local layer group on each of the 4 ranks.
  if (c.schedule == "layered")
    EXPECT_EQ(pairing.at("reductions_paired").get<int>(), 4 * 2) << pairing.dump();
  else
    EXPECT_EQ(pairing.at("reductions_paired").get<int>(), 0) << pairing.dump();
  // A rank runs only the micro-batches whose path visits it.
  if (c.schedule == "skippipe" || c.schedule == "skippipe-ca") {
    EXPECT_EQ(pairing.at("paired").get<int>(), simulated.at("ops").get<int>()) << pairing.dump();
    return;
  }
  // Every op of the schedule: at least F and a backward per micro-batch and chunk on each rank
  // (terapipe: per token slice).
  const int chunks = simulated.at("chunks").get<int>();
  EXPECT_GE(pairing.at("paired").get<int>(), 4 * 8 * chunks * 2) << pairing.dump();
}

INSTANTIATE_TEST_SUITE_P(EveryGeneratorAndVocabularyMode, ScheduleEquivalence,
                         ::testing::Values(Case{"gpipe", "none"}, Case{"1f1b", "none"},
                                           Case{"interleaved-1f1b", "none"}, Case{"zb-h1", "none"},
                                           Case{"zb-h2", "none"}, Case{"zb-v", "none"},
                                           Case{"v-half", "none"}, Case{"v-min", "none"},
                                           Case{"dualpipe-v", "none"}, Case{"1f1b", "vocab-1"},
                                           Case{"1f1b", "vocab-2"}, Case{"1f1b", "interlaced"},
                                           Case{"v-half", "vocab-1"}, Case{"v-half", "vocab-2"},
                                           Case{"terapipe", "none"}, Case{"skippipe", "none"},
                                           Case{"skippipe-ca", "none"}, Case{"layered", "none"}),
                         [](const auto& info) {
                           std::string name = info.param.schedule + "_" + info.param.vocab;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace pipetune::testing
