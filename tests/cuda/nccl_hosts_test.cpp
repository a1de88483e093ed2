// Which processes NCCL counts as one host (engine/nccl/nccl_hosts.hpp): the pure placement of a
// node's processes by their NCCL_HOSTID, with no MPI and no device. Compiled to nothing when NCCL
// was not found.
#if defined(PIPETUNE_HAVE_NCCL) && PIPETUNE_HAVE_NCCL

#include "engine/nccl/nccl_hosts.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace pipetune::nccl {
namespace {

std::vector<std::uint64_t> ids_of(const std::vector<std::string>& host_ids) {
  std::vector<std::uint64_t> out;
  for (const std::string& id : host_ids) out.push_back(host_identity_hash(id));
  return out;
}

TEST(NcclHosts, FnvHashOfTheIdentityIsStableAndTellsIdentitiesApart) {
  // FNV-1a's published 64-bit values: the offset basis for "", and "a".
  EXPECT_EQ(host_identity_hash(""), 14695981039346656037ull);
  EXPECT_EQ(host_identity_hash("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(host_identity_hash("pipetune-host-0"), host_identity_hash("pipetune-host-1"));
}

TEST(NcclHosts, WithoutHostIdsTheNodeIsOneHost) {
  const auto ids = ids_of({"", "", "", ""});
  for (int r = 0; r < 4; ++r) {
    const HostPlacement p = place_on_host(ids, r);
    EXPECT_EQ(p.local_rank, r);
    EXPECT_EQ(p.local_size, 4);
  }
}

TEST(NcclHosts, DistinctHostIdsMakeEachProcessItsOwnHost) {
  const auto ids = ids_of({"pipetune-host-0", "pipetune-host-1", "pipetune-host-2"});
  for (int r = 0; r < 3; ++r) {
    const HostPlacement p = place_on_host(ids, r);
    EXPECT_EQ(p.local_rank, 0) << "process " << r;
    EXPECT_EQ(p.local_size, 1) << "process " << r;
  }
}

TEST(NcclHosts, ProcessesSharingAnIdAreRankedAmongThemselvesInNodeOrder) {
  // Two "hosts" of two processes each, interleaved, and one process without an id.
  const auto ids = ids_of({"a", "b", "a", "", "b"});
  const int want_rank[] = {0, 0, 1, 0, 1};
  const int want_size[] = {2, 2, 2, 1, 2};
  for (int r = 0; r < 5; ++r) {
    const HostPlacement p = place_on_host(ids, r);
    EXPECT_EQ(p.local_rank, want_rank[r]) << "process " << r;
    EXPECT_EQ(p.local_size, want_size[r]) << "process " << r;
  }
}

TEST(NcclHosts, ANodeRankOutsideTheNodeIsRefused) {
  const auto ids = ids_of({"", ""});
  EXPECT_THROW(place_on_host(ids, 2), std::invalid_argument);
  EXPECT_THROW(place_on_host(ids, -1), std::invalid_argument);
  EXPECT_THROW(place_on_host({}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace pipetune::nccl

#endif
