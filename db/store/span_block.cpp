#include "db/store/span_block.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "db/store/column_codec.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/time_window.hpp"

namespace pipetune::db {

namespace {

constexpr std::size_t kColumns = 8;
enum Column : std::size_t { kGap, kDuration, kSeqStep, kName, kMicrobatch, kPeer, kChunk, kKind };

// The column values of span i (gap and seq step from span i - 1).
std::array<std::int64_t, kColumns> columns_of(const PackedSpan* spans, std::size_t i) {
  const PackedSpan& p = spans[i];
  // Unsigned differences: a corrupt or extreme input wraps instead of overflowing; the decoder
  // wraps the same way back.
  const auto diff = [](std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
  };
  return {i == 0 ? 0 : diff(p.start_ns, spans[i - 1].end_ns),
          diff(p.end_ns, p.start_ns),
          i == 0 ? 0 : diff(p.seq, spans[i - 1].seq),
          static_cast<std::int64_t>(p.name),
          p.microbatch,
          p.peer,
          p.chunk,
          p.kind};
}

[[noreturn]] void corrupt(const std::string& db_path, std::int64_t block_id,
                          const std::string& why) {
  throw InputError(db_path + ": corrupt span block " + std::to_string(block_id) + " (" + why + ")");
}

}  // namespace

BlockSummary summarize_block(const PackedSpan* spans, std::size_t count) {
  BlockSummary s;
  if (count == 0) return s;
  s.start_ns = spans[0].start_ns;
  s.end_ns = spans[count - 1].end_ns;
  for (std::size_t i = 0; i < count; ++i) {
    s.max_duration_ns = std::max(s.max_duration_ns, spans[i].end_ns - spans[i].start_ns);
    if (i > 0) s.max_gap_ns = std::max(s.max_gap_ns, spans[i].start_ns - spans[i - 1].end_ns);
  }
  return s;
}

void encode_block(const PackedSpan* spans, std::size_t count, std::vector<std::uint8_t>& out) {
  if (count > kBlockSpans)
    throw std::invalid_argument("encode_block: " + std::to_string(count) + " spans, over " +
                                std::to_string(kBlockSpans));
  std::array<std::array<std::int64_t, kBlockSpans>, kColumns> v;
  for (std::size_t i = 0; i < count; ++i) {
    const auto row = columns_of(spans, i);
    for (std::size_t c = 0; c < kColumns; ++c) v[c][i] = row[c];
  }
  std::array<const std::int64_t*, kColumns> columns;
  for (std::size_t c = 0; c < kColumns; ++c) columns[c] = v[c].data();
  out.clear();
  out.push_back(kSpanBlockFormat);
  put_varint(zigzag(count > 0 ? spans[0].start_ns : 0), out);
  put_varint(zigzag(count > 0 ? spans[0].seq : 0), out);
  append_columns(columns.data(), kColumns, count, out);
}

void decode_block(const void* blob, std::size_t bytes, std::int64_t count, std::int64_t block_id,
                  const std::string& db_path, std::vector<PackedSpan>& out) {
  if (count <= 0 || count > static_cast<std::int64_t>(kBlockSpans) || blob == nullptr)
    corrupt(db_path, block_id,
            std::to_string(bytes) + " bytes for " + std::to_string(count) + " spans");
  const auto* p = static_cast<const std::uint8_t*>(blob);
  const std::uint8_t* const end = p + bytes;
  const auto n = static_cast<std::size_t>(count);
  std::uint64_t first_start = 0, first_seq = 0;
  std::array<std::array<std::uint64_t, kBlockSpans>, kColumns> values;
  std::array<std::uint64_t*, kColumns> columns;
  for (std::size_t c = 0; c < kColumns; ++c) columns[c] = values[c].data();
  if (bytes < 1 || *p++ != kSpanBlockFormat || !read_varint(p, end, first_start) ||
      !read_varint(p, end, first_seq) || !read_columns(p, end, kColumns, n, columns.data()))
    corrupt(db_path, block_id,
            std::to_string(bytes) + " bytes for " + std::to_string(count) +
                " spans, not a block of format " + std::to_string(kSpanBlockFormat));
  first_start = static_cast<std::uint64_t>(unzigzag(first_start));
  first_seq = static_cast<std::uint64_t>(unzigzag(first_seq));

  out.resize(n);
  std::uint64_t start = first_start;
  std::uint64_t seq = first_seq;
  std::uint64_t previous_end = 0;
  const auto in_range = [](std::uint64_t u, std::int64_t min, std::int64_t max) {
    const auto v = static_cast<std::int64_t>(u);
    return v >= min && v <= max;
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) {
      start = previous_end + values[kGap][i];
      seq += values[kSeqStep][i];
    }
    const std::uint64_t end_ns = start + values[kDuration][i];
    PackedSpan& s = out[i];
    s.start_ns = static_cast<std::int64_t>(start);
    s.end_ns = static_cast<std::int64_t>(end_ns);
    s.seq = static_cast<std::int64_t>(seq);
    if (s.end_ns < s.start_ns || !profiler::analysis::trace_time_ok(s.start_ns) ||
        !profiler::analysis::trace_time_ok(s.end_ns))
      corrupt(
          db_path, block_id,
          "a span from " + std::to_string(s.start_ns) + " to " + std::to_string(s.end_ns) + " ns");
    if (!in_range(values[kName][i], 0, std::numeric_limits<std::uint32_t>::max()) ||
        !in_range(values[kMicrobatch][i], std::numeric_limits<std::int32_t>::min(),
                  std::numeric_limits<std::int32_t>::max()) ||
        !in_range(values[kPeer][i], std::numeric_limits<std::int32_t>::min(),
                  std::numeric_limits<std::int32_t>::max()) ||
        !in_range(values[kChunk][i], std::numeric_limits<std::int16_t>::min(),
                  std::numeric_limits<std::int16_t>::max()) ||
        !in_range(values[kKind][i], 0, std::numeric_limits<std::uint8_t>::max()))
      corrupt(db_path, block_id, "span " + std::to_string(i) + " has a field out of its range");
    s.name = static_cast<std::uint32_t>(values[kName][i]);
    s.microbatch = static_cast<std::int32_t>(values[kMicrobatch][i]);
    s.peer = static_cast<std::int32_t>(values[kPeer][i]);
    s.chunk = static_cast<std::int16_t>(values[kChunk][i]);
    s.kind = static_cast<std::uint8_t>(values[kKind][i]);
    s.reserved = 0;
    previous_end = end_ns;
  }
}

void decode_version4_block(const void* blob, std::size_t bytes, std::int64_t count,
                           std::int64_t block_id, const std::string& db_path,
                           std::vector<PackedSpan>& out) {
  if (count <= 0 || count > static_cast<std::int64_t>(kBlockSpans) ||
      bytes != static_cast<std::size_t>(count) * sizeof(PackedSpan) || blob == nullptr)
    corrupt(db_path, block_id,
            std::to_string(bytes) + " bytes for " + std::to_string(count) + " spans");
  out.resize(static_cast<std::size_t>(count));
  std::memcpy(out.data(), blob, bytes);
  for (const PackedSpan& p : out)
    if (p.end_ns < p.start_ns || !profiler::analysis::trace_time_ok(p.start_ns) ||
        !profiler::analysis::trace_time_ok(p.end_ns))
      corrupt(
          db_path, block_id,
          "a span from " + std::to_string(p.start_ns) + " to " + std::to_string(p.end_ns) + " ns");
}

}  // namespace pipetune::db
