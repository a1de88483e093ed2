// encode_rank_checkpoint / decode_rank_checkpoint: a rank's state comes back whole, and bytes
// that are not one are refused rather than read past their end.
#include "engine/checkpoint/rank_checkpoint_codec.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace pipetune::checkpoint {
namespace {

RankCheckpoint sample() {
  RankCheckpoint r;
  r.rank = 5;
  r.buffers.push_back({"dense.params", {1.5f, -2.0f, 3.25f}});
  r.buffers.push_back({"w", {1, 2, 3, 4, 5, 6}, {2, 3}});
  r.buffers.push_back({"empty", {}});
  r.rng_state = {1, 0xffffffffffffffffULL};
  r.loader = {2, 1, 77, 3};
  r.meta = {{"k", "v"}, {"empty", ""}};
  return r;
}

TEST(RankCheckpointCodec, RoundTripKeepsEverything) {
  const RankCheckpoint r = sample();
  const RankCheckpoint back = decode_rank_checkpoint(encode_rank_checkpoint(r));
  EXPECT_EQ(back.rank, 5);
  ASSERT_EQ(back.buffers.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.buffers[i].name, r.buffers[i].name);
    EXPECT_EQ(back.buffers[i].values, r.buffers[i].values);
    EXPECT_EQ(back.buffers[i].shape, r.buffers[i].shape);
  }
  EXPECT_EQ(back.rng_state, r.rng_state);
  EXPECT_EQ(back.loader, r.loader);
  EXPECT_EQ(back.meta, r.meta);
}

TEST(RankCheckpointCodec, RefusesWhatIsNotOne) {
  const std::string bytes = encode_rank_checkpoint(sample());
  for (std::size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_THROW(decode_rank_checkpoint(bytes.substr(0, cut)), std::runtime_error) << cut;
  EXPECT_THROW(decode_rank_checkpoint(bytes + "x"), std::runtime_error);
  EXPECT_THROW(decode_rank_checkpoint(std::string(64, 'z')), std::runtime_error);
}

}  // namespace
}  // namespace pipetune::checkpoint
