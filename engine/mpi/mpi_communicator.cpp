#include "engine/mpi/mpi_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "engine/comm/collective_checks.hpp"
#include "engine/comm/comm_errors.hpp"
#include "engine/comm/reduction.hpp"
#include "engine/mpi/mpi_check.hpp"

namespace pipetune::mpi {

using comm::ProcessGroup;
using comm::ReduceOp;

namespace {

int as_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument(std::string("MPI communicator: ") + what + " of " +
                                std::to_string(n) + " floats exceeds MPI's int count");
  return static_cast<int>(n);
}

bool overlaps(const float* a, std::size_t na, const float* b, std::size_t nb) {
  const std::less<const float*> before;
  return na > 0 && nb > 0 && before(a, b + nb) && before(b, a + na);
}

// Start of chunk j of n elements split over p members (chunk sizes differ by at most one).
std::size_t chunk_start(std::size_t n, int p, int j) {
  return n * static_cast<std::size_t>(j) / static_cast<std::size_t>(p);
}

}  // namespace

MpiCommunicator::MpiCommunicator(const std::vector<ProcessGroup>& groups, double timeout_seconds,
                                 bool with_channel)
    : timeout_seconds_(timeout_seconds) {
  PIPETUNE_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  PIPETUNE_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  PIPETUNE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &p2p_));
  MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN);
  std::vector<ProcessGroup> all = groups;
  all.push_back(comm::make_world_group(world_));
  groups_ = split(all);
  if (with_channel) channel_groups_ = split(all);
}

MpiCommunicator::MpiCommunicator(ChannelTag, const MpiCommunicator& of, GroupComms groups)
    : timeout_seconds_(of.timeout_seconds_),
      notice_(of.notice_),
      rank_(of.rank_),
      world_(of.world_),
      groups_(std::move(groups)),
      is_channel_(true) {}

MpiCommunicator::GroupComms MpiCommunicator::split(const std::vector<ProcessGroup>& all) const {
  GroupComms out;
  for (const ProcessGroup& g : all) {
    if (out.count(g) > 0) continue;  // declared twice: one communicator (every process skips)
    for (int r : g.ranks)
      if (r < 0 || r >= world_)
        throw std::invalid_argument("MPI communicator: " + g.describe() + " names rank " +
                                    std::to_string(r) + " of a world of " + std::to_string(world_));
    const int index = g.index_of(rank_);
    MPI_Comm c = MPI_COMM_NULL;
    PIPETUNE_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, index >= 0 ? 0 : MPI_UNDEFINED, index, &c));
    if (c != MPI_COMM_NULL) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    out.emplace(g, c);
  }
  return out;
}

std::unique_ptr<comm::Communicator> MpiCommunicator::open_channel() {
  if (channel_groups_.empty()) return nullptr;
  return std::unique_ptr<comm::Communicator>(
      new MpiCommunicator(ChannelTag{}, *this, std::exchange(channel_groups_, {})));
}

void MpiCommunicator::fail_run(std::exception_ptr) {
  abandoned_.store(true, std::memory_order_release);
}

void MpiCommunicator::refuse_on_channel(const char* op) const {
  if (is_channel_)
    throw std::logic_error(std::string(op) + " on a channel of rank " + std::to_string(rank_) +
                           ": a channel carries collectives only");
}

MpiCommunicator::~MpiCommunicator() {
  try {
    reap_sends(true);
  } catch (...) {
    // A failed run: the launcher ends the job; freeing what we can is all that is left.
  }
  for (GroupComms* comms : {&groups_, &channel_groups_})
    for (auto& [group, c] : *comms)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  if (p2p_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_);
}

MPI_Comm MpiCommunicator::comm_of(const ProcessGroup& group) const {
  const auto it = groups_.find(group);
  if (it == groups_.end())
    throw std::logic_error("MPI communicator: " + group.describe() +
                           " was not declared when the communicator was made");
  if (it->second == MPI_COMM_NULL)
    throw std::logic_error("MPI communicator: rank " + std::to_string(rank_) +
                           " is not a member of " + group.describe());
  return it->second;
}

void MpiCommunicator::wait_or_watchdog(const std::function<bool()>& done,
                                       const std::function<std::string()>& what, int peer) const {
  // Spin briefly (small messages finish here), then sleep in growing steps so that waiting
  // ranks leave the cores to the ones computing (oversubscribed runs), up to the watchdog.
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(1);
  for (int polls = 0; !done(); ++polls) {
    if (abandoned_.load(std::memory_order_acquire))
      throw comm::RankFailure(rank_, what(),
                              "rank " + std::to_string(rank_) + " stopped in " + what() +
                                  ": another thread of the rank failed");
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds_ > 0.0 && waited > timeout_seconds_)
      throw comm::WatchdogTimeout(peer, what(),
                                  "rank " + std::to_string(rank_) + " waited more than " +
                                      std::to_string(static_cast<int>(timeout_seconds_)) +
                                      " s in " + what() +
                                      ": another process is stuck or gone (watchdog)");
    if (polls > 64) {
      if (notice_ != nullptr) notice_->throw_if_told();
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

void MpiCommunicator::complete(MPI_Request& request, const std::string& op) const {
  wait_or_watchdog(
      [&] {
        int done = 0;
        PIPETUNE_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        return done != 0;
      },
      [&] { return op; }, -1);
}

void MpiCommunicator::reap_sends(bool wait_all) {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 1;
    if (wait_all) {
      complete(it->request, "delivery of a buffered send");  // under the watchdog
    } else {
      PIPETUNE_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    }
    it = done ? sends_.erase(it) : std::next(it);
  }
}

void MpiCommunicator::send(int dst, int tag, std::span<const float> data) {
  refuse_on_channel("send");
  reap_sends(false);
  PendingSend& s = sends_.emplace_back();
  s.data.assign(data.begin(), data.end());  // buffered: the caller may reuse `data` at once
  PIPETUNE_MPI_CHECK(MPI_Isend(s.data.data(), as_count(s.data.size(), "send"), MPI_FLOAT, dst, tag,
                               p2p_, &s.request));
}

void MpiCommunicator::recv(int src, int tag, std::span<float> data) {
  refuse_on_channel("recv");
  MPI_Status status;
  wait_or_watchdog(
      [&] {
        int found = 0;
        PIPETUNE_MPI_CHECK(MPI_Iprobe(src, tag, p2p_, &found, &status));
        return found != 0;
      },
      [&] {
        return "recv of a message from rank " + std::to_string(src) + " (tag " +
               std::to_string(tag) + ")";
      },
      src);
  int count = 0;
  PIPETUNE_MPI_CHECK(MPI_Get_count(&status, MPI_FLOAT, &count));
  if (static_cast<std::size_t>(count) != data.size())
    throw comm::CommMismatch(rank_, "recv",
                             "recv on rank " + std::to_string(rank_) + " from rank " +
                                 std::to_string(src) + " (tag " + std::to_string(tag) +
                                 ") expects " + std::to_string(data.size()) +
                                 " floats, the message has " + std::to_string(count));
  PIPETUNE_MPI_CHECK(MPI_Recv(data.data(), count, MPI_FLOAT, src, tag, p2p_, MPI_STATUS_IGNORE));
  reap_sends(false);
}

void MpiCommunicator::all_reduce(const ProcessGroup& group, std::span<float> data, ReduceOp op) {
  const MPI_Comm c = comm_of(group);
  const int p = group.size(), me = group.index_of(rank_);
  if (p == 1) return;
  const std::size_t n = data.size();
  as_count(n, "all_reduce");
  // 1. Every member sends chunk j of its data to member j: I receive my chunk from each.
  const std::size_t lo = chunk_start(n, p, me), len = chunk_start(n, p, me + 1) - lo;
  std::vector<int> send_counts(p), send_displs(p), recv_counts(p), recv_displs(p);
  for (int j = 0; j < p; ++j) {
    send_displs[j] = static_cast<int>(chunk_start(n, p, j));
    send_counts[j] = static_cast<int>(chunk_start(n, p, j + 1)) - send_displs[j];
    recv_counts[j] = static_cast<int>(len);
    recv_displs[j] = static_cast<int>(len) * j;
  }
  if (scratch_.size() < len * static_cast<std::size_t>(p))
    scratch_.resize(len * static_cast<std::size_t>(p));
  float* pieces = scratch_.data();
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Ialltoallv(data.data(), send_counts.data(), send_displs.data(),
                                      MPI_FLOAT, pieces, recv_counts.data(), recv_displs.data(),
                                      MPI_FLOAT, c, &request));
    complete(request, "all_reduce on " + group.describe());
  }
  // 2. Fold them in group-rank order: ((x0 op x1) op x2) ...
  for (int j = 1; j < p; ++j)
    comm::fold_into(op, pieces, pieces + len * static_cast<std::size_t>(j), len);
  // 3. Every member's reduced chunk to everyone, in place.
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Iallgatherv(pieces, static_cast<int>(len), MPI_FLOAT, data.data(),
                                       send_counts.data(), send_displs.data(), MPI_FLOAT, c,
                                       &request));
    complete(request, "all_reduce on " + group.describe());
  }
}

void MpiCommunicator::reduce_scatter(const ProcessGroup& group, std::span<const float> input,
                                     std::span<float> output, ReduceOp op) {
  const MPI_Comm c = comm_of(group);
  const int p = group.size();
  const std::size_t n = output.size();
  comm::check_reduce_scatter(rank_, group, input.size(), n);
  if (scratch_.size() < input.size()) scratch_.resize(input.size());
  float* pieces = scratch_.data();  // (p, n): chunk `me` of every member
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Ialltoall(input.data(), as_count(n, "reduce_scatter"), MPI_FLOAT, pieces,
                                     static_cast<int>(n), MPI_FLOAT, c, &request));
    complete(request, "reduce_scatter on " + group.describe());
  }
  for (int j = 1; j < p; ++j)
    comm::fold_into(op, pieces, pieces + n * static_cast<std::size_t>(j), n);
  std::copy_n(pieces, n, output.data());
}

void MpiCommunicator::reduce_scatter_v(const ProcessGroup& group, std::span<const float> input,
                                       std::span<const std::size_t> counts, std::span<float> output,
                                       ReduceOp op) {
  const MPI_Comm c = comm_of(group);
  const int p = group.size();
  const std::size_t n = output.size();
  const std::vector<std::size_t> at =
      comm::check_reduce_scatter_v(rank_, group, input.size(), counts, n);
  if (scratch_.size() < n * static_cast<std::size_t>(p))
    scratch_.resize(n * static_cast<std::size_t>(p));
  float* pieces = scratch_.data();  // (p, n): chunk `me` of every member
  std::vector<int> sc(p), sd(p), rc(p, as_count(n, "reduce_scatter_v")), rd(p);
  for (int j = 0; j < p; ++j) {
    sc[j] = as_count(counts[static_cast<std::size_t>(j)], "reduce_scatter_v");
    sd[j] = as_count(at[static_cast<std::size_t>(j)], "reduce_scatter_v");
    rd[j] = as_count(n * static_cast<std::size_t>(j), "reduce_scatter_v");
  }
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Ialltoallv(input.data(), sc.data(), sd.data(), MPI_FLOAT, pieces,
                                      rc.data(), rd.data(), MPI_FLOAT, c, &request));
    complete(request, "reduce_scatter_v on " + group.describe());
  }
  for (int j = 1; j < p; ++j)
    comm::fold_into(op, pieces, pieces + n * static_cast<std::size_t>(j), n);
  std::copy_n(pieces, n, output.data());
}

void MpiCommunicator::all_gather(const ProcessGroup& group, std::span<const float> input,
                                 std::span<float> output) {
  const MPI_Comm c = comm_of(group);
  const std::size_t n = input.size();
  comm::check_all_gather(rank_, group, n, output.size());
  // MPI forbids aliased send and receive buffers: stage an input that overlaps the output.
  std::vector<float> staged;
  const float* in = input.data();
  if (overlaps(input.data(), n, output.data(), output.size())) {
    staged.assign(input.begin(), input.end());
    in = staged.data();
  }
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Iallgather(in, as_count(n, "all_gather"), MPI_FLOAT, output.data(),
                                      static_cast<int>(n), MPI_FLOAT, c, &request));
    complete(request, "all_gather on " + group.describe());
  }
}

void MpiCommunicator::all_to_all(const ProcessGroup& group, std::span<const float> input,
                                 std::span<float> output) {
  const MPI_Comm c = comm_of(group);
  comm::check_all_to_all(rank_, group, input.size(), output.size());
  const auto p = static_cast<std::size_t>(group.size());
  const int chunk = as_count(input.size() / p, "all_to_all");
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Ialltoall(input.data(), chunk, MPI_FLOAT, output.data(), chunk,
                                     MPI_FLOAT, c, &request));
    complete(request, "all_to_all on " + group.describe());
  }
}

void MpiCommunicator::all_to_all_v(const ProcessGroup& group, std::span<const float> input,
                                   std::span<const std::size_t> send_counts,
                                   std::span<float> output,
                                   std::span<const std::size_t> recv_counts) {
  const MPI_Comm c = comm_of(group);
  const int p = group.size();
  const comm::AllToAllOffsets at =
      comm::check_all_to_all_v(rank_, group, input.size(), send_counts, output.size(), recv_counts);
  std::vector<int> sc(p), sd(p), rc(p), rd(p);
  for (int j = 0; j < p; ++j) {
    sc[j] = as_count(send_counts[j], "all_to_all_v");
    rc[j] = as_count(recv_counts[j], "all_to_all_v");
    sd[j] = as_count(at.send[j], "all_to_all_v");
    rd[j] = as_count(at.recv[j], "all_to_all_v");
  }
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Ialltoallv(input.data(), sc.data(), sd.data(), MPI_FLOAT, output.data(),
                                      rc.data(), rd.data(), MPI_FLOAT, c, &request));
    complete(request, "all_to_all_v on " + group.describe());
  }
}

void MpiCommunicator::broadcast(const ProcessGroup& group, std::span<float> data, int root) {
  const MPI_Comm c = comm_of(group);
  comm::check_broadcast_root(group, root);
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(
        MPI_Ibcast(data.data(), as_count(data.size(), "broadcast"), MPI_FLOAT, root, c, &request));
    complete(request, "broadcast on " + group.describe());
  }
}

void MpiCommunicator::barrier(const ProcessGroup& group) {
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Ibarrier(comm_of(group), &request));
    complete(request, "barrier on " + group.describe());
  }
}

std::vector<std::string> MpiCommunicator::gather_bytes(const std::string& bytes, int root) {
  const MPI_Comm c = comm_of(comm::make_world_group(world_));
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument("MPI communicator: gather of more than INT_MAX bytes");
  const int mine = static_cast<int>(bytes.size());
  std::vector<int> sizes(rank_ == root ? static_cast<std::size_t>(world_) : 0);
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Igather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, c, &request));
    complete(request, "gather of sizes over the world");
  }
  std::vector<int> offsets(sizes.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    if (total > static_cast<std::size_t>(INT_MAX))
      throw std::invalid_argument("MPI communicator: gather of more than INT_MAX bytes in all");
    offsets[r] = static_cast<int>(total);
    total += static_cast<std::size_t>(sizes[r]);
  }
  std::string all(total, '\0');
  {
    MPI_Request request;
    PIPETUNE_MPI_CHECK(MPI_Igatherv(bytes.data(), mine, MPI_BYTE, all.data(), sizes.data(),
                                    offsets.data(), MPI_BYTE, root, c, &request));
    complete(request, "gather over the world");
  }
  std::vector<std::string> out;
  for (std::size_t r = 0; r < sizes.size(); ++r)
    out.push_back(
        all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(sizes[r])));
  return out;
}

}  // namespace pipetune::mpi
