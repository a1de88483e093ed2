// What mpirun and srun leave in a process's environment, as launcher_world_size() reads it: the
// variables are those Open MPI 4.1 and Slurm (srun, with or without --mpi=pmix) document.
#include "engine/comm/launcher.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

namespace pipetune::comm {
namespace {

using Vars = std::map<std::string, std::string>;

// Sets the launcher variables for one scope, clearing every other one the reader knows.
class LauncherEnvironment {
 public:
  explicit LauncherEnvironment(const Vars& vars) {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~LauncherEnvironment() {
    for (const char* name : kNames) ::unsetenv(name);
  }

 private:
  static constexpr const char* kNames[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                           "SLURM_STEP_ID", "SLURM_NTASKS"};
};

TEST(Launcher, NoLauncherIsZero) {
  LauncherEnvironment env(Vars{});
  EXPECT_EQ(launcher_world_size(), 0);
}

TEST(Launcher, MpirunSetsTheWorldSize) {
  LauncherEnvironment env(Vars{{"OMPI_COMM_WORLD_SIZE", "8"}});
  EXPECT_EQ(launcher_world_size(), 8);
}

TEST(Launcher, SrunStepWithPmiIsItsTaskCount) {
  LauncherEnvironment pmi(Vars{{"PMI_SIZE", "16"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "16"}});
  EXPECT_EQ(launcher_world_size(), 16);
}

TEST(Launcher, SrunStepWithoutPmiVariablesIsItsTaskCount) {
  LauncherEnvironment env(Vars{{"SLURM_STEP_ID", "3"}, {"SLURM_NTASKS", "4"}});
  EXPECT_EQ(launcher_world_size(), 4);
}

TEST(Launcher, AnSbatchScriptOutsideSrunIsNoLauncher) {
  // sbatch sets SLURM_NTASKS for the batch script itself, which is one process.
  LauncherEnvironment env(Vars{{"SLURM_NTASKS", "4"}});
  EXPECT_EQ(launcher_world_size(), 0);
}

}  // namespace
}  // namespace pipetune::comm
