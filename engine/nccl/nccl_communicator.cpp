#include "engine/nccl/nccl_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/comm/comm_errors.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_devices.hpp"
#include "engine/mpi/mpi_check.hpp"
#include "engine/nccl/nccl_check.hpp"
#include "engine/nccl/nccl_hosts.hpp"

namespace pipetune::nccl {

using comm::ProcessGroup;
using comm::ReduceOp;

namespace {

constexpr int kHeaderTag = 0;  // p2p headers on headers_
constexpr int kLinkIdTag = 1;  // link unique ids at construction

}  // namespace

int process_device(int requested) {
  const HostPlacement host = nccl_host_placement();
  const cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty())
    throw cuda::CudaError("NCCL communicator: no CUDA device is usable (" + q.problem + ")");
  const int count = static_cast<int>(q.devices.size());
  if (requested >= 0) {
    if (requested >= count)
      throw cuda::CudaError("NCCL communicator: device " + std::to_string(requested) +
                            " requested, this node has " + std::to_string(count));
    return requested;
  }
  if (host.local_size > count)
    throw cuda::CudaError(
        "NCCL communicator: " + std::to_string(host.local_size) + " processes on this " +
        (host.host_id_set ? "NCCL host (one NCCL_HOSTID)" : "node") + " but " +
        std::to_string(count) +
        " CUDA device(s): NCCL needs one device per process of a host (it refuses two ranks of "
        "one communicator on the same GPU; processes given different NCCL_HOSTID values are "
        "different hosts to it)");
  return host.local_rank;
}

NcclCommunicator::NcclCommunicator(const std::vector<ProcessGroup>& groups, NcclOptions options)
    : options_(std::move(options)) {
  PIPETUNE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  PIPETUNE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));

  // 1. The device: one per process on each node.
  device_ = process_device(options_.device);
  PIPETUNE_CUDA_CHECK(cudaSetDevice(device_));
  PIPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  PIPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));

  // 2. MPI: headers over a duplicate of the world; one communicator per group.
  split_mpi_communicators(groups);

  // 3. Point-to-point links: the source of each creates its id and sends it to the destination,
  // then every end joins its two-rank communicators in one NCCL group call, and each link is
  // connected before its first real transfer.
  links_ = resolve_links(options_.links, world_);
  const LinkIds ids = exchange_link_ids();
  if (!ids.out.empty() || !ids.in.empty()) {
    join_links(ids);
    connect_links();
  }
}

void NcclCommunicator::split_mpi_communicators(const std::vector<ProcessGroup>& groups) {
  PIPETUNE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &headers_));
  MPI_Comm_set_errhandler(headers_, MPI_ERRORS_RETURN);
  std::vector<ProcessGroup> all = groups;
  all.push_back(comm::make_world_group(world_));
  for (const ProcessGroup& g : all) {
    if (groups_.find(g) != nullptr) continue;  // declared twice: one communicator
    for (int r : g.ranks)
      if (r < 0 || r >= world_)
        throw std::invalid_argument("NCCL communicator: " + g.describe() + " names rank " +
                                    std::to_string(r) + " of a world of " + std::to_string(world_));
    const int index = g.index_of(rank_);
    MPI_Comm c = MPI_COMM_NULL;
    PIPETUNE_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, index >= 0 ? 0 : MPI_UNDEFINED, index, &c));
    if (c != MPI_COMM_NULL) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    groups_.get_or_make(g, [c] { return Group{c, nullptr}; });
  }
}

NcclCommunicator::LinkIds NcclCommunicator::exchange_link_ids() {
  LinkIds ids;
  std::vector<UniqueIdBytes> sent_ids;
  sent_ids.reserve(links_.size());
  std::vector<MPI_Request> requests;
  for (const auto& [a, b] : links_) {
    if (a == rank_) {
      ncclUniqueId id;
      PIPETUNE_NCCL_CHECK(nccl_library().GetUniqueId(&id));
      sent_ids.push_back(unique_id_to_bytes(id));
      ids.out.emplace_back(b, sent_ids.back());
      MPI_Request r = MPI_REQUEST_NULL;
      PIPETUNE_MPI_CHECK(MPI_Isend(sent_ids.back().data(), NCCL_UNIQUE_ID_BYTES, MPI_BYTE, b,
                                   kLinkIdTag, headers_, &r));
      requests.push_back(r);
    } else if (b == rank_) {
      UniqueIdBytes id{};
      MPI_Request r = MPI_REQUEST_NULL;
      PIPETUNE_MPI_CHECK(
          MPI_Irecv(id.data(), NCCL_UNIQUE_ID_BYTES, MPI_BYTE, a, kLinkIdTag, headers_, &r));
      wait_mpi(r, "the NCCL id of link " + std::to_string(a) + " -> " + std::to_string(b));
      ids.in.emplace_back(a, id);
    }
  }
  for (MPI_Request& r : requests) wait_mpi(r, "sending a link's NCCL id");
  return ids;
}

void NcclCommunicator::join_links(const LinkIds& ids) {
  PIPETUNE_NCCL_CHECK(nccl_library().GroupStart());
  for (const auto& [peer, id] : ids.out)
    PIPETUNE_NCCL_CHECK(
        nccl_library().CommInitRank(&out_[peer].nccl, 2, unique_id_from_bytes(id), 0));
  for (const auto& [peer, id] : ids.in)
    PIPETUNE_NCCL_CHECK(
        nccl_library().CommInitRank(&in_[peer].nccl, 2, unique_id_from_bytes(id), 1));
  PIPETUNE_NCCL_CHECK(nccl_library().GroupEnd());
  for (auto* ends : {&out_, &in_})
    for (auto& [peer, link] : *ends) {
      PIPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&link.stream, cudaStreamNonBlocking));
      PIPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&link.copied, cudaEventDisableTiming));
    }
}

void NcclCommunicator::connect_links() {
  // One float each way: NCCL connects a pair on its first transfer, and that handshake blocks
  // the host until the peer posts its side, which a buffered send must never wait for.
  float* warm = nullptr;
  PIPETUNE_CUDA_CHECK(cudaMalloc(&warm, bytes_of(1 + in_.size())));
  PIPETUNE_CUDA_CHECK(cudaMemset(warm, 0, bytes_of(1 + in_.size())));
  PIPETUNE_NCCL_CHECK(nccl_library().GroupStart());
  for (auto& [peer, link] : out_)
    PIPETUNE_NCCL_CHECK(nccl_library().Send(warm, 1, ncclFloat, 1, link.nccl, link.stream));
  std::size_t slot = 1;
  for (auto& [peer, link] : in_)
    PIPETUNE_NCCL_CHECK(
        nccl_library().Recv(warm + slot++, 1, ncclFloat, 0, link.nccl, link.stream));
  PIPETUNE_NCCL_CHECK(nccl_library().GroupEnd());
  for (auto* ends : {&out_, &in_})
    for (auto& [peer, link] : *ends) wait(link.stream, link.nccl, "connecting the links");
  PIPETUNE_CUDA_CHECK(cudaFree(warm));
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  try {
    reap_headers(true);
  } catch (...) {
    // A failed run: the launcher ends the job; freeing what we can is all that is left.
  }
  // Communicators in one global order (links in the order made, then groups by key), the same
  // on every member: destroying a communicator may wait for its peers.
  const auto finish = [this](ncclComm_t c, cudaStream_t s) {
    if (c == nullptr) return;
    bool drained = true;
    try {
      if (s != nullptr) wait(s, c, "destroying a NCCL communicator");
    } catch (...) {
      drained = false;
    }
    if (drained)
      nccl_library().CommDestroy(c);
    else
      nccl_library().CommAbort(c);  // a send nobody received, or a failed peer
  };
  for (const auto& [a, b] : links_) {
    if (a == rank_) finish(out_[b].nccl, out_[b].stream);
    if (b == rank_) finish(in_[a].nccl, in_[a].stream);
  }
  for (auto& [group, g] : groups_) {
    finish(g.nccl, stream_);
    if (g.mpi != MPI_COMM_NULL) MPI_Comm_free(&g.mpi);
  }
  for (auto& [src, box] : mailboxes_)
    for (StashedMessage& m : box.drain())
      if (m.data != nullptr) cudaFree(m.data);
  for (auto* ends : {&out_, &in_})
    for (auto& [peer, link] : *ends) {
      if (link.copied != nullptr) cudaEventDestroy(link.copied);
      if (link.stream != nullptr) cudaStreamDestroy(link.stream);
    }
  if (compute_done_ != nullptr) cudaEventDestroy(compute_done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (headers_ != MPI_COMM_NULL) MPI_Comm_free(&headers_);
}

std::size_t NcclCommunicator::stashed_messages() const {
  std::size_t n = 0;
  for (const auto& [src, box] : mailboxes_) n += box.size();
  return n;
}

// ---- waiting ------------------------------------------------------------------------------------

void NcclCommunicator::poll(const std::function<bool()>& done,
                            const std::function<std::string()>& what, int peer) {
  // Spin briefly (small transfers end here), then sleep in growing steps up to the watchdog.
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(1);
  for (int polls = 0; !done(); ++polls) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options_.timeout_seconds > 0.0 && waited > options_.timeout_seconds)
      throw comm::WatchdogTimeout(peer, what(),
                                  "rank " + std::to_string(rank_) + " waited more than " +
                                      std::to_string(options_.timeout_seconds) + " s in " + what() +
                                      ": another process is stuck or gone (watchdog)");
    if (polls > 64) {
      if (options_.failure_notice != nullptr) options_.failure_notice->throw_if_told();
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  }
}

void NcclCommunicator::wait(cudaStream_t stream, ncclComm_t nccl, const std::string& what) {
  poll(
      [&] {
        const cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return true;
        if (e != cudaErrorNotReady) PIPETUNE_CUDA_CHECK(e);
        if (nccl != nullptr) {
          ncclResult_t async = ncclSuccess;
          PIPETUNE_NCCL_CHECK_COMM(nccl, nccl_library().CommGetAsyncError(nccl, &async));
          if (async != ncclSuccess && async != ncclInProgress)
            PIPETUNE_NCCL_CHECK_COMM(nccl, async);
        }
        return false;
      },
      [&] { return what; }, -1);
}

void NcclCommunicator::wait_mpi(MPI_Request& request, const std::string& what) {
  poll(
      [&] {
        int done = 0;
        PIPETUNE_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        return done != 0;
      },
      [&] { return what; }, -1);
}

void NcclCommunicator::reap_headers(bool wait_all) {
  for (auto it = headers_in_flight_.begin(); it != headers_in_flight_.end();) {
    int done = 1;
    if (wait_all)
      wait_mpi(it->request, "delivery of a message header");
    else
      PIPETUNE_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done ? headers_in_flight_.erase(it) : std::next(it);
  }
}

void NcclCommunicator::after_compute(cudaStream_t stream) {
  if (options_.compute_stream == nullptr) return;
  PIPETUNE_CUDA_CHECK(cudaEventRecord(compute_done_, options_.compute_stream));
  PIPETUNE_CUDA_CHECK(cudaStreamWaitEvent(stream, compute_done_, 0));
}

void* NcclCommunicator::stage(const float* src, std::size_t n, cudaStream_t stream) {
  void* p = nullptr;
  PIPETUNE_CUDA_CHECK(cudaMallocAsync(&p, bytes_of(n), stream));
  PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(p, cv(src), bytes_of(n), cudaMemcpyDeviceToDevice, stream));
  return p;
}

// ---- point to point -----------------------------------------------------------------------------

void NcclCommunicator::send(int dst, int tag, std::span<const float> data) {
  if (dst < 0 || dst >= world_)
    throw std::invalid_argument("send from rank " + std::to_string(rank_) + " to rank " +
                                std::to_string(dst) + " of a world of " + std::to_string(world_));
  reap_headers(false);
  const std::size_t n = data.size();
  if (dst == rank_) {  // to oneself: straight into the own stash
    after_compute(stream_);
    StashedMessage m{n > 0 ? stage(data.data(), n, stream_) : nullptr, n};
    wait(stream_, nullptr, "a send to itself");
    mailboxes_[rank_].stash(tag, m);
    return;
  }
  const auto it = out_.find(dst);
  if (it == out_.end())
    throw std::invalid_argument("NCCL communicator: no link from rank " + std::to_string(rank_) +
                                " to rank " + std::to_string(dst) +
                                " (list it in NcclOptions::links)");
  Link& link = it->second;
  PendingHeader& h = headers_in_flight_.emplace_back();
  h.header = {tag, n};
  PIPETUNE_MPI_CHECK(
      MPI_Isend(&h.header, sizeof h.header, MPI_BYTE, dst, kHeaderTag, headers_, &h.request));
  if (n == 0) return;
  // Buffered: the data is copied into a stream-ordered allocation that the link's stream frees
  // once NCCL has sent it; the caller may reuse `data` as soon as the copy is done.
  after_compute(link.stream);
  void* staged = stage(data.data(), n, link.stream);
  PIPETUNE_CUDA_CHECK(cudaEventRecord(link.copied, link.stream));
  PIPETUNE_NCCL_CHECK_COMM(link.nccl,
                           nccl_library().Send(staged, n, ncclFloat, 1, link.nccl, link.stream));
  PIPETUNE_CUDA_CHECK(cudaFreeAsync(staged, link.stream));
  poll(
      [&] {
        const cudaError_t e = cudaEventQuery(link.copied);
        if (e != cudaErrorNotReady) PIPETUNE_CUDA_CHECK(e);
        return e == cudaSuccess;
      },
      [&] { return "staging a send to rank " + std::to_string(dst); }, dst);
}

void NcclCommunicator::recv(int src, int tag, std::span<float> data) {
  if (src < 0 || src >= world_)
    throw std::invalid_argument("recv on rank " + std::to_string(rank_) + " from rank " +
                                std::to_string(src) + " of a world of " + std::to_string(world_));
  reap_headers(false);
  const std::string what =
      "recv of a message from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
  TagMailbox& box = mailboxes_[src];
  Link* link = nullptr;
  if (src != rank_) {
    const auto it = in_.find(src);
    if (it == in_.end())
      throw std::invalid_argument("NCCL communicator: no link from rank " + std::to_string(src) +
                                  " to rank " + std::to_string(rank_) +
                                  " (list it in NcclOptions::links)");
    link = &it->second;
  }
  cudaStream_t stream = link != nullptr ? link->stream : stream_;
  if (std::optional<StashedMessage> m = box.take(tag)) {  // older than anything unread
    const std::string bad = recv_size_mismatch(rank_, src, tag, data.size(), m->count);
    if (!bad.empty()) {
      free_stash(*m);
      throw comm::CommMismatch(rank_, "recv", bad);
    }
    if (m->count > 0) {
      after_compute(stream);
      PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(data.data(), m->data, bytes_of(data.size()),
                                          cudaMemcpyDeviceToDevice, stream));
      PIPETUNE_CUDA_CHECK(cudaFreeAsync(m->data, stream));
    }
    wait(stream, nullptr, what);
    return;
  }
  if (link == nullptr)
    throw comm::CommMismatch(rank_, "recv",
                             "recv on rank " + std::to_string(rank_) + " from itself (tag " +
                                 std::to_string(tag) +
                                 ") with no such message sent to itself: it would wait forever");
  for (;;) {
    MessageHeader h;
    MPI_Request r = MPI_REQUEST_NULL;
    PIPETUNE_MPI_CHECK(MPI_Irecv(&h, sizeof h, MPI_BYTE, src, kHeaderTag, headers_, &r));
    wait_mpi(r, what);
    if (box.on_header(h, tag) == HeaderAction::deliver) {
      const std::string bad = recv_size_mismatch(rank_, src, tag, data.size(), h.count);
      if (!bad.empty()) throw comm::CommMismatch(rank_, "recv", bad);
      if (h.count > 0) {
        after_compute(link->stream);
        PIPETUNE_NCCL_CHECK_COMM(
            link->nccl,
            nccl_library().Recv(data.data(), data.size(), ncclFloat, 0, link->nccl, link->stream));
        wait(link->stream, link->nccl, what);
      }
      return;
    }
    // Another tag: received into the stash, in order, for a later recv.
    StashedMessage m{nullptr, h.count};
    if (h.count > 0) {
      PIPETUNE_CUDA_CHECK(cudaMallocAsync(&m.data, bytes_of(h.count), link->stream));
      PIPETUNE_NCCL_CHECK_COMM(
          link->nccl, nccl_library().Recv(m.data, h.count, ncclFloat, 0, link->nccl, link->stream));
    }
    box.stash(h.tag, m);
  }
}

void NcclCommunicator::free_stash(StashedMessage& m) {
  if (m.data != nullptr) cudaFree(m.data);  // synchronises: fine on a failing path
  m.data = nullptr;
}

}  // namespace pipetune::nccl
