// `train --fault`: a rank that throws, hangs or stalls at a given step. Each failure ends the run
// with one named error, within the watchdog, keeps what was committed (the run is stored as
// failed), and a checkpoint written before the fault resumes to the uninterrupted losses.
#include <gtest/gtest.h>

#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

using Scratch = ScratchWorkspace;

nlohmann::json runs_of(const std::string& db) {
  const ProcessResult r = run_pipetune({"runs", "--db", db, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(FaultInjection, AThrowingRankEndsTheRunNamingRankStepAndOp) {
  Scratch s;
  const ProcessResult r =
      run_pipetune({"train", "--steps", "4", "--fault", "rank=3,step=2,kind=throw", "--db", s.db});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("injected fault (--fault): rank 3, step 2, before F of micro-batch 0"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("step    1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step    2"), std::string::npos) << r.out;
  const auto runs = runs_of(s.db);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].at("status"), "failed");
  EXPECT_GT(runs[0].at("spans").get<std::int64_t>(), 0) << "step 1's spans were lost";
}

TEST(FaultInjection, AHangingRankIsCaughtByTheWatchdog) {
  Scratch s;
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult r =
      run_pipetune({"train", "--steps", "4", "--fault", "rank=1,step=2,kind=hang", "--watchdog",
                    "2", "--db", s.db});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("watchdog"), std::string::npos) << r.err;
  // It names the hung rank, its step and the op it never finished.
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("at step 2, F of micro-batch 0"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 30.0) << "the 2 s watchdog took " << seconds << " s to end the run";
  EXPECT_EQ(runs_of(s.db)[0].at("status"), "failed");
}

TEST(FaultInjection, AStallingRankOnlySlowsItsStep) {
  const ProcessResult r = run_pipetune({"train", "--steps", "3", "--json", "--no-db", "--fault",
                                        "rank=0,step=2,kind=slow,seconds=0.4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("steps").size(), 3u);
  EXPECT_GE(j.at("steps")[1].at("seconds").get<double>(), 0.4);
}

TEST(FaultInjection, ACheckpointBeforeTheFaultResumesToTheUninterruptedLosses) {
  Scratch s;
  const std::string ck = (s.dir / "ck").string();
  const ProcessResult full = run_pipetune({"train", "--steps", "4", "--json", "--no-db"});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const ProcessResult failed =
      run_pipetune({"train", "--steps", "4", "--checkpoint", ck, "--checkpoint-every", "2",
                    "--fault", "rank=5,step=3,kind=throw", "--no-db"});
  ASSERT_EQ(failed.exit_code, 1) << failed.err;
  const ProcessResult resumed =
      run_pipetune({"train", "--steps", "4", "--resume", ck, "--json", "--no-db"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto want = nlohmann::json::parse(full.out).at("losses");
  const auto got = nlohmann::json::parse(resumed.out).at("losses");
  ASSERT_EQ(got.size(), 2u);  // steps 3 and 4
  EXPECT_EQ(got[0], want[2]);
  EXPECT_EQ(got[1], want[3]);
}

TEST(FaultInjection, BadFaultSpecificationsAreNamed) {
  for (const auto& [spec, message] : std::vector<std::pair<std::string, std::string>>{
           {"rank=1,step=2", "--fault: needs rank=R,step=S,kind=throw|hang|slow"},
           {"rank=1,step=2,kind=explode", "kind 'explode' is none of throw, hang, slow"},
           {"rank=99,step=1,kind=throw", "rank 99 is not a rank of the 8-rank plan"},
           {"rank=1,step=0,kind=throw", "step must be at least 1"},
           {"rank=1,step=1,kind=throw,seconds=2", "seconds applies to kind=slow only"}}) {
    const ProcessResult r = run_pipetune({"train", "--steps", "1", "--no-db", "--fault", spec});
    EXPECT_EQ(r.exit_code, 2) << spec << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << spec << ": " << r.err;
  }
}

// The engine's error is about the field "fault" and names no flag; the CLI words it with its flag.
TEST(FaultInjection, AMalformedFaultIsNamedByItsFlag) {
  const ProcessResult r =
      run_pipetune({"train", "--steps", "1", "--no-db", "--fault", "rank=x,step=1,kind=throw"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "pipetune: error: --fault: rank must be a whole number, not 'x'\n");
}

}  // namespace
}  // namespace pipetune::testing
