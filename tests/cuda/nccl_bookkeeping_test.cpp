// The NCCL communicator's host-side bookkeeping (engine/nccl/nccl_bookkeeping.hpp): the unique id
// as bytes, tag matching over NCCL's tagless FIFOs, the per-group table, collective signatures and
// link lists. No device and no NCCL call (nccl.h only for the id type). Compiled to nothing when
// NCCL was not found.
#if defined(PIPETUNE_HAVE_NCCL) && PIPETUNE_HAVE_NCCL

#include "engine/nccl/nccl_bookkeeping.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace pipetune::nccl {
namespace {

TEST(NcclUniqueId, RoundTripsThroughItsBytes) {
  ncclUniqueId id;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) id.internal[i] = static_cast<char>(i * 7 + 3);
  const UniqueIdBytes bytes = unique_id_to_bytes(id);
  ASSERT_EQ(bytes.size(), 128u);  // NCCL_UNIQUE_ID_BYTES since NCCL 2.0
  EXPECT_EQ(bytes[0], 3);
  EXPECT_EQ(bytes[10], 73);
  const ncclUniqueId back = unique_id_from_bytes(bytes);
  EXPECT_EQ(std::memcmp(&back, &id, sizeof id), 0);
}

TEST(NcclUniqueId, RefusesBytesOfAnotherSize) {
  std::vector<std::uint8_t> short_id(127, 0);
  EXPECT_THROW(unique_id_from_bytes(short_id), std::invalid_argument);
  std::vector<std::uint8_t> long_id(129, 0);
  EXPECT_THROW(unique_id_from_bytes(long_id), std::invalid_argument);
}

// Replays what recv does over a sequence of headers (the order the sender sent them): each recv
// first takes the oldest stashed message of its tag, else reads headers, stashing the others,
// until its tag comes. Returns, for each recv, the sequence number of the message it got.
std::vector<int> replay(const std::vector<MessageHeader>& sent, const std::vector<int>& wanted) {
  TagMailbox box;
  std::size_t next = 0;
  std::vector<int> got;
  for (int tag : wanted) {
    if (auto m = box.take(tag)) {
      got.push_back(static_cast<int>(m->count));  // the test stores the sequence number there
      continue;
    }
    for (;;) {
      const MessageHeader& h = sent.at(next);
      const int seq = static_cast<int>(next++);
      if (box.on_header(h, tag) == HeaderAction::deliver) {
        got.push_back(seq);
        break;
      }
      box.stash(h.tag, {nullptr, static_cast<std::uint64_t>(seq)});
    }
  }
  EXPECT_EQ(box.size(), 0u);
  return got;
}

TEST(NcclTagMailbox, TagsReceivedInTheOrderSentNeedNoStash) {
  TagMailbox box;
  EXPECT_EQ(box.on_header({5, 10}, 5), HeaderAction::deliver);
  EXPECT_EQ(box.on_header({4, 10}, 5), HeaderAction::stash);
  EXPECT_EQ(replay({{1, 0}, {2, 0}, {1, 0}}, {1, 2, 1}), (std::vector<int>{0, 1, 2}));
}

// The interface's promise: per (src, dst, tag) in order, recv takes the oldest match, whatever
// was sent with other tags in between (a 1F1B stage receiving a gradient before an activation).
TEST(NcclTagMailbox, RecvTakesTheOldestMatchAcrossOtherTags) {
  const std::vector<MessageHeader> sent = {{7, 0}, {7, 0}, {3, 0}, {7, 0}, {3, 0}};
  EXPECT_EQ(replay(sent, {3, 7, 3, 7, 7}), (std::vector<int>{2, 0, 4, 1, 3}));
  EXPECT_EQ(replay(sent, {3, 3, 7, 7, 7}), (std::vector<int>{2, 4, 0, 1, 3}));
}

TEST(NcclTagMailbox, DrainReturnsEveryStashedMessage) {
  TagMailbox box;
  int a = 0, b = 0;
  box.stash(1, {&a, 1});
  box.stash(2, {&b, 2});
  box.stash(1, {&b, 3});
  EXPECT_EQ(box.size(), 3u);
  EXPECT_FALSE(box.take(9).has_value());
  EXPECT_EQ(box.drain().size(), 3u);
  EXPECT_EQ(box.size(), 0u);
  EXPECT_FALSE(box.take(1).has_value());
}

TEST(NcclTagMailbox, SizeMismatchNamesBothSizes) {
  EXPECT_EQ(recv_size_mismatch(1, 0, 3, 4, 4), "");
  EXPECT_EQ(recv_size_mismatch(1, 0, 3, 4, 5),
            "recv on rank 1 from rank 0 (tag 3) expects 4 floats, the message has 5");
}

// Groups are keyed by name and members: the same members under another name are another stream
// of collectives, so another NCCL communicator; each is made once.
TEST(NcclGroupTable, MakesOneValuePerNameAndMembers) {
  GroupTable<int> table;
  int made = 0;
  const auto make = [&] { return ++made; };
  const comm::ProcessGroup tp{"tp", {0, 1}}, dp{"dp", {0, 1}}, tp2{"tp", {2, 3}};
  EXPECT_EQ(table.get_or_make(tp, make), 1);
  EXPECT_EQ(table.get_or_make(tp, make), 1);
  EXPECT_EQ(table.get_or_make(dp, make), 2);
  EXPECT_EQ(table.get_or_make(tp2, make), 3);
  EXPECT_EQ(table.get_or_make(comm::ProcessGroup{"tp", {0, 1}}, make), 1);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.find(comm::ProcessGroup{"tp", {1, 0}}), nullptr);  // order is group rank
  ASSERT_NE(table.find(dp), nullptr);
  EXPECT_EQ(*table.find(dp), 2);
}

TEST(NcclCollectiveSignature, AgreeingMembersPass) {
  const comm::ProcessGroup g{"dp", {0, 2, 4}};
  const CollectiveSignature s{static_cast<std::int32_t>(CollectiveKind::all_reduce), 0, 64};
  const std::vector<CollectiveSignature> all(3, s);
  EXPECT_EQ(signature_mismatch(all, 1, g), "");
}

TEST(NcclCollectiveSignature, AMemberWithAnotherSizeOrRootIsNamed) {
  const comm::ProcessGroup g{"dp", {0, 2, 4}};
  const auto ar = static_cast<std::int32_t>(CollectiveKind::all_reduce);
  std::vector<CollectiveSignature> all = {{ar, 0, 64}, {ar, 0, 64}, {ar, 0, 65}};
  EXPECT_EQ(signature_mismatch(all, 0, g),
            "on dp group [0, 2, 4], rank 0 called all_reduce(sum, 64 floats) but rank 4 called "
            "all_reduce(sum, 65 floats)");
  const auto bc = static_cast<std::int32_t>(CollectiveKind::broadcast);
  all = {{bc, 1, 8}, {bc, 0, 8}, {bc, 1, 8}};
  EXPECT_EQ(signature_mismatch(all, 2, g),
            "on dp group [0, 2, 4], rank 4 called broadcast(root 1, 8 floats) but rank 2 called "
            "broadcast(root 0, 8 floats)");
  const auto ag = static_cast<std::int32_t>(CollectiveKind::all_gather);
  all = {{ar, 1, 8}, {ag, 0, 8}, {ar, 1, 8}};
  EXPECT_NE(signature_mismatch(all, 0, g).find("all_gather(8 floats)"), std::string::npos);
}

TEST(NcclCollectiveSignature, AllToAllVMembersMayDifferInCount) {
  const comm::ProcessGroup g{"ep", {0, 1}};
  const auto v = static_cast<std::int32_t>(CollectiveKind::all_to_all_v);
  const std::vector<CollectiveSignature> all = {{v, 0, 10}, {v, 0, 3}};
  EXPECT_EQ(signature_mismatch(all, 0, g), "");
}

TEST(NcclLinks, EveryOrderedPairByDefault) {
  const auto links = resolve_links({}, 3);
  EXPECT_EQ(links,
            (std::vector<std::pair<int, int>>{{0, 1}, {0, 2}, {1, 0}, {1, 2}, {2, 0}, {2, 1}}));
  EXPECT_TRUE(resolve_links({}, 1).empty());
}

TEST(NcclLinks, GivenLinksAreValidated) {
  const std::vector<std::pair<int, int>> pipeline = {{0, 1}, {1, 0}, {1, 2}, {2, 1}};
  EXPECT_EQ(resolve_links(pipeline, 3), pipeline);
  const std::vector<std::pair<int, int>> self = {{1, 1}};
  EXPECT_THROW(resolve_links(self, 3), std::invalid_argument);
  const std::vector<std::pair<int, int>> outside = {{0, 3}};
  EXPECT_THROW(resolve_links(outside, 3), std::invalid_argument);
  const std::vector<std::pair<int, int>> twice = {{0, 1}, {0, 1}};
  EXPECT_THROW(resolve_links(twice, 3), std::invalid_argument);
}

}  // namespace
}  // namespace pipetune::nccl

#endif
