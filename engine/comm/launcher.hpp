// What an MPI launcher (mpirun, srun) tells a process through its environment, read without
// initialising MPI, so a build without MPI can still tell that it was started by one.
#pragma once

namespace pipetune::comm {

// Processes the launcher started (Open MPI's OMPI_COMM_WORLD_SIZE, PMI_SIZE of PMI-1/2 and
// Slurm, Slurm's SLURM_NTASKS under srun); 0 when no launcher started this process.
int launcher_world_size();

}  // namespace pipetune::comm
