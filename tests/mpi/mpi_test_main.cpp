// main() of the MPI tests: every process of `mpirun -np N mpi_tests` runs every test; rank 0
// prints, and the exit code is the worst over all processes, so ctest sees one result.
#include <gtest/gtest.h>
#include <mpi.h>

#include "engine/mpi/mpi_session.hpp"

int main(int argc, char** argv) {
  pipetune::mpi::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (session.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed != 0) std::fprintf(stderr, "mpi_tests: rank %d failed\n", session.rank());
  return any;
}
