// Hostile files and descriptions given to `import-trace`, through the
// binary: a decompression bomb and a profile of more ranks than an import holds are refused with
// exit 2 and one line naming the limit, early and with nothing stored; a plan that predict and
// train refuse, or one the profile contradicts, is refused as well.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/required_data.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

// One complete event (an F span) of process `pid` at `ts` µs.
std::string one_span_event(long long pid, long long ts) {
  return "{\"ph\":\"X\",\"name\":\"op\",\"cat\":\"F\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":1,\"ts\":" + std::to_string(ts) + ",\"dur\":5}";
}

// 13 MB of gzip inflating to 3 GB ended in std::bad_alloc after 11 s. This bomb inflates 171:1
// (72 MiB of repeated events in 0.4 MB): it is refused once 64 MiB are inflated, naming the
// ratio limit; nothing is stored. Before the limit it was imported whole (1.5 million spans).
TEST(HostileImport, GzipBombIsRefusedWhileInflating) {
  ScratchWorkspace w;
  const std::string bomb = (w.dir / "bomb.json.gz").string();
  {
    gzFile gz = gzopen(bomb.c_str(), "wb1");
    ASSERT_NE(gz, nullptr);
    const std::string first = "[" + one_span_event(1, 0), event = "," + one_span_event(1, 0);
    std::string block;
    while (block.size() < (1u << 20)) block += event;
    ASSERT_EQ(gzwrite(gz, first.data(), static_cast<unsigned>(first.size())),
              static_cast<int>(first.size()));
    for (int mib = 0; mib < 72; ++mib)
      ASSERT_EQ(gzwrite(gz, block.data(), static_cast<unsigned>(block.size())),
                static_cast<int>(block.size()));
    ASSERT_EQ(gzwrite(gz, "]", 1), 1);
    ASSERT_EQ(gzclose(gz), Z_OK);
  }
  EXPECT_LT(fs::file_size(bomb), 1u << 20);
  expect_refused({"import-trace", bomb, "--db", w.db},
                 {"bomb.json.gz: gzip data inflating more than 100:1",
                  "refused as a decompression bomb (import limit: 100:1 past 64 MiB)"});
  EXPECT_FALSE(fs::exists(w.db));
}

// One span per process id: each process is a rank. At 256k ranks the import took 46 s and ended in
// std::bad_alloc (a lane search per new lane, 10 KB per lane in the store); a profile of more
// ranks than an import holds (65536) is refused naming the limit, and one just under it imports.
TEST(HostileImport, RanksBeyondTheLimitAreRefused) {
  ScratchWorkspace w;
  const auto write_ranks = [&](const std::string& name, long long ranks) {
    const std::string path = (w.dir / name).string();
    std::ofstream out(path);
    out << "[";
    for (long long p = 0; p < ranks; ++p) out << (p > 0 ? "," : "") << one_span_event(p, p);
    out << "]";
    return path;
  };
  expect_refused({"import-trace", write_ranks("over.json", 65537), "--db", w.db},
                 {"over.json: more than 65536 ranks: beyond the import limit"});
  EXPECT_FALSE(fs::exists(w.db));

  const ProcessResult ok =
      run_pipetune({"import-trace", write_ranks("under.json", 4096), "--db", w.db});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("4096 ranks, 4096 spans"), std::string::npos) << ok.out;
}

// A plan every other command refuses is not stored with a profile: 1f1b has one layer group per
// stage (it was stored as "1f1b v=3"), and a profile numbering its micro-batches 0..3 per step
// was run with more than 3 (it was stored with --microbatches 3), nor with more than 4.
TEST(HostileImport, PlansAreValidatedAsPredictAndTrainDo) {
  const fs::path pippy =
      test::shared_path("data/real_traces/pippy-4stage-toy/pipe_visualized.json");
  PIPETUNE_REQUIRE_SHARED(pippy);
  ScratchWorkspace w;
  const std::vector<std::string> base = {"import-trace", pippy.string(),
                                         "--db",         w.db,
                                         "--hardware",   "h100-sxm",
                                         "--tp",         "1",
                                         "--pp",         "4",
                                         "--dp",         "1"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  expect_refused(
      with({"--model", "llama3-8b", "--schedule", "1f1b", "--chunks", "3", "--microbatches", "4"}),
      {"1f1b supports chunks=1 only, got chunks=3"});
  expect_refused(with({"--model", "tiny", "--schedule", "gpipe", "--microbatches", "3"}),
                 {"the profile has micro-batch 3 (numbered from 0, on rank 0), the plan's "
                  "micro-batches per step = 3"});
  // Without step boundaries the profile is one step: 4 micro-batches are not the plan's 8 (it
  // was stored, and its one "iteration" was half of one).
  expect_refused(with({"--model", "tiny", "--schedule", "gpipe", "--microbatches", "8"}),
                 {"the profile (no step boundaries: one step) shows 4 micro-batch(es) on rank 0, "
                  "the plan's micro-batches per step = 8"});
  EXPECT_FALSE(fs::exists(w.db));
  // The plan it ran: 4 stages, 4 micro-batches.
  const ProcessResult ok =
      run_pipetune(with({"--model", "tiny", "--schedule", "gpipe", "--microbatches", "4"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

}  // namespace
}  // namespace pipetune::testing
