#include "engine/mpi/mpi_hybrid_communicator.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "engine/comm/collective_checks.hpp"
#include "engine/comm/comm_errors.hpp"
#include "engine/comm/reduction.hpp"

namespace pipetune::mpi {

using comm::ProcessGroup;
using comm::ReduceOp;

namespace {

// Start of chunk j of n elements split over p members (chunk sizes differ by at most one).
std::size_t chunk_start(std::size_t n, int p, int j) {
  return n * static_cast<std::size_t>(j) / static_cast<std::size_t>(p);
}

}  // namespace

MpiHybridCommunicator::MpiHybridCommunicator(MpiRankRouter& router, int rank,
                                             const std::vector<ProcessGroup>& groups)
    : router_(&router), rank_(rank) {
  if (router.process_of(rank) != router.process_of(router.first_rank()))
    throw std::invalid_argument(
        "MPI hybrid communicator: rank " + std::to_string(rank) +
        " does not live in this process (ranks " + std::to_string(router.first_rank()) + " to " +
        std::to_string(router.first_rank() + router.ranks_per_process() - 1) + ")");
  std::vector<ProcessGroup> all = groups;
  all.push_back(comm::make_world_group(router.world()));
  for (const ProcessGroup& g : all) {
    for (int r : g.ranks)
      if (r < 0 || r >= router.world())
        throw std::invalid_argument("MPI hybrid communicator: " + g.describe() + " names rank " +
                                    std::to_string(r) + " of a world of " +
                                    std::to_string(router.world()));
    tags_.emplace(g, static_cast<int>(tags_.size()));  // declared twice: the first position
  }
}

int MpiHybridCommunicator::tag_of(const ProcessGroup& group) const {
  const auto it = tags_.find(group);
  if (it == tags_.end())
    throw std::logic_error("MPI hybrid communicator: " + group.describe() +
                           " was not declared when the communicator was made");
  if (!group.contains(rank_))
    throw std::logic_error("MPI hybrid communicator: rank " + std::to_string(rank_) +
                           " is not a member of " + group.describe());
  return it->second;
}

void MpiHybridCommunicator::post_floats(int dst, int tag, const float* data, std::size_t n) {
  router_->post(rank_, dst, Channel::collective, tag, data, n * sizeof(float));
}

void MpiHybridCommunicator::take_floats(int src, int tag, std::span<float> out,
                                        const std::string& op) {
  const std::vector<std::byte> bytes = router_->take(
      rank_, src, Channel::collective, tag, op + " (waiting for rank " + std::to_string(src) + ")");
  if (bytes.size() != out.size_bytes())
    throw comm::CommMismatch(
        rank_, op,
        op + " on rank " + std::to_string(rank_) + ": rank " + std::to_string(src) + " sent " +
            std::to_string(bytes.size() / sizeof(float)) + " floats, expected " +
            std::to_string(out.size()) + " (ranks called different collectives or sizes)");
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
}

void MpiHybridCommunicator::send(int dst, int tag, std::span<const float> data) {
  router_->post(rank_, dst, Channel::point_to_point, tag, data.data(), data.size_bytes());
}

void MpiHybridCommunicator::recv(int src, int tag, std::span<float> data) {
  const std::string what =
      "recv of a message from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")";
  std::vector<std::byte> bytes = router_->take(rank_, src, Channel::point_to_point, tag, what);
  if (bytes.size() != data.size_bytes()) {
    const std::size_t got = bytes.size() / sizeof(float);
    // Keep the message for a matching receive, as the other communicators do.
    router_->put_back(rank_, src, Channel::point_to_point, tag, std::move(bytes));
    throw comm::CommMismatch(rank_, "recv",
                             "recv on rank " + std::to_string(rank_) + " from rank " +
                                 std::to_string(src) + " (tag " + std::to_string(tag) +
                                 ") expects " + std::to_string(data.size()) +
                                 " floats, the message has " + std::to_string(got));
  }
  if (!bytes.empty()) std::memcpy(data.data(), bytes.data(), bytes.size());
}

void MpiHybridCommunicator::all_reduce(const ProcessGroup& group, std::span<float> data,
                                       ReduceOp op) {
  const int tag = tag_of(group), p = group.size(), me = group.index_of(rank_);
  if (p == 1) return;
  const std::string what = "all_reduce on " + group.describe();
  const std::size_t n = data.size();
  const std::size_t lo = chunk_start(n, p, me), len = chunk_start(n, p, me + 1) - lo;
  // 1. Chunk j of my data to member j; my chunk of every member's data, in group-rank order.
  for (int j = 0; j < p; ++j)
    if (j != me)
      post_floats(group.ranks[j], tag, data.data() + chunk_start(n, p, j),
                  chunk_start(n, p, j + 1) - chunk_start(n, p, j));
  std::vector<float> pieces(len * static_cast<std::size_t>(p));  // (p, len)
  for (int j = 0; j < p; ++j) {
    const std::span<float> piece(pieces.data() + len * static_cast<std::size_t>(j), len);
    if (j == me)
      std::copy_n(data.data() + lo, len, piece.data());
    else
      take_floats(group.ranks[j], tag, piece, what);
  }
  // 2. Fold them: ((x0 op x1) op x2) ...
  for (int j = 1; j < p; ++j)
    comm::fold_into(op, pieces.data(), pieces.data() + len * static_cast<std::size_t>(j), len);
  // 3. My reduced chunk to everyone, theirs into place.
  for (int j = 0; j < p; ++j)
    if (j != me) post_floats(group.ranks[j], tag, pieces.data(), len);
  std::copy_n(pieces.data(), len, data.data() + lo);
  for (int j = 0; j < p; ++j)
    if (j != me) {
      const std::size_t start = chunk_start(n, p, j);
      take_floats(group.ranks[j], tag, data.subspan(start, chunk_start(n, p, j + 1) - start), what);
    }
}

void MpiHybridCommunicator::reduce_scatter(const ProcessGroup& group, std::span<const float> input,
                                           std::span<float> output, ReduceOp op) {
  const std::size_t n = output.size();
  comm::check_reduce_scatter(rank_, group, input.size(), n);
  const std::vector<std::size_t> counts(static_cast<std::size_t>(group.size()), n);
  std::vector<std::size_t> at(counts.size());
  for (std::size_t j = 0; j < at.size(); ++j) at[j] = n * j;
  reduce_chunks(group, input, counts, at, output, op, "reduce_scatter on " + group.describe());
}

void MpiHybridCommunicator::reduce_scatter_v(const ProcessGroup& group,
                                             std::span<const float> input,
                                             std::span<const std::size_t> counts,
                                             std::span<float> output, ReduceOp op) {
  const std::vector<std::size_t> at =
      comm::check_reduce_scatter_v(rank_, group, input.size(), counts, output.size());
  reduce_chunks(group, input, counts, at, output, op, "reduce_scatter_v on " + group.describe());
}

void MpiHybridCommunicator::reduce_chunks(const ProcessGroup& group, std::span<const float> input,
                                          std::span<const std::size_t> counts,
                                          std::span<const std::size_t> at, std::span<float> output,
                                          ReduceOp op, const std::string& what) {
  const int tag = tag_of(group), p = group.size(), me = group.index_of(rank_);
  const std::size_t n = output.size();
  for (int j = 0; j < p; ++j)
    if (j != me)
      post_floats(group.ranks[j], tag, input.data() + at[static_cast<std::size_t>(j)],
                  counts[static_cast<std::size_t>(j)]);
  std::vector<float> pieces(n * static_cast<std::size_t>(p));  // (p, n): chunk `me` of each
  for (int j = 0; j < p; ++j) {
    float* piece = pieces.data() + n * static_cast<std::size_t>(j);
    if (j == me)
      std::copy_n(input.data() + at[static_cast<std::size_t>(me)], n, piece);
    else
      take_floats(group.ranks[j], tag, {piece, n}, what);
  }
  for (int j = 1; j < p; ++j)
    comm::fold_into(op, pieces.data(), pieces.data() + n * static_cast<std::size_t>(j), n);
  std::copy_n(pieces.data(), n, output.data());
}

void MpiHybridCommunicator::all_gather(const ProcessGroup& group, std::span<const float> input,
                                       std::span<float> output) {
  const int tag = tag_of(group), p = group.size(), me = group.index_of(rank_);
  const std::size_t n = input.size();
  comm::check_all_gather(rank_, group, n, output.size());
  const std::vector<float> mine(input.begin(), input.end());  // input may overlap output
  for (int j = 0; j < p; ++j)
    if (j != me) post_floats(group.ranks[j], tag, mine.data(), n);
  const std::string what = "all_gather on " + group.describe();
  for (int j = 0; j < p; ++j) {
    const std::span<float> slot = output.subspan(n * static_cast<std::size_t>(j), n);
    if (j == me)
      std::copy(mine.begin(), mine.end(), slot.begin());
    else
      take_floats(group.ranks[j], tag, slot, what);
  }
}

void MpiHybridCommunicator::all_to_all(const ProcessGroup& group, std::span<const float> input,
                                       std::span<float> output) {
  comm::check_all_to_all(rank_, group, input.size(), output.size());
  const auto p = static_cast<std::size_t>(group.size());
  const std::vector<std::size_t> counts(p, input.size() / p);
  all_to_all_v(group, input, counts, output, counts);
}

void MpiHybridCommunicator::all_to_all_v(const ProcessGroup& group, std::span<const float> input,
                                         std::span<const std::size_t> send_counts,
                                         std::span<float> output,
                                         std::span<const std::size_t> recv_counts) {
  const int tag = tag_of(group), p = group.size(), me = group.index_of(rank_);
  const comm::AllToAllOffsets at =
      comm::check_all_to_all_v(rank_, group, input.size(), send_counts, output.size(), recv_counts);
  if (send_counts[me] != recv_counts[me])
    throw comm::CommMismatch(rank_, "all_to_all_v",
                             "all_to_all_v on " + group.describe() + ": rank " +
                                 std::to_string(rank_) + " sends itself " +
                                 std::to_string(send_counts[me]) + " floats but expects " +
                                 std::to_string(recv_counts[me]));
  const std::string what = "all_to_all_v on " + group.describe();
  for (int j = 0; j < p; ++j)
    if (j != me) post_floats(group.ranks[j], tag, input.data() + at.send[j], send_counts[j]);
  std::copy_n(input.data() + at.send[me], send_counts[me], output.data() + at.recv[me]);
  for (int j = 0; j < p; ++j)
    if (j != me) take_floats(group.ranks[j], tag, output.subspan(at.recv[j], recv_counts[j]), what);
}

void MpiHybridCommunicator::broadcast(const ProcessGroup& group, std::span<float> data, int root) {
  const int tag = tag_of(group), p = group.size(), me = group.index_of(rank_);
  comm::check_broadcast_root(group, root);
  if (me == root) {
    for (int j = 0; j < p; ++j)
      if (j != me) post_floats(group.ranks[j], tag, data.data(), data.size());
  } else {
    take_floats(group.ranks[root], tag, data, "broadcast on " + group.describe());
  }
}

void MpiHybridCommunicator::barrier(const ProcessGroup& group) {
  const int tag = tag_of(group), p = group.size(), me = group.index_of(rank_);
  const std::string what = "barrier on " + group.describe();
  if (me == 0) {
    for (int j = 1; j < p; ++j) take_floats(group.ranks[j], tag, {}, what);
    for (int j = 1; j < p; ++j) post_floats(group.ranks[j], tag, nullptr, 0);
  } else {
    post_floats(group.ranks[0], tag, nullptr, 0);
    take_floats(group.ranks[0], tag, {}, what);
  }
}

std::vector<std::string> MpiHybridCommunicator::gather_bytes(const std::string& bytes, int root) {
  if (root < 0 || root >= world())
    throw std::invalid_argument("gather of bytes: root " + std::to_string(root) +
                                " is not a rank of the run");
  if (rank_ != root) {
    router_->post(rank_, root, Channel::bytes, 0, bytes.data(), bytes.size());
    return {};
  }
  std::vector<std::string> out(static_cast<std::size_t>(world()));
  for (int r = 0; r < world(); ++r) {
    if (r == root) {
      out[static_cast<std::size_t>(r)] = bytes;
      continue;
    }
    const std::vector<std::byte> got =
        router_->take(rank_, r, Channel::bytes, 0,
                      "gather over the world (waiting for rank " + std::to_string(r) + ")");
    out[static_cast<std::size_t>(r)].assign(reinterpret_cast<const char*>(got.data()), got.size());
  }
  return out;
}

}  // namespace pipetune::mpi
