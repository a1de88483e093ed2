// `pipetune simulate` end to end: JSON fields against closed forms, trace files, bad input.
#include <filesystem>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("pipetune_cli_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

TEST(SimulateCli, JsonMatchesOneF1BClosedForm) {
  const auto r = run_pipetune(
      {"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  // Equal costs F=B=W=1 (BW=2): iteration (m+p-1)(F+BW) = 33, bubble (p-1)/(m+p-1) = 3/11.
  EXPECT_DOUBLE_EQ(j.at("iteration_time").get<double>(), 33.0);
  EXPECT_NEAR(j.at("bubble_ratio").get<double>(), 3.0 / 11.0, 1e-12);
  ASSERT_EQ(j.at("stages").size(), 4u);
  for (int r_ = 0; r_ < 4; ++r_) {
    const auto& st = j["stages"][static_cast<std::size_t>(r_)];
    EXPECT_EQ(st.at("stage").get<int>(), r_);
    EXPECT_DOUBLE_EQ(st.at("busy").get<double>(), 24.0);
    EXPECT_DOUBLE_EQ(st.at("bubble").get<double>(), 9.0);
    EXPECT_NEAR(st.at("bubble_ratio").get<double>(), 3.0 / 11.0, 1e-12);
    EXPECT_DOUBLE_EQ(st.at("peak_activation_microbatches").get<double>(), 4.0 - r_);
    EXPECT_FALSE(st.contains("peak_activation_bytes"));
  }
}

// DualPipeV's F&B pairs with --comm-f 0.25 and --comm-b 0.5 (F = B = W = 1, so BW = 2 with 0.5
// of communication): each pair hides min(0.25, 2 - 0.5) + min(0.5, 1 - 0.25) = 0.75. With p = 2
// and m = 4 each rank has 3 pairs (rank 0: two step-4 pairs and one step-5 pair; rank 1: four
// step-4 pairs less the turn of the V's first), so 2.25 hidden of 2m(F + BW) = 24 busy.
TEST(SimulateCli, DualPipeVPairsHideTheInOpCommunicationGiven) {
  const auto r =
      run_pipetune({"simulate", "--schedule", "dualpipe-v", "--stages", "2", "--microbatches", "4",
                    "--comm-f", "0.25", "--comm-b", "0.5", "--json", "--no-db"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("stages").size(), 2u);
  for (const auto& st : j["stages"]) {
    EXPECT_DOUBLE_EQ(st.at("overlap_hidden").get<double>(), 2.25) << st.dump();
    EXPECT_DOUBLE_EQ(st.at("busy").get<double>(), 24.0 - 2.25) << st.dump();
  }
  const auto plain = run_pipetune({"simulate", "--schedule", "dualpipe-v", "--stages", "2",
                                   "--microbatches", "4", "--json", "--no-db"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_LT(j.at("iteration_time").get<double>(),
            nlohmann::json::parse(plain.out).at("iteration_time").get<double>());
  EXPECT_FALSE(nlohmann::json::parse(plain.out)["stages"][0].contains("overlap_hidden"));
}

TEST(SimulateCli, HumanOutputHasTableAndGantt) {
  const auto r = run_pipetune(
      {"simulate", "--schedule", "gpipe", "--stages", "2", "--microbatches", "3", "--width", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bubble%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 0 compute |F0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 compute |"), std::string::npos) << r.out;
}

TEST(SimulateCli, WritesChromeTrace) {
  const fs::path dir = temp_dir();
  const fs::path file = dir / "t.json";
  const auto r = run_pipetune({"simulate", "--schedule", "1f1b", "--stages", "3", "--microbatches",
                               "4", "--comm", "0.1", "--json", "--trace", file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(file.string()));
  int spans = 0, processes = 0, sends = 0;
  for (const auto& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "X") {
      ++spans;
      EXPECT_TRUE(e.at("args").contains("microbatch"));
    }
    if (ph == "b") ++sends;
    if (ph == "M" && e.at("name") == "process_name") ++processes;
  }
  EXPECT_EQ(spans, 3 * 4 * 2);  // F and BW of every micro-batch on every rank
  EXPECT_EQ(processes, 3);
  EXPECT_EQ(sends, 2 * 2 * 4);  // 2 links x (forward + backward) x 4 micro-batches
  fs::remove_all(dir);
}

TEST(SimulateCli, UnknownScheduleListsValidNames) {
  const fs::path dir = temp_dir();
  const fs::path file = dir / "never.json";
  const auto r = run_pipetune({"simulate", "--schedule", "2f2b", "--stages", "4", "--microbatches",
                               "8", "--trace", file.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("unknown schedule '2f2b'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("interleaved-1f1b"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
  EXPECT_FALSE(fs::exists(file));
  fs::remove_all(dir);
}

TEST(SimulateCli, BadNumbersAreInputErrors) {
  const std::vector<std::vector<std::string>> cases = {
      {"simulate", "--schedule", "1f1b", "--stages", "0", "--microbatches", "8"},
      {"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "-2"},
      {"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--cost-f", "-1"},
      {"simulate", "--schedule", "1f1b", "--stages", "four", "--microbatches", "8"},
      {"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--vocab", "v3"},
      {"simulate", "--schedule", "1f1b", "--stages", "4"},
      {"simulate", "--schedule", "zb-v", "--stages", "4", "--microbatches", "8", "--chunks", "3"},
      {"simulate", "--schedule", "gpipe", "--stages", "4", "--microbatches", "8", "--vocab",
       "vocab-1"},
      {"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--group-size",
       "4"},
      {"simulate", "--schedule", "dualpipe-v", "--stages", "4", "--microbatches", "3"},
      {"simulate", "--schedule", "interleaved-1f1b", "--stages", "4", "--microbatches", "6",
       "--chunks", "2"},
      {"simulate", "--schedule", "v-half", "--stages", "4", "--microbatches", "8", "--vocab",
       "interlaced"},
      {"simulate", "--frobnicate"},
      {"simulate", "--schedule", "dualpipe-v", "--stages", "2", "--microbatches", "4", "--comm-f",
       "1.5"},
      {"simulate", "--schedule", "dualpipe-v", "--stages", "2", "--microbatches", "4", "--comm-b",
       "-0.5"},
  };
  for (const auto& args : cases) {
    const auto r = run_pipetune(args);
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << cmd << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << cmd;
  }
}

// A trace whose folder does not exist is the input's error, found before the simulation.
TEST(SimulateCli, TraceToUnwritablePathFailsCleanly) {
  const auto r = run_pipetune({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches",
                               "2", "--trace", "/nonexistent-dir/t.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("/nonexistent-dir/t.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pipetune::testing
