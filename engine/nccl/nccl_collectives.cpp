// NcclCommunicator's collectives (nccl_communicator.hpp says how they map onto NCCL): each
// group's MPI and NCCL communicators, the signature check over MPI, and the collectives.
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/collective_checks.hpp"
#include "engine/comm/comm_errors.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/mpi/mpi_check.hpp"
#include "engine/nccl/nccl_check.hpp"
#include "engine/nccl/nccl_communicator.hpp"

namespace pipetune::nccl {

using comm::ProcessGroup;
using comm::ReduceOp;

namespace {

bool overlaps(const float* a, std::size_t na, const float* b, std::size_t nb) {
  const std::less<const float*> before;
  return na > 0 && nb > 0 && before(a, b + nb) && before(b, a + na);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::sum ? ncclSum : ncclMax;
}

const char* op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : "max";
}

}  // namespace

// ---- groups -------------------------------------------------------------------------------------

NcclCommunicator::Group& NcclCommunicator::group_of(const ProcessGroup& group, const char* op) {
  Group* g = groups_.find(group);
  if (g == nullptr)
    throw std::logic_error(std::string("NCCL communicator: ") + op + " on " + group.describe() +
                           ", which was not declared when the communicator was made");
  if (g->mpi == MPI_COMM_NULL)
    throw std::logic_error(std::string("NCCL communicator: ") + op + " on rank " +
                           std::to_string(rank_) + ", which is not a member of " +
                           group.describe());
  return *g;
}

ncclComm_t NcclCommunicator::nccl_of(const ProcessGroup& group, Group& g) {
  if (g.nccl != nullptr) return g.nccl;
  // First use: the group's first member makes the id, MPI carries it to the others.
  const int me = group.index_of(rank_);
  UniqueIdBytes bytes{};
  if (me == 0) {
    ncclUniqueId id;
    PIPETUNE_NCCL_CHECK(nccl_library().GetUniqueId(&id));
    bytes = unique_id_to_bytes(id);
  }
  MPI_Request r = MPI_REQUEST_NULL;
  PIPETUNE_MPI_CHECK(MPI_Ibcast(bytes.data(), NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, g.mpi, &r));
  wait_mpi(r, "the NCCL id of " + group.describe());
  PIPETUNE_NCCL_CHECK(
      nccl_library().CommInitRank(&g.nccl, group.size(), unique_id_from_bytes(bytes), me));
  return g.nccl;
}

void NcclCommunicator::check_signature(const ProcessGroup& group, Group& g,
                                       CollectiveSignature mine) {
  if (!options_.check_collectives) return;
  std::vector<CollectiveSignature> all(static_cast<std::size_t>(group.size()));
  MPI_Request r = MPI_REQUEST_NULL;
  PIPETUNE_MPI_CHECK(
      MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, g.mpi, &r));
  wait_mpi(r, describe_signature(mine) + " on " + group.describe());
  const std::string why = signature_mismatch(all, group.index_of(rank_), group);
  if (!why.empty())
    throw comm::CommMismatch(rank_, describe_signature(mine) + " on " + group.describe(), why);
}

// ---- collectives --------------------------------------------------------------------------------

void NcclCommunicator::all_reduce(const ProcessGroup& group, std::span<float> data, ReduceOp op) {
  Group& g = group_of(group, "all_reduce");
  if (group.size() == 1) return;
  const std::size_t n = data.size();
  check_signature(
      group, g,
      {static_cast<std::int32_t>(CollectiveKind::all_reduce), static_cast<std::int32_t>(op), n});
  const ncclComm_t c = nccl_of(group, g);
  if (n == 0) return;
  after_compute(stream_);
  PIPETUNE_NCCL_CHECK_COMM(c, nccl_library().AllReduce(cv(data.data()), data.data(), n, ncclFloat,
                                                       nccl_op(op), c, stream_));
  wait(stream_, c,
       std::string("all_reduce(") + op_name(op) + ", " + std::to_string(n) + " floats) on " +
           group.describe());
}

void NcclCommunicator::reduce_scatter(const ProcessGroup& group, std::span<const float> input,
                                      std::span<float> output, ReduceOp op) {
  Group& g = group_of(group, "reduce_scatter");
  const std::size_t n = output.size();
  comm::check_reduce_scatter(rank_, group, input.size(), n);
  const int me = group.index_of(rank_);
  if (n == 0) return;
  if (group.size() > 1)
    check_signature(group, g,
                    {static_cast<std::int32_t>(CollectiveKind::reduce_scatter),
                     static_cast<std::int32_t>(op), input.size()});
  after_compute(stream_);
  // NCCL's in-place form is output == input + me * n; any other overlap stages the input.
  const float* in = input.data();
  void* staged = nullptr;
  const bool nccl_in_place = output.data() == input.data() + n * static_cast<std::size_t>(me);
  if (!nccl_in_place && overlaps(input.data(), input.size(), output.data(), n)) {
    staged = stage(input.data(), input.size(), stream_);
    in = static_cast<const float*>(staged);
  }
  ncclComm_t c = nullptr;
  if (group.size() == 1) {
    if (in != output.data())
      PIPETUNE_CUDA_CHECK(
          cudaMemcpyAsync(output.data(), cv(in), bytes_of(n), cudaMemcpyDeviceToDevice, stream_));
  } else {
    c = nccl_of(group, g);
    PIPETUNE_NCCL_CHECK_COMM(c, nccl_library().ReduceScatter(cv(in), output.data(), n, ncclFloat,
                                                             nccl_op(op), c, stream_));
  }
  if (staged != nullptr) PIPETUNE_CUDA_CHECK(cudaFreeAsync(staged, stream_));
  wait(stream_, c, "reduce_scatter on " + group.describe());
}

namespace {
// A non-root's receive buffer of ncclReduce, which NCCL ignores: a valid device address all the
// same (the send buffer's), so no argument check refuses it.
void* not_written(const float* send) {
  return const_cast<float*>(send);
}
}  // namespace

void NcclCommunicator::reduce_scatter_v(const ProcessGroup& group, std::span<const float> input,
                                        std::span<const std::size_t> counts,
                                        std::span<float> output, ReduceOp op) {
  Group& g = group_of(group, "reduce_scatter_v");
  const std::vector<std::size_t> at =
      comm::check_reduce_scatter_v(rank_, group, input.size(), counts, output.size());
  const auto p = static_cast<std::size_t>(group.size());
  const auto me = static_cast<std::size_t>(group.index_of(rank_));
  if (p > 1 && options_.check_collectives) {
    check_signature(group, g,
                    {static_cast<std::int32_t>(CollectiveKind::reduce_scatter_v),
                     static_cast<std::int32_t>(op), input.size()});
    // Every member must split the input the same way (else NCCL would hang).
    std::vector<std::uint64_t> mine(counts.begin(), counts.end()), all(p * p);
    MPI_Request r = MPI_REQUEST_NULL;
    PIPETUNE_MPI_CHECK(MPI_Iallgather(mine.data(), static_cast<int>(p), MPI_UINT64_T, all.data(),
                                      static_cast<int>(p), MPI_UINT64_T, g.mpi, &r));
    wait_mpi(r, "reduce_scatter_v counts on " + group.describe());
    for (std::size_t j = 0; j < p; ++j)
      if (!std::equal(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(j * p)))
        throw comm::CommMismatch(
            rank_, "reduce_scatter_v on " + group.describe(),
            "reduce_scatter_v on " + group.describe() + ": rank " + std::to_string(group.ranks[j]) +
                " splits the input otherwise than rank " + std::to_string(rank_));
  }
  after_compute(stream_);
  // NCCL's in-place form is output == input + at[me]; any other overlap stages the input.
  const float* in = input.data();
  void* staged = nullptr;
  const bool nccl_in_place = output.data() == input.data() + at[me];
  if (!nccl_in_place && overlaps(input.data(), input.size(), output.data(), output.size())) {
    staged = stage(input.data(), input.size(), stream_);
    in = static_cast<const float*>(staged);
  }
  ncclComm_t c = nullptr;
  if (p == 1) {
    if (in != output.data() && !output.empty())
      PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(output.data(), cv(in), bytes_of(output.size()),
                                          cudaMemcpyDeviceToDevice, stream_));
  } else {
    c = nccl_of(group, g);
    PIPETUNE_NCCL_CHECK(nccl_library().GroupStart());
    for (std::size_t j = 0; j < p; ++j) {
      if (counts[j] == 0) continue;  // the same on every member
      PIPETUNE_NCCL_CHECK_COMM(
          c, nccl_library().Reduce(cv(in + at[j]),
                                   j == me ? output.data() : not_written(in + at[j]), counts[j],
                                   ncclFloat, nccl_op(op), static_cast<int>(j), c, stream_));
    }
    PIPETUNE_NCCL_CHECK(nccl_library().GroupEnd());
  }
  if (staged != nullptr) PIPETUNE_CUDA_CHECK(cudaFreeAsync(staged, stream_));
  wait(stream_, c, "reduce_scatter_v on " + group.describe());
}

void NcclCommunicator::all_gather(const ProcessGroup& group, std::span<const float> input,
                                  std::span<float> output) {
  Group& g = group_of(group, "all_gather");
  const std::size_t n = input.size();
  comm::check_all_gather(rank_, group, n, output.size());
  const int me = group.index_of(rank_);
  if (n == 0) return;
  if (group.size() > 1)
    check_signature(group, g, {static_cast<std::int32_t>(CollectiveKind::all_gather), 0, n});
  after_compute(stream_);
  // NCCL's in-place form is input == output + me * n; any other overlap stages the input.
  const float* in = input.data();
  void* staged = nullptr;
  const bool nccl_in_place = input.data() == output.data() + n * static_cast<std::size_t>(me);
  if (!nccl_in_place && overlaps(input.data(), n, output.data(), output.size())) {
    staged = stage(input.data(), n, stream_);
    in = static_cast<const float*>(staged);
  }
  ncclComm_t c = nullptr;
  if (group.size() == 1) {
    if (in != output.data())
      PIPETUNE_CUDA_CHECK(
          cudaMemcpyAsync(output.data(), cv(in), bytes_of(n), cudaMemcpyDeviceToDevice, stream_));
  } else {
    c = nccl_of(group, g);
    PIPETUNE_NCCL_CHECK_COMM(
        c, nccl_library().AllGather(cv(in), output.data(), n, ncclFloat, c, stream_));
  }
  if (staged != nullptr) PIPETUNE_CUDA_CHECK(cudaFreeAsync(staged, stream_));
  wait(stream_, c, "all_gather on " + group.describe());
}

void NcclCommunicator::all_to_all(const ProcessGroup& group, std::span<const float> input,
                                  std::span<float> output) {
  Group& g = group_of(group, "all_to_all");
  comm::check_all_to_all(rank_, group, input.size(), output.size());
  const auto p = static_cast<std::size_t>(group.size());
  if (input.empty()) return;
  if (overlaps(input.data(), input.size(), output.data(), output.size()))
    throw std::invalid_argument("all_to_all on " + group.describe() + ": input and output overlap");
  const std::size_t chunk = input.size() / p;
  std::vector<std::size_t> counts(p, chunk);
  std::vector<std::size_t> offsets(p);
  for (std::size_t j = 0; j < p; ++j) offsets[j] = j * chunk;
  if (p > 1)
    check_signature(group, g,
                    {static_cast<std::int32_t>(CollectiveKind::all_to_all), 0, input.size()});
  ncclComm_t c = p > 1 ? nccl_of(group, g) : nullptr;
  after_compute(stream_);
  const auto me = static_cast<std::size_t>(group.index_of(rank_));
  PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(output.data() + offsets[me], cv(input.data() + offsets[me]),
                                      bytes_of(chunk), cudaMemcpyDeviceToDevice, stream_));
  if (c != nullptr) {
    PIPETUNE_NCCL_CHECK(nccl_library().GroupStart());
    for (std::size_t j = 0; j < p; ++j) {
      if (j == me) continue;
      const int peer = static_cast<int>(j);
      PIPETUNE_NCCL_CHECK_COMM(c, nccl_library().Send(cv(input.data() + offsets[j]), chunk,
                                                      ncclFloat, peer, c, stream_));
      PIPETUNE_NCCL_CHECK_COMM(
          c, nccl_library().Recv(output.data() + offsets[j], chunk, ncclFloat, peer, c, stream_));
    }
    PIPETUNE_NCCL_CHECK(nccl_library().GroupEnd());
  }
  wait(stream_, c, "all_to_all on " + group.describe());
}

void NcclCommunicator::all_to_all_v(const ProcessGroup& group, std::span<const float> input,
                                    std::span<const std::size_t> send_counts,
                                    std::span<float> output,
                                    std::span<const std::size_t> recv_counts) {
  Group& g = group_of(group, "all_to_all_v");
  const comm::AllToAllOffsets at =
      comm::check_all_to_all_v(rank_, group, input.size(), send_counts, output.size(), recv_counts);
  if (overlaps(input.data(), input.size(), output.data(), output.size()))
    throw std::invalid_argument("all_to_all_v on " + group.describe() +
                                ": input and output overlap");
  const auto p = static_cast<std::size_t>(group.size());
  const auto me = static_cast<std::size_t>(group.index_of(rank_));
  if (p > 1 && options_.check_collectives) {
    check_signature(group, g,
                    {static_cast<std::int32_t>(CollectiveKind::all_to_all_v), 0, input.size()});
    // What each member sends me must be what I expect from it (else NCCL would hang).
    std::vector<std::uint64_t> mine(send_counts.begin(), send_counts.end()), theirs(p);
    MPI_Request r = MPI_REQUEST_NULL;
    PIPETUNE_MPI_CHECK(
        MPI_Ialltoall(mine.data(), 1, MPI_UINT64_T, theirs.data(), 1, MPI_UINT64_T, g.mpi, &r));
    wait_mpi(r, "all_to_all_v counts on " + group.describe());
    for (std::size_t j = 0; j < p; ++j)
      if (theirs[j] != recv_counts[j])
        throw comm::CommMismatch(
            rank_, "all_to_all_v on " + group.describe(),
            "all_to_all_v on " + group.describe() + ": rank " + std::to_string(group.ranks[j]) +
                " sends " + std::to_string(theirs[j]) + " floats to rank " + std::to_string(rank_) +
                ", which expects " + std::to_string(recv_counts[j]));
  }
  if (send_counts[me] != recv_counts[me])
    throw comm::CommMismatch(rank_, "all_to_all_v on " + group.describe(),
                             "all_to_all_v on " + group.describe() + ": rank " +
                                 std::to_string(rank_) + " sends itself " +
                                 std::to_string(send_counts[me]) + " floats but expects " +
                                 std::to_string(recv_counts[me]));
  ncclComm_t c = p > 1 ? nccl_of(group, g) : nullptr;
  after_compute(stream_);
  if (send_counts[me] > 0)
    PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(output.data() + at.recv[me], cv(input.data() + at.send[me]),
                                        bytes_of(send_counts[me]), cudaMemcpyDeviceToDevice,
                                        stream_));
  if (c != nullptr) {
    PIPETUNE_NCCL_CHECK(nccl_library().GroupStart());
    for (std::size_t j = 0; j < p; ++j) {
      if (j == me) continue;
      const int peer = static_cast<int>(j);
      if (send_counts[j] > 0)
        PIPETUNE_NCCL_CHECK_COMM(
            c, nccl_library().Send(cv(input.data() + at.send[j]), send_counts[j], ncclFloat, peer,
                                   c, stream_));
      if (recv_counts[j] > 0)
        PIPETUNE_NCCL_CHECK_COMM(c, nccl_library().Recv(output.data() + at.recv[j], recv_counts[j],
                                                        ncclFloat, peer, c, stream_));
    }
    PIPETUNE_NCCL_CHECK(nccl_library().GroupEnd());
  }
  wait(stream_, c, "all_to_all_v on " + group.describe());
}

void NcclCommunicator::broadcast(const ProcessGroup& group, std::span<float> data, int root) {
  Group& g = group_of(group, "broadcast");
  comm::check_broadcast_root(group, root);
  if (group.size() == 1) return;
  const std::size_t n = data.size();
  check_signature(group, g, {static_cast<std::int32_t>(CollectiveKind::broadcast), root, n});
  const ncclComm_t c = nccl_of(group, g);
  if (n == 0) return;
  after_compute(stream_);
  PIPETUNE_NCCL_CHECK_COMM(
      c, nccl_library().Broadcast(cv(data.data()), data.data(), n, ncclFloat, root, c, stream_));
  wait(stream_, c, "broadcast on " + group.describe());
}

void NcclCommunicator::barrier(const ProcessGroup& group) {
  Group& g = group_of(group, "barrier");
  if (group.size() == 1) return;
  MPI_Request r = MPI_REQUEST_NULL;
  PIPETUNE_MPI_CHECK(MPI_Ibarrier(g.mpi, &r));
  wait_mpi(r, "barrier on " + group.describe());
}

}  // namespace pipetune::nccl
