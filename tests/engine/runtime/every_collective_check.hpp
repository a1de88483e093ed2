// Every collective of single-GPU mode's PeerCopyCommunicator over device spans, against the thread
// communicator on host copies of the same inputs in the same run: the results must be the same
// bits (both fold in group-rank order, one float add or max per element and step). One body for
// every storage: the host emulation of a device (guarded_device.hpp, run in CI) and the GPU
// (tests/gpu/cuda_peer_collectives_test.cpp), so what CI checks is what the GPU runs.
//
// Run by each of 4 ranks of a comm::ThreadCluster, each with its own storage and a
// PeerCopyCommunicator over the run's PeerExchange with all-reduce pieces of `piece` floats.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/runtime/peer_copy_communicator.hpp"
#include "engine/tensor/device_allocator.hpp"

namespace pipetune::testing::every_collective {

inline std::vector<float> values(int rank, int salt, std::size_t n) {
  std::mt19937 rng(static_cast<unsigned>(rank * 1000 + salt));
  // Magnitudes apart, so that another summation order changes the bits.
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = u(rng) * std::pow(10.0f, static_cast<float>((rank + static_cast<int>(i)) % 7 - 3));
  return v;
}

// Bitwise equality, NaN included.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

constexpr std::size_t kSumFloats = 2500, kMaxFloats = 300;  // the two all-reduces

// Blocks each member posts to the exchange in check(), with all-reduce pieces of `piece` floats:
// one per all-reduce round, each reduce-scatter, all-to-all, each all-gather and all-to-all-v
// (the broadcast's root posts one more).
constexpr std::size_t posts_per_member(std::size_t piece) {
  return (kSumFloats + piece - 1) / piece + (kMaxFloats + piece - 1) / piece + 2 + 1 + 2 + 1;
}

// The device collectives each member runs in check().
constexpr std::size_t collectives_per_member(std::size_t piece) {
  return posts_per_member(piece) + 1;  // the broadcast: its readers post nothing
}

inline void check(runtime::PeerCopyCommunicator& peers, tensor::DeviceAllocator& storage,
                  comm::Communicator& reference, std::size_t piece) {
  const comm::ProcessGroup world = comm::make_world_group(4);
  const int r = peers.rank();
  std::vector<std::pair<float*, std::size_t>> blocks;
  const auto on_device = [&](const std::vector<float>& v) -> float* {
    if (v.empty()) return nullptr;
    auto* p = static_cast<float*>(
        storage.allocate(v.size() * sizeof(float), profiler::MemoryCategory::Temporaries));
    storage.copy_from_host(p, v.data(), v.size() * sizeof(float));
    blocks.emplace_back(p, v.size());
    return p;
  };
  const auto to_host = [&](const float* p, std::size_t n) {
    std::vector<float> out(n);
    if (n > 0) storage.copy_to_host(out.data(), p, n * sizeof(float));
    return out;
  };

  // All-reduces in rounds of `piece` floats; a NaN wins a max.
  std::vector<float> sum = values(r, 1, kSumFloats);
  float* dsum = on_device(sum);
  peers.all_reduce(world, {dsum, sum.size()}, comm::ReduceOp::sum);
  reference.all_reduce(world, sum, comm::ReduceOp::sum);
  EXPECT_TRUE(same_bits(to_host(dsum, sum.size()), sum)) << "all_reduce sum on rank " << r;

  std::vector<float> mx = values(r, 2, kMaxFloats);
  if (r == 1) mx[5] = std::numeric_limits<float>::quiet_NaN();
  float* dmx = on_device(mx);
  peers.all_reduce(world, {dmx, mx.size()}, comm::ReduceOp::max);
  reference.all_reduce(world, mx, comm::ReduceOp::max);
  const std::vector<float> got_max = to_host(dmx, mx.size());
  EXPECT_TRUE(std::isnan(got_max[5])) << "NaN wins a max, rank " << r;
  EXPECT_TRUE(same_bits(got_max, mx)) << "all_reduce max on rank " << r;

  const std::vector<float> in = values(r, 3, 4 * 256);
  std::vector<float> chunk(256);
  float* din = on_device(in);
  float* dchunk = on_device(chunk);
  peers.reduce_scatter(world, {din, in.size()}, {dchunk, chunk.size()}, comm::ReduceOp::sum);
  reference.reduce_scatter(world, in, chunk, comm::ReduceOp::sum);
  EXPECT_TRUE(same_bits(to_host(dchunk, chunk.size()), chunk)) << "reduce_scatter on rank " << r;

  // Uneven chunks, one empty (ZeRO-1 around a sparse table), in place: the member's own chunk.
  const std::vector<std::size_t> counts = {300, 0, 17, 211};
  std::vector<std::size_t> starts(4, 0);
  for (std::size_t j = 1; j < 4; ++j) starts[j] = starts[j - 1] + counts[j - 1];
  const std::vector<float> uneven = values(r, 8, starts[3] + counts[3]);
  const auto me = static_cast<std::size_t>(r);
  std::vector<float> own(counts[me]);
  float* duneven = on_device(uneven);
  peers.reduce_scatter_v(world, {duneven, uneven.size()}, counts,
                         {duneven + starts[me], counts[me]}, comm::ReduceOp::sum);
  reference.reduce_scatter_v(world, uneven, counts, own, comm::ReduceOp::sum);
  EXPECT_TRUE(same_bits(to_host(duneven + starts[me], counts[me]), own))
      << "reduce_scatter_v on rank " << r;

  std::vector<float> b = values(r, 4, 700);
  float* db = on_device(b);
  peers.broadcast(world, {db, b.size()}, 3);
  reference.broadcast(world, b, 3);
  EXPECT_TRUE(same_bits(to_host(db, b.size()), b)) << "broadcast on rank " << r;

  const std::vector<float> parts = values(r, 5, 4 * 64);
  std::vector<float> swapped(parts.size());
  float* dparts = on_device(parts);
  float* dswapped = on_device(swapped);
  peers.all_to_all(world, {dparts, parts.size()}, {dswapped, swapped.size()});
  reference.all_to_all(world, parts, swapped);
  EXPECT_TRUE(same_bits(to_host(dswapped, swapped.size()), swapped)) << "all_to_all on " << r;

  // All-gather into another span (sequence parallelism's gather), then in place (ZeRO-3's
  // parameter gather: each member's input is its own chunk of the output).
  const std::vector<float> mine = values(r, 6, 333);
  std::vector<float> gathered(4 * mine.size());
  float* dmine = on_device(mine);
  float* dgathered = on_device(gathered);
  peers.all_gather(world, {dmine, mine.size()}, {dgathered, gathered.size()});
  reference.all_gather(world, mine, gathered);
  EXPECT_TRUE(same_bits(to_host(dgathered, gathered.size()), gathered))
      << "all_gather on rank " << r;
  std::vector<float> in_place(gathered.size(), 0.0f);
  const std::size_t at = static_cast<std::size_t>(r) * mine.size();
  std::copy(mine.begin(), mine.end(), in_place.begin() + static_cast<std::ptrdiff_t>(at));
  float* dplace = on_device(in_place);
  peers.all_gather(world, {dplace + at, mine.size()}, {dplace, in_place.size()});
  EXPECT_TRUE(same_bits(to_host(dplace, in_place.size()), gathered))
      << "all_gather in place on rank " << r;

  // Variable parts (the MoE dispatch): rank i sends (i + j) % 3 * 50 floats to rank j and rank 2
  // sends nothing at all, so some members pass empty spans.
  std::vector<std::size_t> send(4), recv(4);
  std::size_t sent = 0, received = 0;
  for (std::size_t j = 0; j < 4; ++j) {
    send[j] = r == 2 ? 0 : (static_cast<std::size_t>(r) + j) % 3 * 50;
    recv[j] = j == 2 ? 0 : (j + static_cast<std::size_t>(r)) % 3 * 50;
    sent += send[j];
    received += recv[j];
  }
  const std::vector<float> vin = values(r, 7, sent);
  std::vector<float> vout(received);
  float* dvin = on_device(vin);
  float* dvout = on_device(vout);
  peers.all_to_all_v(world, {dvin, sent}, send, {dvout, received}, recv);
  reference.all_to_all_v(world, vin, send, vout, recv);
  EXPECT_TRUE(same_bits(to_host(dvout, received), vout)) << "all_to_all_v on rank " << r;

  EXPECT_EQ(peers.device_collectives(), collectives_per_member(piece)) << "rank " << r;
  storage.synchronize();
  for (auto [p, n] : blocks) storage.deallocate(p, n * sizeof(float));
}

}  // namespace pipetune::testing::every_collective
