// The sparse embedding gradient (EmbRace) from the command line: `train --sparse-embedding-grad`
// trains with the dense reduction's losses, the JSON says so, and a plan it does not combine with
// (ZeRO-1) is refused with exit 2 naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
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
  EXPECT_EQ(j.at("plan").value("sparse_embedding_gradient", false), !extra.empty());
  std::vector<double> out;
  for (const auto& s : j.at("steps")) out.push_back(s.at("loss").get<double>());
  return out;
}

TEST(SparseEmbeddingCli, TrainsAsTheDenseReduction) {
  const std::vector<double> dense = losses({});
  const std::vector<double> sparse = losses({"--sparse-embedding-grad"});
  ASSERT_EQ(dense.size(), 3u);
  ASSERT_EQ(sparse.size(), dense.size());
  for (std::size_t i = 0; i < dense.size(); ++i)
    EXPECT_NEAR(sparse[i], dense[i], 1e-5 * std::abs(dense[i])) << "step " << i + 1;
}

TEST(SparseEmbeddingCli, ZeroOneIsRefused) {
  const ProcessResult r = run_pipetune({"train", "--tp", "1", "--pp", "1", "--dp", "4", "--zero",
                                        "1", "--sparse-embedding-grad", "--steps", "1", "--no-db"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("sparse_embedding_gradient exchanges"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pipetune::testing
