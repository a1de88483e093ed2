#include "engine/nccl/nccl_hosts.hpp"

#include <mpi.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/mpi/mpi_check.hpp"

namespace pipetune::nccl {

std::uint64_t host_identity_hash(std::string_view host_id) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const char c : host_id) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

HostPlacement place_on_host(std::span<const std::uint64_t> node_host_ids, int node_rank) {
  if (node_rank < 0 || static_cast<std::size_t>(node_rank) >= node_host_ids.size())
    throw std::invalid_argument("NCCL host placement: node rank " + std::to_string(node_rank) +
                                " of a node of " + std::to_string(node_host_ids.size()) +
                                " processes");
  const std::uint64_t mine = node_host_ids[static_cast<std::size_t>(node_rank)];
  HostPlacement p;
  p.local_size = 0;
  for (std::size_t i = 0; i < node_host_ids.size(); ++i) {
    if (node_host_ids[i] != mine) continue;
    if (i < static_cast<std::size_t>(node_rank)) ++p.local_rank;
    ++p.local_size;
  }
  return p;
}

HostPlacement nccl_host_placement() {
  int rank = 0;
  PIPETUNE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_Comm node = MPI_COMM_NULL;
  PIPETUNE_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int node_rank = 0, node_size = 1;
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  const char* env = std::getenv("NCCL_HOSTID");
  const std::uint64_t mine = host_identity_hash(env != nullptr ? env : "");
  std::vector<std::uint64_t> ids(static_cast<std::size_t>(node_size));
  const int rc = MPI_Allgather(&mine, 1, MPI_UINT64_T, ids.data(), 1, MPI_UINT64_T, node);
  MPI_Comm_free(&node);
  PIPETUNE_MPI_CHECK(rc);
  HostPlacement p = place_on_host(ids, node_rank);
  p.host_id_set = env != nullptr && *env != '\0';
  return p;
}

}  // namespace pipetune::nccl
