// The MPI communicator against the thread communicator on this machine:
// all-reduce latency and bus bandwidth from 4 KiB to 64 MiB, and point-to-point latency (half a
// 1-float round trip), through the same Communicator interface the engine uses.
//
//   mpirun -np 2 build/tests/mpi_comm_bench     # ranks as processes (MpiCommunicator)
//   build/tests/mpi_comm_bench --threads 2      # ranks as threads of one process
//
// Bus bandwidth follows nccl-tests: bytes / time * 2 (n - 1) / n. Each size is timed on rank 0
// between two barriers over enough repeats to last about 0.2 s; the best of 3 rounds is shown.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/comm/thread_cluster.hpp"
#include "engine/mpi/mpi_communicator.hpp"
#include "engine/mpi/mpi_session.hpp"

namespace {

using pipetune::comm::Communicator;
using pipetune::comm::ProcessGroup;
using Clock = std::chrono::steady_clock;

struct Row {
  std::size_t bytes = 0;
  double seconds = 0.0;  // per all-reduce
};

// Seconds per call of fn, on every rank (rank 0's figure is the one printed).
template <class Fn>
double time_calls(Communicator& c, const ProcessGroup& world, int calls, Fn&& fn) {
  c.barrier(world);
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) fn();
  c.barrier(world);
  return std::chrono::duration<double>(Clock::now() - start).count() / calls;
}

// Everything measured on one communicator; rank 0's results are returned.
void measure(Communicator& c, std::vector<Row>& rows, double& p2p_latency) {
  const ProcessGroup world = pipetune::comm::make_world_group(c.world());
  rows.clear();
  for (std::size_t bytes = 4u << 10; bytes <= (64u << 20); bytes *= 4) {
    std::vector<float> data(bytes / sizeof(float), 0.0f);  // zeros stay zeros over the repeats
    // Calls for ~0.2 s from one trial call; every rank must agree, so rank 0's count is sent.
    const double once = time_calls(c, world, 1, [&] { c.all_reduce(world, data); });
    std::vector<float> n{static_cast<float>(std::max(1.0, std::min(2000.0, 0.2 / once)))};
    c.broadcast(world, n, 0);
    double best = 1e30;
    for (int round = 0; round < 3; ++round)
      best = std::min(
          best, time_calls(c, world, static_cast<int>(n[0]), [&] { c.all_reduce(world, data); }));
    rows.push_back({bytes, best});
  }
  // Point to point between ranks 0 and 1.
  std::vector<float> one(1, 0.0f);
  const int calls = 2000;
  const double round_trip = time_calls(c, world, calls, [&] {
    if (c.rank() == 0) {
      c.send(1, 1, one);
      c.recv(1, 2, one);
    } else if (c.rank() == 1) {
      c.recv(0, 1, one);
      c.send(0, 2, one);
    }
  });
  p2p_latency = round_trip / 2.0;
}

void print(const char* what, int ranks, const std::vector<Row>& rows, double latency) {
  std::printf("%s, %d ranks\n", what, ranks);
  std::printf("%12s %14s %14s\n", "bytes", "time (us)", "busbw (GB/s)");
  const double factor = 2.0 * (ranks - 1) / ranks;
  for (const Row& r : rows)
    std::printf("%12zu %14.2f %14.3f\n", r.bytes, r.seconds * 1e6,
                static_cast<double>(r.bytes) / r.seconds * factor / 1e9);
  std::printf("point-to-point latency (1 float, half a round trip): %.2f us\n\n", latency * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (pipetune::mpi::launched_by_mpi()) {
      pipetune::mpi::MpiSession session(&argc, &argv);
      if (session.size() < 2) {
        std::fprintf(stderr, "mpi_comm_bench: needs at least 2 processes\n");
        return 2;
      }
      std::vector<Row> rows;
      double latency = 0;
      {
        pipetune::mpi::MpiCommunicator c({});
        measure(c, rows, latency);
      }
      if (session.rank() == 0) print("MPI communicator (processes)", session.size(), rows, latency);
      return 0;
    }
    int threads = 2;
    for (int i = 1; i + 1 < argc; ++i)
      if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (threads < 2) {
      std::fprintf(stderr, "mpi_comm_bench: --threads must be at least 2\n");
      return 2;
    }
    std::vector<Row> rows;
    double latency = 0;
    pipetune::comm::run_threads(threads, [&](Communicator& c) {
      std::vector<Row> mine;
      double l = 0;
      measure(c, mine, l);
      if (c.rank() == 0) rows = mine, latency = l;
    });
    print("thread communicator (threads)", threads, rows, latency);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_comm_bench: %s\n", e.what());
    return 1;
  }
}
