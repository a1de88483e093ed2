// How the [efficiency] tables of presets/hardware/a100-80gb.toml and h100-sxm.toml were obtained:
// tuner/calibration fitted over the published runs of each hardware type (one set of
// efficiencies per type, each source group weighted equally). Disabled: it is the recipe, not a
// check; run it with
//   tuner_fast_tests --gtest_also_run_disabled_tests --gtest_filter='*FitPresets*'
// The out-of-sample errors of the same recipe are leave_one_group_out_slow_test.cpp's.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "tests/tuner/validation/efficiency_fit.hpp"

namespace pipetune::validation {
namespace {

void print_table(const std::string& hardware, spec::HardwareEfficiency eff) {
  std::printf("[efficiency] for %s\n", hardware.c_str());
  for (tuner::EfficiencyParameter p : tuner::kAllEfficiencyParameters)
    std::printf("%s = %.4g\n", tuner::efficiency_parameter_name(p), efficiency_field(eff, p));
}

TEST(FitPresets, DISABLED_EfficiencyFromPublishedRuns) {
  const auto path = std::filesystem::path(PIPETUNE_SOURCE_DIR).parent_path() / "shared" /
                    "reference" / "published_runs_dev.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto by_hardware = runs_by_hardware(path.string());
  // A100: four source groups (SC21, BLOOM, torchtitan, Vocabulary Parallelism) constrain all
  // six parameters, from the generic defaults (Calculon's tables).
  const spec::HardwareEfficiency a =
      fit_efficiency("a100-80gb", by_hardware["a100-80gb"], spec::HardwareEfficiency{},
                     all_efficiency_parameters());
  print_table("a100-80gb", a);
  const spec::HardwareEfficiency h = fit_efficiency(
      "h100-sxm", by_hardware["h100-sxm"], h100_start_from_a100(a), h100_fitted_parameters());
  print_table("h100-sxm", h);
}

}  // namespace
}  // namespace pipetune::validation
