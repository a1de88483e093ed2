// Routing statistics end to end: `train` of an MoE model stores tokens per expert per step,
// `report` shows them (each step and layer routes every token top_k times: a closed form), and
// `predict --moe-imbalance` / `--moe-imbalance-from` price the imbalance; bad values are refused
// with exit 2 naming the flag.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

double iteration_time(const ProcessResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out).at("iteration_time").get<double>();
}

TEST(MoeImbalanceCli, TrainStoresTheRoutingAndPredictPricesIt) {
  ScratchWorkspace s;
  // tiny-moe: 8 MoE layers of 4 experts, top-2; 2 replicas x 2 micro-batches of 2 x 32 tokens.
  const ProcessResult train =
      run_pipetune({"train", "--model", "tiny-moe", "--dp", "2", "--ep", "2", "--microbatches", "2",
                    "--micro-batch-size", "2", "--steps", "3", "--db", s.db, "--name", "moe"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const ProcessResult report = run_pipetune({"report", "moe", "--db", s.db, "--json"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const nlohmann::json load = nlohmann::json::parse(report.out).at("expert_load");
  EXPECT_EQ(load.at("experts"), 4);
  EXPECT_EQ(load.at("ep"), 2);
  ASSERT_EQ(load.at("steps").size(), 3u);
  for (const auto& step : load.at("steps")) {
    ASSERT_EQ(step.at("layers").size(), 8u);
    for (const auto& layer : step.at("layers")) {
      long long sum = 0;
      for (const auto& t : layer.at("tokens")) sum += t.get<long long>();
      EXPECT_EQ(sum, 2 * 2 * 2 * 32 * 2) << layer.dump();  // dp x m x b x seq x top_k
      EXPECT_GE(layer.at("rank_imbalance").get<double>(), 1.0);
    }
  }
  const ProcessResult text = run_pipetune({"report", "moe", "--db", s.db});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("expert load: 3 steps, 8 MoE layers of 4 experts"), std::string::npos)
      << text.out;

  const std::vector<std::string> plan = {
      "predict", "--model", "tiny-moe", "--hardware",     "h100-sxm", "--gpus",
      "4",       "--tp",    "1",        "--pp",           "1",        "--dp",
      "4",       "--ep",    "4",        "--global-batch", "16",       "--json"};
  const double even = iteration_time(run_pipetune(plan));
  std::vector<std::string> skewed = plan;
  skewed.insert(skewed.end(), {"--moe-imbalance", "1.5"});
  EXPECT_GT(iteration_time(run_pipetune(skewed)), even);
  std::vector<std::string> measured = plan;
  measured.insert(measured.end(), {"--moe-imbalance-from", "moe", "--db", s.db});
  EXPECT_GE(iteration_time(run_pipetune(measured)), even);
  // tune takes it too.
  const ProcessResult tune =
      run_pipetune({"tune", "--model", "tiny-moe", "--hardware", "h100-sxm", "--gpus", "4",
                    "--global-batch", "16", "--moe-imbalance-from", "moe", "--db", s.db, "--json"});
  EXPECT_EQ(tune.exit_code, 0) << tune.err;

  // Refusals: exit 2, one line naming what is wrong.
  for (const auto& [extra, want] :
       {std::pair{std::vector<std::string>{"--moe-imbalance", "0.5"}, "--moe-imbalance must be"},
        std::pair{std::vector<std::string>{"--moe-imbalance", "1.2", "--moe-imbalance-from", "moe",
                                           "--db", s.db},
                  "exclude each other"},
        std::pair{std::vector<std::string>{"--moe-imbalance-from", "nope", "--db", s.db},
                  "nope"}}) {
    expect_refused(with(plan, extra), want);
  }
  const ProcessResult other =
      run_pipetune({"predict", "--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--gpus", "8",
                    "--tp", "1", "--pp", "1", "--ep", "8", "--global-batch", "16",
                    "--moe-imbalance-from", "moe", "--db", s.db});
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("the run's MoE layers have 4 experts, the model 8"), std::string::npos)
      << other.err;
}

// A run file's moe_imbalance prices the same as the flag; a bad one is refused naming the key.
TEST(MoeImbalanceCli, ARunFilesImbalance) {
  ScratchWorkspace s;
  const auto write = [&](const std::string& name, const std::string& extra) {
    const std::string path = (s.dir / (name + ".toml")).string();
    std::ofstream(path) << extra
                        << "model = \"tiny-moe\"\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 4\n"
                           "[plan]\ntp = 1\npp = 1\ndp = 4\nep = 4\nmicro_batch_size = 2\n"
                           "microbatches = 2\n";
    return path;
  };
  const double even =
      iteration_time(run_pipetune({"predict", "--config", write("even", ""), "--json"}));
  const double skewed = iteration_time(
      run_pipetune({"predict", "--config", write("skewed", "moe_imbalance = 1.5\n"), "--json"}));
  const double flag = iteration_time(
      run_pipetune({"predict", "--config", write("flag", ""), "--moe-imbalance", "1.5", "--json"}));
  EXPECT_GT(skewed, even);
  EXPECT_DOUBLE_EQ(skewed, flag);
  const ProcessResult bad =
      run_pipetune({"predict", "--config", write("bad", "moe_imbalance = 0.5\n")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("moe_imbalance"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace pipetune::testing
