// PeerExchange's bookkeeping: parcels in order per (src, dst, tag), blocks coming back to their
// sender, and a leaving rank getting back every block of its still in the exchange (a failed
// run's sends that were never received), so its storage frees them before it goes.
#include "engine/runtime/peer_copy_communicator.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "engine/comm/comm_errors.hpp"

namespace pipetune::runtime {
namespace {

TEST(PeerExchange, ParcelsComeOutInOrderPerSenderReceiverAndTag) {
  int a = 0, b = 0, c = 0;  // stand-ins for blocks: only their addresses travel
  PeerExchange x;
  x.post(0, 1, 7, {&a, 4, nullptr, nullptr});
  x.post(0, 1, 7, {&b, 8, nullptr, nullptr});
  x.post(0, 1, 9, {&c, 12, nullptr, nullptr});
  EXPECT_EQ(x.take(0, 1, 9).block, &c);
  EXPECT_EQ(x.take(0, 1, 7).block, &a);
  EXPECT_EQ(x.take(0, 1, 7).block, &b);
  EXPECT_THROW(x.take(0, 1, 7), std::logic_error);  // a token without its parcel
  EXPECT_EQ(x.parcels_posted(), 3u);
  EXPECT_EQ(x.bytes_posted(), 24u);
}

TEST(PeerExchange, BlocksReturnToTheirSender) {
  int a = 0;  // stand-ins for blocks: only their addresses travel
  PeerExchange x;
  x.post(2, 3, 1, {&a, 4, nullptr, nullptr});
  const PeerExchange::Parcel p = x.take(2, 3, 1);
  EXPECT_TRUE(x.reclaim(2).empty());
  x.give_back(2, {const_cast<void*>(p.block), p.bytes, {}});
  const std::vector<PeerExchange::Returned> back = x.reclaim(2);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].block, &a);
  EXPECT_TRUE(x.reclaim(2).empty());
  EXPECT_TRUE(x.reclaim(3).empty());
}

TEST(PeerExchange, ALeavingRankGetsBackWhatWasNeverReceived) {
  int a = 0, b = 0, c = 0;  // stand-ins for blocks: only their addresses travel
  PeerExchange x;
  x.post(0, 1, 1, {&a, 4, nullptr, nullptr});  // received and returned
  x.post(0, 1, 2, {&b, 8, nullptr, nullptr});  // never received
  x.post(1, 0, 1, {&c, 4, nullptr, nullptr});  // another sender's
  const PeerExchange::Parcel p = x.take(0, 1, 1);
  x.give_back(0, {const_cast<void*>(p.block), p.bytes, {}});
  const std::vector<PeerExchange::Returned> left = x.leave(0);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].block, &a);
  EXPECT_EQ(left[1].block, &b);
  EXPECT_EQ(x.take(1, 0, 1).block, &c);  // untouched
}

TEST(PeerExchange, ACollectiveBlockReturnsOnceEveryReaderReleasedIt) {
  int a = 0, b = 0;  // stand-ins for blocks
  PeerExchange x;
  x.post_shared("dp #0", 0, 5, {&a, 4, nullptr, nullptr}, 2);
  x.post_shared("dp #0", 1, 6, {&b, 4, nullptr, nullptr}, 2);
  EXPECT_THROW(x.post_shared("dp #0", 1, 6, {&b, 4, nullptr, nullptr}, 2), std::logic_error);
  EXPECT_EQ(x.take_shared("dp #0", 0).block, &a);
  EXPECT_EQ(x.take_shared("dp #0", 0).block, &a);  // both members read it
  x.release_shared("dp #0", 0, nullptr);
  EXPECT_TRUE(x.reclaim(5).empty());  // one reader still holds it
  x.release_shared("dp #0", 0, nullptr);
  const std::vector<PeerExchange::Returned> back = x.reclaim(5);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].block, &a);
  EXPECT_EQ(back[0].done.size(), 2u);  // each reader's fence
  EXPECT_THROW(x.take_shared("dp #0", 0), std::logic_error);
  // Never read (the run failed first): back to its member when it leaves.
  const std::vector<PeerExchange::Returned> left = x.leave(6);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].block, &b);
  EXPECT_EQ(x.shared_posted(), 2u);
  // A member that comes for it after its owner left gets the owner's failure, not a protocol
  // error: under other timings the member that failed first (a size mismatch) had left already.
  try {
    x.take_shared("dp #0", 1);
    FAIL() << "expected comm::RankFailure";
  } catch (const comm::RankFailure& e) {
    EXPECT_EQ(e.failed_rank(), 6);
    EXPECT_NE(std::string(e.what()).find("rank 6 (group rank 1) failed before its block was read"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::runtime
