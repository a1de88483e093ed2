// The NCCL implementation of Communicator: one process per GPU, global rank = MPI world rank,
// NCCL communicators bootstrapped over MPI (the process's MpiSession must be alive).
//
// DEVICE BUFFERS. Every span passed to this communicator points to device memory of the
// process's device (Options::device); only sizes are read on the host. Work that writes or reads
// the buffers may run on Options::compute_stream (e.g. CudaBackend::stream()): each call first
// orders itself after everything issued there so far, and returns only when its own work is
// complete (the interface's blocking promise), so later work on any stream sees the result.
// Without a compute stream, the caller must have finished writing the buffers (synchronised).
//
// What it keeps of communicator.hpp, and how:
//  - Blocking: every call synchronises its stream before returning (buffers reusable at once).
//  - Buffered send: send() copies the data into a stream-ordered device allocation, enqueues
//    ncclSend on the link's own stream and returns once the copy is done (the transfer itself
//    completes when the receiver posts its recv). Each ordered pair (src -> dst) has its own
//    two-rank NCCL communicator and stream, made and connected at construction, so a pending
//    send never blocks the sender's other transfers (NCCL runs the work of one communicator in
//    order): two ranks sending to each other before receiving (1F1B) do not deadlock.
//  - Tags: NCCL has none. A header {tag, count} goes over MPI ahead of each message, in order;
//    the receiver stashes messages of other tags on the device until asked for them, so messages
//    of one (src, dst, tag) arrive in order and recv takes the oldest match (nccl_bookkeeping.hpp).
//    A size that differs from the one sent is a CommMismatch, found from the header before any
//    NCCL call. A send to oneself is a device copy into the own stash.
//  - Collectives: one NCCL communicator per ProcessGroup (name and members: same members under
//    another name are another communicator), made on the group's first collective: its first
//    member calls ncclGetUniqueId and broadcasts the id over the group's MPI communicator (split
//    from MPI_COMM_WORLD at construction, as MpiCommunicator does); group rank = NCCL rank.
//  - Reductions are NOT in group-rank order: NCCL's ring/tree algorithms choose their own order,
//    so a NCCL sum is not bit-identical to the thread or MPI communicators' (differences of a few
//    ulps per element, growing with the group size); compare within an fp32 tolerance. max is
//    exact, but NCCL's max of a NaN and a number may give the number (the thread communicator
//    lets NaN win).
//  - Sizes are validated (collective_checks.hpp) before any NCCL call; with
//    Options::check_collectives the members also exchange each call's signature (kind, reduce op
//    or root, count) over MPI, so a member calling a different collective or size gets a
//    CommMismatch instead of a hang.
//  - Input and output may overlap as the interface allows: reduce_scatter and all_gather use
//    NCCL's in-place layout when the buffers are laid out that way and stage the input otherwise;
//    all_to_all(_v) refuse overlapping buffers (std::invalid_argument).
//  - Failures: a failing NCCL call throws NcclError (a RankFailure) naming the call, NCCL's text,
//    file and line; CUDA calls throw cuda::CudaError; a wait longer than Options::timeout_seconds
//    (> 0) throws WatchdogTimeout. The caller then ends the job (MpiSession::abort).
//
// Devices: NCCL refuses two ranks of one communicator on the same GPU of one host ("Duplicate GPU
// detected"), so a run needs one device per process of each host: by default the process's rank
// among those of its host (nccl_hosts.hpp: its node, MPI_COMM_TYPE_SHARED, split further by
// NCCL_HOSTID), checked against the node's device count. Processes that set different
// NCCL_HOSTID values may share a GPU, talking through NCCL's network transport (how a one-GPU
// machine tests ranks as processes). A pipeline of several ranks on ONE GPU in one process is
// the single-GPU streams mode (engine/cuda/cuda_rank_device.hpp), not this class.
//
// Not thread-safe: one thread per process uses it (NCCL allows one thread per communicator).
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/mpi/mpi_failure_notice.hpp"
#include "engine/nccl/nccl_bookkeeping.hpp"

namespace pipetune::nccl {

struct NcclOptions {
  // CUDA device of this process; -1: its rank among the processes of its NCCL host
  // (process_device).
  int device = -1;
  // Stream whose issued work each call waits for first (CudaBackend::stream()); nullptr: none.
  cudaStream_t compute_stream = nullptr;
  // Ordered (src, dst) pairs that may send to each other, the same on every process; empty: every
  // pair. Each link is a two-rank NCCL communicator (device memory and a stream per link and
  // end), so a large world should name the pairs its plan uses (pipeline neighbours).
  std::vector<std::pair<int, int>> links;
  // Exchange each collective's signature over MPI first (a mismatch throws instead of hanging).
  bool check_collectives = true;
  // Longest wait for a message or a collective before WatchdogTimeout; <= 0: none.
  double timeout_seconds = 0.0;
  // Asked in every wait past its first polls whether another process failed (rank 0's process
  // then throws its cause: mpi_failure_notice.hpp). Not owned; nullptr: not asked.
  mpi::MpiFailureNotice* failure_notice = nullptr;
};

// The CUDA device of this process: `requested` when >= 0 (checked against the node's devices),
// else its rank among the processes of its NCCL host (one device per process, as NCCL requires).
// Collective over MPI_COMM_WORLD. Throws cuda::CudaError naming why no device fits.
int process_device(int requested = -1);

class NcclCommunicator final : public comm::Communicator {
 public:
  // Collective over MPI_COMM_WORLD: every process passes the same groups and options.links in
  // the same order. Selects the device, splits one MPI communicator per group, creates and
  // connects the point-to-point links. The world group is always available. Throws
  // cuda::CudaError when no device is usable, NcclError when NCCL fails, std::invalid_argument
  // for bad groups or links.
  NcclCommunicator(const std::vector<comm::ProcessGroup>& groups, NcclOptions options = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int device() const { return device_; }

  void send(int dst, int tag, std::span<const float> data) override;
  void recv(int src, int tag, std::span<float> data) override;
  void all_reduce(const comm::ProcessGroup& group, std::span<float> data,
                  comm::ReduceOp op = comm::ReduceOp::sum) override;
  void reduce_scatter(const comm::ProcessGroup& group, std::span<const float> input,
                      std::span<float> output, comm::ReduceOp op = comm::ReduceOp::sum) override;
  // One ncclReduce to each member's chunk, grouped; in place as reduce_scatter.
  void reduce_scatter_v(const comm::ProcessGroup& group, std::span<const float> input,
                        std::span<const std::size_t> counts, std::span<float> output,
                        comm::ReduceOp op = comm::ReduceOp::sum) override;
  void all_gather(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all(const comm::ProcessGroup& group, std::span<const float> input,
                  std::span<float> output) override;
  void all_to_all_v(const comm::ProcessGroup& group, std::span<const float> input,
                    std::span<const std::size_t> send_counts, std::span<float> output,
                    std::span<const std::size_t> recv_counts) override;
  void broadcast(const comm::ProcessGroup& group, std::span<float> data, int root) override;
  // MPI barrier on the group's MPI communicator: every call of this communicator has completed
  // on the device before it returns, so no device work is needed (buffered sends may still be
  // in flight, as with every implementation).
  void barrier(const comm::ProcessGroup& group) override;
  // NCCL's asynchronous errors surface in the call that waits; MPI's launcher ends the job.
  void throw_if_aborted() const override {}

  // How many messages are stashed (received ahead of their recv, tags out of order).
  std::size_t stashed_messages() const;

 private:
  struct Group {
    MPI_Comm mpi = MPI_COMM_NULL;  // MPI_COMM_NULL when this process is not a member
    ncclComm_t nccl = nullptr;     // made on first use
  };
  struct Link {  // one end of a two-rank communicator (rank 0 = source, rank 1 = destination)
    ncclComm_t nccl = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t copied = nullptr;  // a send's staging copy is done
  };
  struct PendingHeader {
    MessageHeader header;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  // The NCCL ids of this process's links, by peer: those it made as the source (out) and those
  // it received as the destination (in).
  struct LinkIds {
    std::vector<std::pair<int, UniqueIdBytes>> out, in;
  };

  // The constructor's parts. split_mpi_communicators: the duplicate of the world for headers, and
  // one MPI communicator per group (collective over the world in one fixed order, so no process
  // waits on a split another makes later). exchange_link_ids: each link's source makes its id
  // and sends it to the destination (in the global link order: MPI keeps the order per pair).
  // join_links: every end joins its two-rank communicators in one NCCL group call and gets its
  // stream and event. connect_links: one float each way over every link.
  void split_mpi_communicators(const std::vector<comm::ProcessGroup>& groups);
  LinkIds exchange_link_ids();
  void join_links(const LinkIds& ids);
  void connect_links();

  static std::size_t bytes_of(std::size_t floats) { return floats * sizeof(float); }
  // Device pointers as NCCL and CUDA take them.
  static const void* cv(const float* p) { return static_cast<const void*>(p); }

  // The group's MPI communicator and NCCL communicator, and the signature check
  // (nccl_collectives.cpp).
  Group& group_of(const comm::ProcessGroup& group, const char* op);
  ncclComm_t nccl_of(const comm::ProcessGroup& group, Group& g);
  void check_signature(const comm::ProcessGroup& group, Group& g, CollectiveSignature mine);
  // Makes `stream` wait for the work issued on the compute stream so far.
  void after_compute(cudaStream_t stream);
  // Waits for `stream` (under the watchdog, polling NCCL's asynchronous errors of `nccl`).
  void wait(cudaStream_t stream, ncclComm_t nccl, const std::string& what);
  void wait_mpi(MPI_Request& request, const std::string& what);
  // Polls `done` with growing sleeps until true or the watchdog expires (WatchdogTimeout).
  void poll(const std::function<bool()>& done, const std::function<std::string()>& what, int peer);
  void reap_headers(bool wait_all);
  void* stage(const float* src, std::size_t n, cudaStream_t stream);
  void free_stash(StashedMessage& m);

  NcclOptions options_;
  int rank_ = 0, world_ = 1, device_ = 0;
  MPI_Comm headers_ = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD for p2p headers
  GroupTable<Group> groups_;
  std::vector<std::pair<int, int>> links_;  // every process's links, in one global order
  std::map<int, Link> out_, in_;            // by peer
  std::map<int, TagMailbox> mailboxes_;     // by source (self included)
  std::list<PendingHeader> headers_in_flight_;
  cudaStream_t stream_ = nullptr;  // collectives and local copies
  cudaEvent_t compute_done_ = nullptr;
};

}  // namespace pipetune::nccl
