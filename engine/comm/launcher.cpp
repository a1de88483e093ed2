#include "engine/comm/launcher.hpp"

#include <cstdlib>
#include <string>

namespace pipetune::comm {

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(name);
    if (v == nullptr) continue;
    try {
      return std::max(1, std::stoi(v));
    } catch (...) {
      return 1;  // set but unreadable: a launcher started us, size unknown
    }
  }
  if (std::getenv("SLURM_STEP_ID") != nullptr)  // inside srun (not just an sbatch script)
    if (const char* v = std::getenv("SLURM_NTASKS")) try {
        return std::max(1, std::stoi(v));
      } catch (...) {
        return 1;
      }
  return 0;
}

}  // namespace pipetune::comm
