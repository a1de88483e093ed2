// Argument checks of the collectives that every communicator over separate buffers makes the
// same way (the MPI ones: one rank per process and hybrid), with the messages users see.
// Each throws CommMismatch (or std::invalid_argument for a root outside the group).
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/comm_errors.hpp"
#include "engine/comm/process_group.hpp"

namespace pipetune::comm {

// reduce_scatter: input = group size x output.
inline void check_reduce_scatter(int rank, const ProcessGroup& group, std::size_t input,
                                 std::size_t output) {
  if (input != output * static_cast<std::size_t>(group.size()))
    throw CommMismatch(rank, "reduce_scatter",
                       "reduce_scatter on " + group.describe() + ": input of " +
                           std::to_string(input) + " floats is not " +
                           std::to_string(group.size()) + " x output " + std::to_string(output));
}

// reduce_scatter_v: a count per member, summing to the input; the output holds the caller's
// count. Returns where each member's chunk starts in the input.
inline std::vector<std::size_t> check_reduce_scatter_v(int rank, const ProcessGroup& group,
                                                       std::size_t input,
                                                       std::span<const std::size_t> counts,
                                                       std::size_t output) {
  const auto p = static_cast<std::size_t>(group.size());
  const std::string what = "reduce_scatter_v on " + group.describe();
  if (counts.size() != p)
    throw CommMismatch(rank, "reduce_scatter_v",
                       what + ": counts for " + std::to_string(counts.size()) + " members");
  std::vector<std::size_t> at(p);
  std::size_t sum = 0;
  for (std::size_t j = 0; j < p; ++j) {
    at[j] = sum;
    sum += counts[j];
  }
  const int me = group.index_of(rank);
  if (sum != input || me < 0 || counts[static_cast<std::size_t>(me)] != output)
    throw CommMismatch(
        rank, "reduce_scatter_v",
        what + ": counts sum to " + std::to_string(sum) + " floats and give rank " +
            std::to_string(rank) + " " +
            (me < 0 ? std::string("none") : std::to_string(counts[static_cast<std::size_t>(me)])) +
            "; buffers hold " + std::to_string(input) + " / " + std::to_string(output));
  return at;
}

// all_gather: output = group size x input.
inline void check_all_gather(int rank, const ProcessGroup& group, std::size_t input,
                             std::size_t output) {
  if (output != input * static_cast<std::size_t>(group.size()))
    throw CommMismatch(rank, "all_gather",
                       "all_gather on " + group.describe() + ": output of " +
                           std::to_string(output) + " floats is not " +
                           std::to_string(group.size()) + " x input " + std::to_string(input));
}

// all_to_all: equal buffers of group size x chunk.
inline void check_all_to_all(int rank, const ProcessGroup& group, std::size_t input,
                             std::size_t output) {
  if (input % static_cast<std::size_t>(group.size()) != 0 || output != input)
    throw CommMismatch(rank, "all_to_all",
                       "all_to_all on " + group.describe() + ": input of " + std::to_string(input) +
                           " and output of " + std::to_string(output) + " floats");
}

// all_to_all_v: one count per member, summing to the buffers' sizes. Returns the offsets of
// each member's send and receive slice.
struct AllToAllOffsets {
  std::vector<std::size_t> send, recv;
};
inline AllToAllOffsets check_all_to_all_v(int rank, const ProcessGroup& group, std::size_t input,
                                          std::span<const std::size_t> send, std::size_t output,
                                          std::span<const std::size_t> recv) {
  const auto p = static_cast<std::size_t>(group.size());
  if (send.size() != p || recv.size() != p)
    throw CommMismatch(rank, "all_to_all_v",
                       "all_to_all_v on " + group.describe() + ": counts for " +
                           std::to_string(send.size()) + " and " + std::to_string(recv.size()) +
                           " members");
  AllToAllOffsets at{std::vector<std::size_t>(p), std::vector<std::size_t>(p)};
  std::size_t so = 0, ro = 0;
  for (std::size_t j = 0; j < p; ++j) {
    at.send[j] = so;
    at.recv[j] = ro;
    so += send[j];
    ro += recv[j];
  }
  if (so != input || ro != output)
    throw CommMismatch(rank, "all_to_all_v",
                       "all_to_all_v on " + group.describe() + ": counts sum to " +
                           std::to_string(so) + " / " + std::to_string(ro) +
                           " floats, buffers hold " + std::to_string(input) + " / " +
                           std::to_string(output));
  return at;
}

// broadcast: the root is a group rank.
inline void check_broadcast_root(const ProcessGroup& group, int root) {
  if (root < 0 || root >= group.size())
    throw std::invalid_argument("broadcast on " + group.describe() + ": root " +
                                std::to_string(root) + " is not a group rank");
}

}  // namespace pipetune::comm
