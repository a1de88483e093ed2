#include "db/store/column_codec.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pipetune::db {

namespace {

static_assert(std::endian::native == std::endian::little,
              "columns are stored little-endian; add byte swapping for this platform");

constexpr std::size_t kMaxColumns = 16;

// Bytes needed for u (0 for 0).
std::size_t width_of(std::uint64_t u) {
  std::size_t w = 0;
  while (u != 0) {
    ++w;
    u >>= 8;
  }
  return w;
}

// n values, each minus lo, as their low W bytes. A fixed width per call, so that the copies
// inline (a memcpy of a variable length would be a call a value).
template <std::size_t W>
void encode_column(const std::int64_t* v, std::size_t n, std::int64_t lo, std::uint8_t* p) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t u = static_cast<std::uint64_t>(v[i]) - static_cast<std::uint64_t>(lo);
    std::memcpy(p + i * W, &u, W);  // the low W bytes: little-endian (the static_assert above)
  }
}

template <std::size_t W>
void decode_column(const std::uint8_t* p, std::size_t n, std::uint64_t lo, std::uint64_t* v) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t u = 0;
    std::memcpy(&u, p + i * W, W);
    v[i] = lo + u;
  }
}

template <std::size_t... W>
void encode_column(std::size_t w, const std::int64_t* v, std::size_t n, std::int64_t lo,
                   std::uint8_t* p, std::index_sequence<W...>) {
  ((w == W + 1 ? encode_column<W + 1>(v, n, lo, p) : void()), ...);
}

template <std::size_t... W>
void decode_column(std::size_t w, const std::uint8_t* p, std::size_t n, std::uint64_t lo,
                   std::uint64_t* v, std::index_sequence<W...>) {
  if (w == 0) std::fill_n(v, n, lo);
  ((w == W + 1 ? decode_column<W + 1>(p, n, lo, v) : void()), ...);
}

}  // namespace

void put_varint(std::uint64_t u, std::vector<std::uint8_t>& out) {
  while (u >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(u | 0x80));
    u >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(u));
}

bool read_varint(const std::uint8_t*& p, const std::uint8_t* end, std::uint64_t& u) {
  u = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return false;
    const std::uint8_t b = *p++;
    u |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

void append_columns(const std::int64_t* const* columns, std::size_t k, std::size_t n,
                    std::vector<std::uint8_t>& out) {
  if (k > kMaxColumns)
    throw std::invalid_argument("append_columns: " + std::to_string(k) + " columns, over " +
                                std::to_string(kMaxColumns));
  std::array<std::int64_t, kMaxColumns> lo{};
  std::array<std::size_t, kMaxColumns> width{};
  std::size_t row_bytes = 0;
  for (std::size_t c = 0; c < k; ++c) {
    if (n > 0) {
      const auto [min, max] = std::minmax_element(columns[c], columns[c] + n);
      lo[c] = *min;
      width[c] = width_of(static_cast<std::uint64_t>(*max) - static_cast<std::uint64_t>(*min));
    }
    row_bytes += width[c];
  }
  for (std::size_t c = 0; c < k; ++c) out.push_back(static_cast<std::uint8_t>(width[c]));
  for (std::size_t c = 0; c < k; ++c) put_varint(zigzag(lo[c]), out);
  std::size_t at = out.size();
  out.resize(at + n * row_bytes);
  for (std::size_t c = 0; c < k; ++c) {
    encode_column(width[c], columns[c], n, lo[c], out.data() + at, std::make_index_sequence<8>());
    at += n * width[c];
  }
}

bool read_columns(const std::uint8_t* p, const std::uint8_t* end, std::size_t k, std::size_t n,
                  std::uint64_t* const* out) {
  if (k > kMaxColumns || static_cast<std::size_t>(end - p) < k) return false;
  std::array<std::size_t, kMaxColumns> width{};
  std::size_t row_bytes = 0;
  for (std::size_t c = 0; c < k; ++c) {
    width[c] = *p++;
    if (width[c] > 8) return false;
    row_bytes += width[c];
  }
  std::array<std::uint64_t, kMaxColumns> lo{};
  for (std::size_t c = 0; c < k; ++c) {
    std::uint64_t z = 0;
    if (!read_varint(p, end, z)) return false;
    lo[c] = static_cast<std::uint64_t>(unzigzag(z));
  }
  if (static_cast<std::size_t>(end - p) != n * row_bytes) return false;
  for (std::size_t c = 0; c < k; ++c) {
    decode_column(width[c], p, n, lo[c], out[c], std::make_index_sequence<8>());
    p += n * width[c];
  }
  return true;
}

}  // namespace pipetune::db
