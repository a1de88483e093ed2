// Which processes NCCL counts as one host, and so which GPU each process of a node may take.
//
// NCCL refuses two ranks of one communicator on the same GPU of the same host ("Duplicate GPU
// detected"). A host, to NCCL, is a hash of the hostname and boot id, or of NCCL_HOSTID where
// that is set. So processes of one machine that set different NCCL_HOSTID values are different
// hosts to NCCL: their traffic goes through its network transport (sockets, over the loopback
// interface with NCCL_SOCKET_IFNAME=lo) and they may share a GPU. That is how a machine with one
// GPU runs the communicator with ranks as processes (tests/gpu/as_nccl_hosts.sh): slower than
// NVLink or shared memory, but every call crosses processes through NCCL. Without NCCL_HOSTID a
// node is one host and its processes need a device each.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace pipetune::nccl {

struct HostPlacement {
  int local_rank = 0;        // among the processes of its host, in MPI rank order
  int local_size = 1;        // processes of its host
  bool host_id_set = false;  // NCCL_HOSTID was set for this process
};

// The same 64-bit value on every process for the same identity (FNV-1a of its bytes). An unset
// NCCL_HOSTID is the empty identity: the node itself.
std::uint64_t host_identity_hash(std::string_view host_id);

// Pure: `node_host_ids` holds the identity hash of each process of one node, in node-rank order;
// the process at `node_rank` gets its rank and count among those with its identity. Throws
// std::invalid_argument when node_rank is outside the span.
HostPlacement place_on_host(std::span<const std::uint64_t> node_host_ids, int node_rank);

// Collective over MPI_COMM_WORLD: gathers NCCL_HOSTID (as this process's environment has it)
// over the processes of this process's node (MPI_COMM_TYPE_SHARED) and places it.
HostPlacement nccl_host_placement();

}  // namespace pipetune::nccl
