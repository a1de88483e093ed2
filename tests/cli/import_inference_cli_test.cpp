// What `import-nsys` infers and says it inferred: pipeline stages from
// point-to-point partners, through the binary. A three-stage GPipe run whose stages ran on
// devices 1, 2, 0 (so the device order is not the stage order), with a transfer after each op
// to the next (forward) or previous (backward) stage.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "db/import/nsys_pipeline_export.hpp"
#include "support/run_process.hpp"

namespace pipetune {
namespace {

TEST(ImportInferenceCli, StagesFromPointToPointPartnersAreSaidAndUsed) {
  const testing::ScratchWorkspace scratch;
  const std::string& db = scratch.db;
  const std::string file = (scratch.dir / "p.sqlite").string();
  const std::int64_t f = 1'000'000, b = 2'000'000;
  const int p = 3, m = 4;
  std::vector<db::testing::PipelineOp> ops;
  std::vector<db::testing::PipelineTransfer> transfers;
  for (int s = 0; s < p; ++s)
    for (int mb = 0; mb < m; ++mb) {
      const std::int64_t fs_ = (s + mb) * f;  // GPipe: forwards in a staircase
      ops.push_back({s, true, mb, fs_, fs_ + f});
      if (s + 1 < p) transfers.push_back({s, s + 1, fs_ + f, fs_ + f + 10'000 + 100 * s});
      const std::int64_t bs = (m + p - 1) * f + (p - 1 - s + mb) * b;  // backwards the other way
      ops.push_back({s, false, mb, bs, bs + b});
      if (s > 0) transfers.push_back({s, s - 1, bs + b, bs + b + 20'000 + 100 * s});
    }
  db::testing::write_pipeline_export(file, ops, transfers, {1, 2, 0});
  const testing::ProcessResult imported = testing::run_pipetune({"import-nsys", file, "--db", db});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.err.find("pipeline stages inferred from point-to-point partners: ranks 1-2-0"),
            std::string::npos)
      << imported.err;
  const testing::ProcessResult report =
      testing::run_pipetune({"report", "1", "--json", "--db", db});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const auto j = nlohmann::json::parse(report.out);
  EXPECT_TRUE(j["pipeline"].get<bool>());
  ASSERT_EQ(j["stages"].size(), 3u) << j.dump(2);
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(j["stages"][s]["stage"], s);
    // GPipe: stage s waits s forwards before its first op.
    EXPECT_DOUBLE_EQ(j["stages"][s]["warmup_bubble"].get<double>(), s * 1e-3) << s;
  }
}

}  // namespace
}  // namespace pipetune
