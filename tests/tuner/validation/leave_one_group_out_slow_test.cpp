// Out-of-sample validation of the shipped efficiency tables: the A100 and H100
// [efficiency] tables were fitted to the same published rows that published_runs_test checks,
// so its errors are in-sample. Here each source group is held out in turn: the table is fitted
// by the shipped recipe (efficiency_fit.hpp) on the other groups of that hardware, and the
// held-out group is predicted with it. The test prints both errors per group (the README's
// validation table) and asserts the held-out error stays under 35% per group; a recipe or
// cost-model change that overfits the published rows fails here even when the in-sample check
// still passes.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "support/required_data.hpp"
#include "tests/tuner/validation/efficiency_fit.hpp"

namespace pipetune::validation {
namespace {

struct HeldOut {
  std::string hardware;
  std::string group;
  int rows = 0;
  double in_sample = 0.0;      // shipped table, fitted on every group
  double out_of_sample = 0.0;  // table fitted without this group
};

std::vector<PublishedRun> of_group(const std::vector<PublishedRun>& runs, const std::string& group,
                                   bool keep) {
  std::vector<PublishedRun> out;
  for (const PublishedRun& r : runs)
    if ((r.group == group) == keep) out.push_back(r);
  return out;
}

TEST(LeaveOneGroupOut, HeldOutGroupsArePredictedByTablesFittedWithoutThem) {
  const auto path = test::shared_path("reference/published_runs_dev.csv");
  PIPETUNE_REQUIRE_SHARED(path);
  auto by_hardware = runs_by_hardware(path.string());
  const std::vector<PublishedRun>& a100 = by_hardware["a100-80gb"];
  const std::vector<PublishedRun>& h100 = by_hardware["h100-sxm"];
  ASSERT_FALSE(a100.empty());
  ASSERT_FALSE(h100.empty());
  // The H100 recipe starts from an A100 fit over every A100 group (no H100 row enters it).
  const spec::HardwareEfficiency a100_all =
      fit_efficiency("a100-80gb (all groups)", a100, spec::HardwareEfficiency{},
                     all_efficiency_parameters(), false);

  std::vector<HeldOut> table;
  for (const auto& [hardware, runs] : by_hardware) {
    std::map<std::string, int> groups;
    for (const PublishedRun& r : runs) ++groups[r.group];
    if (groups.size() < 2) continue;  // nothing to fit on without it
    for (const auto& [group, rows] : groups) {
      const std::vector<PublishedRun> train = of_group(runs, group, false);
      const std::vector<PublishedRun> test = of_group(runs, group, true);
      const spec::HardwareEfficiency fitted =
          hardware == "h100-sxm"
              ? fit_efficiency(hardware + " without " + group, train,
                               h100_start_from_a100(a100_all), h100_fitted_parameters(), false)
              : fit_efficiency(hardware + " without " + group, train, spec::HardwareEfficiency{},
                               all_efficiency_parameters(), false);
      table.push_back(HeldOut{hardware, group, rows, mape(test), mape(test, &fitted)});
    }
  }
  ASSERT_GE(table.size(), 4u) << "the A100 and H100 rows come from at least two groups each";

  std::printf("\n%-10s %-46s %5s %10s %14s\n", "hardware", "held-out group", "rows", "in-sample",
              "out-of-sample");
  for (const HeldOut& h : table)
    std::printf("%-10s %-46s %5d %9.1f%% %13.1f%%\n", h.hardware.c_str(),
                h.group.substr(0, 46).c_str(), h.rows, 100.0 * h.in_sample,
                100.0 * h.out_of_sample);
  for (const HeldOut& h : table)
    EXPECT_LT(h.out_of_sample, 0.35)
        << h.hardware << " " << h.group << ": held-out MAPE " << 100.0 * h.out_of_sample << "%";
}

}  // namespace
}  // namespace pipetune::validation
