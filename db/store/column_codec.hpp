// Columns of integers as the compact blocks store them (span_block.hpp, counter_block.hpp): each
// column's values as their distance from the column's smallest, in as few whole little-endian
// bytes as the widest distance needs (0 when all are equal). Frame of reference, not a general
// compressor: a column decodes in one pass with no branches per value.
//
//   k bytes        each column's width, 0 to 8
//   k varints      each column's smallest value (zigzag)
//   columns        n values each, of its width
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pipetune::db {

inline std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}

inline std::int64_t unzigzag(std::uint64_t u) {
  return static_cast<std::int64_t>(u >> 1) ^ -static_cast<std::int64_t>(u & 1);
}

// LEB128: 7 bits a byte, low first.
void put_varint(std::uint64_t u, std::vector<std::uint8_t>& out);
// Reads one from [p, end), advancing p; false when it runs past end or over 10 bytes.
bool read_varint(const std::uint8_t*& p, const std::uint8_t* end, std::uint64_t& u);

// Appends k columns of n values each (columns[c][0..n)).
void append_columns(const std::int64_t* const* columns, std::size_t k, std::size_t n,
                    std::vector<std::uint8_t>& out);

// Reads k columns of n values each into out[c][0..n) (as unsigned: the sums wrap as the
// differences did), from [p, end), which they must fill exactly. False when the bytes are not
// that (a width over 8, a varint cut short, too few or too many bytes).
bool read_columns(const std::uint8_t* p, const std::uint8_t* end, std::size_t k, std::size_t n,
                  std::uint64_t* const* out);

}  // namespace pipetune::db
