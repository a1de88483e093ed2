// Measured embedding rows end to end: `train` on data that cycles through eight tokens stores the
// rows each step touched, `report` gives them against the uniform estimate (a closed form:
// eight rows, against 512 (1 - (1 - 1/512)^128) for a replica's 128 tokens of a 512-token
// vocabulary), and `predict --embedding-rows-from` prices the sparse gradient's rows at that
// factor, as `--embedding-rows` given the same factor does, from flags and from a run file; bad
// values are refused with exit 2 naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

// An llm.c GPT-2 shard (a 256-int32 header: magic, version, token count; then uint16 tokens) of
// `count` tokens cycling through `cycle`.
void write_cycle_shard(const std::string& path, const std::vector<std::uint16_t>& cycle,
                       std::int32_t count) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()),
            static_cast<std::streamsize>(header.size() * sizeof(std::int32_t)));
  for (std::int32_t i = 0; i < count; ++i)
    out.write(reinterpret_cast<const char*>(&cycle[static_cast<std::size_t>(i) % cycle.size()]),
              sizeof(std::uint16_t));
}

double iteration_time(const ProcessResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out).at("iteration_time").get<double>();
}

std::string exact(double v) {
  char s[64];
  std::snprintf(s, sizeof s, "%.17g", v);
  return s;
}

TEST(EmbeddingRowsCli, TrainStoresTheRowsReportGivesTheFactorAndPredictPricesIt) {
  ScratchWorkspace s;
  const std::string shard = (s.dir / "cycle.bin").string();
  write_cycle_shard(shard, {3, 4, 300, 5, 6, 301, 7, 302}, 1024);
  // tiny: 2 replicas x 2 micro-batches of 2 x 32 tokens, each sequence holding all eight.
  const ProcessResult train = run_pipetune(
      {"train", "--tp", "1", "--pp", "1", "--dp", "2", "--microbatches", "2", "--micro-batch-size",
       "2", "--steps", "3", "--data", shard, "--db", s.db, "--name", "cycle"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const ProcessResult report = run_pipetune({"report", "cycle", "--db", s.db, "--json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const nlohmann::json rows = nlohmann::json::parse(report.out).at("embedding_rows");
  const double uniform = 512.0 * (1.0 - std::pow(1.0 - 1.0 / 512.0, 128.0));
  EXPECT_EQ(rows.at("samples"), 2 * 3);  // 2 replicas x 3 steps
  EXPECT_DOUBLE_EQ(rows.at("touched_per_step").get<double>(), 8.0);
  EXPECT_NEAR(rows.at("uniform_per_step").get<double>(), uniform, 1e-9 * uniform);
  const double factor = rows.at("factor").get<double>();
  EXPECT_NEAR(factor, 8.0 / uniform, 1e-12);
  const ProcessResult text = run_pipetune({"report", "cycle", "--db", s.db});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("embedding rows: 8.0 touched a step"), std::string::npos) << text.out;

  // The 256k-vocabulary model on two nodes of 8 H100s at global batch 16 (the DP reduction
  // across nodes is not hidden): a replica's 2048 tokens touch few rows, at the measured factor
  // fewer still.
  const std::vector<std::string> plan = {
      "predict",  "--model",        "vp-4b-256k", "--hardware",
      "h100-sxm", "--gpus",         "16",         "--tp",
      "1",        "--pp",           "1",          "--dp",
      "16",       "--global-batch", "16",         "--sparse-embedding-grad",
      "--json"};
  const double uniform_time = iteration_time(run_pipetune(plan));
  std::vector<std::string> from_run = plan;
  from_run.insert(from_run.end(), {"--embedding-rows-from", "cycle", "--db", s.db});
  const double measured = iteration_time(run_pipetune(from_run));
  std::vector<std::string> given = plan;
  given.insert(given.end(), {"--embedding-rows", exact(factor)});
  EXPECT_LT(measured, uniform_time);
  EXPECT_DOUBLE_EQ(measured, iteration_time(run_pipetune(given)));
  // A run file's prediction takes it too.
  const std::string run_file = (s.dir / "sparse.toml").string();
  std::ofstream(run_file) << "model = \"vp-4b-256k\"\n[cluster]\nhardware = \"h100-sxm\"\n"
                             "devices = 16\n[plan]\ntp = 1\npp = 1\ndp = 16\nglobal_batch = 16\n"
                             "sparse_embedding_gradient = true\n";
  const double file_uniform =
      iteration_time(run_pipetune({"predict", "--config", run_file, "--json"}));
  const double file_measured = iteration_time(run_pipetune(
      {"predict", "--config", run_file, "--embedding-rows-from", "cycle", "--db", s.db, "--json"}));
  EXPECT_LT(file_measured, file_uniform);
  // tune takes it too.
  const ProcessResult tune = run_pipetune(
      {"tune", "--model", "vp-4b-256k", "--hardware", "h100-sxm", "--gpus", "8", "--global-batch",
       "8", "--schedules", "1f1b", "--embedding-rows-from", "cycle", "--db", s.db, "--json"});
  EXPECT_EQ(tune.exit_code, 0) << tune.err;

  // Refusals: exit 2, one line naming what is wrong.
  for (const auto& [extra, want] :
       {std::pair{std::vector<std::string>{"--embedding-rows", "0"},
                  "--embedding-rows must be a finite number above 0"},
        std::pair{std::vector<std::string>{"--embedding-rows", "0.5", "--embedding-rows-from",
                                           "cycle", "--db", s.db},
                  "exclude each other"},
        std::pair{std::vector<std::string>{"--embedding-rows-from", "nope", "--db", s.db},
                  "nope"}}) {
    expect_refused(with(plan, extra), want);
  }
}

}  // namespace
}  // namespace pipetune::testing
