// The compact span block (db/store/span_block.hpp): every span comes back field for field from
// what was encoded (the spans themselves are the reference), at every column width from 0 to 8
// bytes and at the extremes of each field's type; the sizes are the format's arithmetic; and a
// BLOB that is cut short, padded, of another format or width, or that decodes to a field out of
// its type's range or a span that ends before it starts, is named corrupt (InputError).
#include "db/store/span_block.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"

namespace pipetune::db {
namespace {

std::string describe(const PackedSpan& p) {
  std::ostringstream o;
  o << "{start " << p.start_ns << ", end " << p.end_ns << ", seq " << p.seq << ", name " << p.name
    << ", mb " << p.microbatch << ", peer " << p.peer << ", chunk " << p.chunk << ", kind "
    << int(p.kind) << "}";
  return o.str();
}

// Encodes and decodes `spans`, and checks each field; returns the BLOB's size.
std::size_t expect_round_trip(const std::vector<PackedSpan>& spans) {
  std::vector<std::uint8_t> blob;
  encode_block(spans.data(), spans.size(), blob);
  std::vector<PackedSpan> back;
  decode_block(blob.data(), blob.size(), static_cast<std::int64_t>(spans.size()), 7, "t.db", back);
  EXPECT_EQ(back.size(), spans.size());
  for (std::size_t i = 0; i < spans.size() && i < back.size(); ++i) {
    const PackedSpan& a = spans[i];
    const PackedSpan& b = back[i];
    const bool same = a.start_ns == b.start_ns && a.end_ns == b.end_ns && a.seq == b.seq &&
                      a.name == b.name && a.microbatch == b.microbatch && a.peer == b.peer &&
                      a.chunk == b.chunk && a.kind == b.kind;
    EXPECT_TRUE(same) << "span " << i << ": wrote " << describe(a) << "\n    read  " << describe(b);
  }
  return blob.size();
}

PackedSpan span(std::int64_t start, std::int64_t end, std::int64_t seq) {
  PackedSpan p{};
  p.start_ns = start;
  p.end_ns = end;
  p.seq = seq;
  p.microbatch = -1;
  p.peer = -1;
  p.chunk = -1;
  return p;
}

TEST(SpanBlock, RandomBlocksComeBackFieldForField) {
  std::mt19937_64 rng(49);
  for (int trial = 0; trial < 200; ++trial) {
    // Each trial draws its own magnitudes, so the columns take every width from 0 to 8 bytes.
    const int time_bits = static_cast<int>(rng() % 50);
    const int seq_bits = static_cast<int>(rng() % 40);
    const std::size_t n = 1 + rng() % kBlockSpans;
    std::vector<PackedSpan> spans;
    std::int64_t t = static_cast<std::int64_t>(rng() % (std::int64_t{1} << 60));
    std::int64_t seq = static_cast<std::int64_t>(rng() % (std::int64_t{1} << 40));
    const auto draw = [&](int bits) {
      return bits == 0 ? std::int64_t{0}
                       : static_cast<std::int64_t>(rng() % (std::uint64_t{1} << bits));
    };
    for (std::size_t i = 0; i < n; ++i) {
      PackedSpan p{};
      p.start_ns = t + draw(time_bits);
      p.end_ns = p.start_ns + draw(time_bits);
      t = p.end_ns;
      seq += 1 + draw(seq_bits);
      p.seq = seq;
      p.name = static_cast<std::uint32_t>(draw(static_cast<int>(trial % 33)));
      p.microbatch = static_cast<std::int32_t>(draw(static_cast<int>(trial % 31))) - 1;
      p.peer = static_cast<std::int32_t>(draw(trial % 2 == 0 ? 3 : 30)) - 1;
      p.chunk = static_cast<std::int16_t>(draw(static_cast<int>(trial % 15)) - 1);
      p.kind = static_cast<std::uint8_t>(draw(static_cast<int>(trial % 9)));
      spans.push_back(p);
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(n) + " spans");
    expect_round_trip(spans);
  }
}

TEST(SpanBlock, FieldsAtTheirTypesExtremesComeBack) {
  std::vector<PackedSpan> spans;
  PackedSpan lo = span(0, 0, 0);
  lo.name = 0;
  lo.microbatch = std::numeric_limits<std::int32_t>::min();
  lo.peer = std::numeric_limits<std::int32_t>::min();
  lo.chunk = std::numeric_limits<std::int16_t>::min();
  lo.kind = 0;
  PackedSpan hi = span(0, std::numeric_limits<std::int64_t>::max() / 4,
                       std::numeric_limits<std::int64_t>::max());
  hi.name = std::numeric_limits<std::uint32_t>::max();
  hi.microbatch = std::numeric_limits<std::int32_t>::max();
  hi.peer = std::numeric_limits<std::int32_t>::max();
  hi.chunk = std::numeric_limits<std::int16_t>::max();
  hi.kind = std::numeric_limits<std::uint8_t>::max();
  spans = {lo, hi, lo};  // the seq step back down, and a gap back to time 0: negative columns
  spans[2].seq = -5;
  expect_round_trip(spans);
}

// The format's arithmetic: a format byte, two varints, eight widths and eight varints, then each
// column's width times the count. 256 spans of a 1F1B-like lane: gaps < 256 (1 byte), durations <
// 65,536 over the smallest (2), seq steps < 256 (1), one name (0), micro-batches < 256 (1), peer
// and chunk and kind constant (0): 5 bytes a span against version 4's 40.
TEST(SpanBlock, ASimulatedLaneTakesTheBytesTheFormatSays) {
  std::vector<PackedSpan> spans;
  std::int64_t t = 1000;
  for (int i = 0; i < 256; ++i) {
    PackedSpan p = span(t + (i % 3) * 100, 0, 4 * i);
    p.end_ns = p.start_ns + 20000 + (i % 2) * 30000;
    p.microbatch = i / 2;
    p.chunk = 0;
    p.kind = 3;
    t = p.end_ns;
    spans.push_back(p);
  }
  std::vector<std::uint8_t> blob;
  encode_block(spans.data(), spans.size(), blob);
  // Varints: start 1000 -> zigzag 2000 (2 bytes), seq 0 (1), smallest values: gap 0 (1),
  // duration 20000 -> 40000 (3), seq step 0 (1), name 0 (1), mb 0 (1), peer -1 -> 1 (1),
  // chunk 0 (1), kind 3 -> 6 (1).
  const std::size_t header = 1 + 8 + 2 + 1 + 1 + 3 + 1 + 1 + 1 + 1 + 1 + 1;
  EXPECT_EQ(blob.size(), header + 256 * (1 + 2 + 1 + 0 + 1 + 0 + 0 + 0));
  expect_round_trip(spans);
}

void expect_corrupt(const std::vector<std::uint8_t>& blob, std::int64_t count,
                    const std::string& why) {
  std::vector<PackedSpan> out;
  try {
    decode_block(blob.data(), blob.size(), count, 7, "t.db", out);
    ADD_FAILURE() << "decoded a corrupt block (" << why << ")";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("t.db: corrupt span block 7 ("), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(SpanBlock, CorruptBlobsAreNamed) {
  std::vector<PackedSpan> spans = {span(100, 200, 1), span(250, 400, 2), span(400, 900, 5)};
  spans[1].microbatch = 70000;  // a 3-byte column
  std::vector<std::uint8_t> good;
  encode_block(spans.data(), spans.size(), good);

  expect_corrupt(good, 4, "bytes for 4 spans");  // the row claims a span more
  expect_corrupt(good, 0, "bytes for 0 spans");
  std::vector<std::uint8_t> b = good;
  b.pop_back();
  expect_corrupt(b, 3, "bytes for 3 spans");  // cut short
  b = good;
  b.push_back(0);
  expect_corrupt(b, 3, "bytes for 3 spans");  // padded
  b = good;
  b[0] = kSpanBlockFormat + 1;
  expect_corrupt(b, 3, "not a block of format");
  b = good;
  // Format, start 100 (zigzag 200: 2 bytes), seq 1 (1 byte), then the widths: the gap's made 9.
  b[4] = 9;
  expect_corrupt(b, 3, "not a block of format");
  expect_corrupt(std::vector<std::uint8_t>(good.begin(), good.begin() + 14), 3,
                 "not a block of format");  // the header ends inside its varints
  b.assign(1, kSpanBlockFormat);
  for (int i = 0; i < 11; ++i) b.push_back(0xff);  // a varint of over 10 bytes
  expect_corrupt(b, 1, "not a block of format");

  // A duration column whose value makes the span end before it starts.
  std::vector<PackedSpan> backwards = {span(100, 200, 1)};
  std::vector<std::uint8_t> blob;
  encode_block(backwards.data(), 1, blob);
  // Header: format, start (zigzag 200: 2 bytes), seq (1), the eight widths, then the smallest
  // values; the duration's (zigzag 200, 2 bytes) is after the gap's (1 byte). Make it -100
  // (zigzag 199).
  const std::size_t duration_varint = 1 + 2 + 1 + 8 + 1;
  ASSERT_EQ(blob[duration_varint], 0xc8);  // 200 = 0x48 | 0x80, then 0x01
  blob[duration_varint] = 0xc7;            // 199: zigzag of -100
  expect_corrupt(blob, 1, "a span from 100 to 0 ns");

  // A kind of 256: the kind column's smallest value (the last varint) made 256.
  std::vector<PackedSpan> kinds = {span(0, 1, 0)};
  encode_block(kinds.data(), 1, blob);
  ASSERT_EQ(blob.back(), 0);  // kind 0, width 0: its smallest value is the BLOB's last byte
  blob.back() = 0x80;         // zigzag 512 = 256 ...
  blob.push_back(0x04);
  expect_corrupt(blob, 1, "field out of its range");
}

TEST(SpanBlock, VersionFourRecordsAreReadForTheMigration) {
  const std::vector<PackedSpan> spans = {span(5, 9, 0), span(9, 30, 3)};
  std::vector<PackedSpan> back;
  decode_version4_block(spans.data(), spans.size() * sizeof(PackedSpan), 2, 1, "t.db", back);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].end_ns, 30);
  EXPECT_EQ(back[1].seq, 3);
  EXPECT_THROW(decode_version4_block(spans.data(), sizeof(PackedSpan) + 1, 1, 1, "t.db", back),
               InputError);
}

}  // namespace
}  // namespace pipetune::db
