// The sparse embedding gradient (EmbRace) from the command line: `train --sparse-embedding-grad`
// trains with the dense reduction's losses, without ZeRO and under ZeRO-1 and 2 (the rows sent to
// their owners), and the JSON says so. `tune` tries it beside plans of every ZeRO stage, and
// `--no-sparse-embedding` leaves it out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

std::vector<double> losses(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"train", "--tp",    "1", "--pp",    "1",     "--dp",
                                   "4",     "--steps", "3", "--no-db", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const ProcessResult r = run_pipetune(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const bool sparse =
      std::find(extra.begin(), extra.end(), "--sparse-embedding-grad") != extra.end();
  EXPECT_EQ(j.at("plan").value("sparse_embedding_gradient", false), sparse);
  std::vector<double> out;
  for (const auto& s : j.at("steps")) out.push_back(s.at("loss").get<double>());
  return out;
}

TEST(SparseEmbeddingCli, TrainsAsTheDenseReduction) {
  for (const char* zero : {"0", "1", "2"}) {
    SCOPED_TRACE(std::string("--zero ") + zero);
    const std::vector<double> dense = losses({"--zero", zero});
    const std::vector<double> sparse = losses({"--zero", zero, "--sparse-embedding-grad"});
    ASSERT_EQ(dense.size(), 3u);
    ASSERT_EQ(sparse.size(), dense.size());
    for (std::size_t i = 0; i < dense.size(); ++i)
      EXPECT_NEAR(sparse[i], dense[i], 1e-5 * std::abs(dense[i])) << "step " << i + 1;
  }
}

// The sparse plans among tune's results (every plan ranked), and the ZeRO stages they have.
std::set<int> sparse_zero_stages(const std::vector<std::string>& extra, std::size_t& results) {
  std::vector<std::string> args = {"tune",     "--model",     "vp-4b-256k", "--hardware",
                                   "h100-sxm", "--gpus",      "16",         "--global-batch",
                                   "16",       "--schedules", "1f1b",       "--keep",
                                   "0",        "--top",       "100000",     "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const ProcessResult r = run_pipetune(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::set<int> zero;
  results = j.at("results").size();
  for (const auto& s : j.at("results"))
    if (s.at("plan").value("sparse_embedding_gradient", false))
      zero.insert(s.at("plan").at("zero_stage").get<int>());
  return zero;
}

TEST(SparseEmbeddingCli, TuneTriesItUnderEveryZeroStageUnlessTurnedOff) {
  std::size_t with = 0, without = 0;
  EXPECT_EQ(sparse_zero_stages({}, with), (std::set<int>{0, 1, 2, 3}));
  EXPECT_TRUE(sparse_zero_stages({"--no-sparse-embedding"}, without).empty());
  EXPECT_LT(without, with);
}

}  // namespace
}  // namespace pipetune::testing
