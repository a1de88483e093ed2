// The compact counter block (db/store/counter_block.hpp): samples come back bit for bit, whole
// numbers and halves or quarters stored as integers, and any other value (0.1, -0, NaN,
// infinities, a whole number over 2^53, the smallest denormal) as the double's bits; the sizes are
// the format's arithmetic; a rank out of its type's range is named corrupt.
#include "db/store/counter_block.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/errors.hpp"

namespace pipetune::db {
namespace {

std::uint64_t bits(double v) {
  std::uint64_t u = 0;
  std::memcpy(&u, &v, sizeof v);
  return u;
}

std::size_t expect_round_trip(const std::vector<PackedCounter>& samples) {
  std::vector<std::uint8_t> blob;
  encode_counter_block(samples.data(), samples.size(), blob);
  std::vector<profiler::CounterSample> back;
  decode_counter_block(blob.data(), blob.size(), static_cast<std::int64_t>(samples.size()), 1, 0,
                       "t.db", back);
  EXPECT_EQ(back.size(), samples.size());
  for (std::size_t i = 0; i < samples.size() && i < back.size(); ++i) {
    EXPECT_EQ(back[i].t_ns, samples[i].t_ns) << "sample " << i;
    EXPECT_EQ(back[i].rank, samples[i].rank) << "sample " << i;
    EXPECT_EQ(back[i].name, samples[i].name) << "sample " << i;
    EXPECT_EQ(bits(back[i].value), bits(samples[i].value))
        << "sample " << i << ": wrote " << samples[i].value << ", read " << back[i].value;
  }
  return blob.size();
}

TEST(CounterBlock, WholeNumbersAndEveryOtherValueComeBackBitForBit) {
  std::mt19937_64 rng(5);
  std::vector<PackedCounter> whole;
  std::int64_t t = 1'700'000'000'000'000'000;
  for (int i = 0; i < 4096; ++i) {
    t += static_cast<std::int64_t>(rng() % 100000) - 20000;  // times go back too (other ranks)
    whole.push_back({t, static_cast<double>(static_cast<std::int64_t>(rng() % 64) - 8),
                     static_cast<std::int32_t>(rng() % 1024), static_cast<std::uint32_t>(i % 3)});
  }
  // 4096 samples of a 3-byte time step, a 1-byte value, a 2-byte rank and a 1-byte name: the
  // header (format, mode, first time of 9 bytes, 4 widths, 4 small smallest values) and 7 bytes
  // a sample.
  EXPECT_LE(expect_round_trip(whole), 2 + 9 + 4 + 4 * 10 + 4096 * 7u);

  // Halves and quarters as integers scaled; the blocks of the other values as their bits.
  std::vector<PackedCounter> halves = whole;
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i].value += (i % 4) * 0.25;
  EXPECT_LE(expect_round_trip(halves), 2 + 9 + 4 + 4 * 10 + 4096 * 7u);
  const double specials[] = {0.1,
                             -0.0,
                             std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             9007199254740994.0,  // whole, over 2^53
                             std::numeric_limits<double>::denorm_min()};
  for (double special : specials) {
    std::vector<PackedCounter> mixed = {whole[0], whole[1], whole[2]};
    mixed[1].value = special;
    SCOPED_TRACE(special);
    expect_round_trip(mixed);
  }
  // Extremes of rank and name, and of the whole numbers stored as integers.
  expect_round_trip({{-5, 9007199254740992.0, std::numeric_limits<std::int32_t>::min(), 0},
                     {5, -9007199254740992.0, std::numeric_limits<std::int32_t>::max(),
                      std::numeric_limits<std::uint32_t>::max()}});
}

TEST(CounterBlock, ARankOutOfRangeOrAWrongSizeIsNamed) {
  std::vector<PackedCounter> one = {{10, 1.0, 0, 0}};
  std::vector<std::uint8_t> blob;
  encode_counter_block(one.data(), 1, blob);
  // All columns are width 0 for one sample; the rank's smallest value is the third varint after
  // the widths: format, mode, t (zigzag 20), 4 widths, then t step, value, rank.
  const std::size_t rank_varint = 1 + 1 + 1 + 4 + 1 + 1;
  ASSERT_EQ(blob.size(), rank_varint + 2);
  ASSERT_EQ(blob[rank_varint], 0);
  blob[rank_varint] = 0x80;  // zigzag 2^32: rank 2^31
  const std::uint8_t rest[] = {0x80, 0x80, 0x80, 0x10};
  blob.insert(blob.begin() + static_cast<std::ptrdiff_t>(rank_varint) + 1, rest, rest + 4);
  std::vector<profiler::CounterSample> out;
  try {
    decode_counter_block(blob.data(), blob.size(), 1, 3, 40, "t.db", out);
    FAIL() << "rank " << out.at(0).rank;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "t.db: corrupt counter block of run 3 at sample 40 (sample 0 has a rank or name "
                  "out of its range)"),
              std::string::npos)
        << e.what();
  }
  encode_counter_block(one.data(), 1, blob);
  blob.push_back(0);
  EXPECT_THROW(decode_counter_block(blob.data(), blob.size(), 1, 3, 40, "t.db", out), InputError);
}

}  // namespace
}  // namespace pipetune::db
