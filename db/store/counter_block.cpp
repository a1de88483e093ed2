#include "db/store/counter_block.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "db/store/column_codec.hpp"
#include "engine/errors.hpp"

namespace pipetune::db {

namespace {

constexpr std::size_t kColumns = 4;
enum Column : std::size_t { kTimeStep, kValue, kRank, kName };
// Value modes: 0 to kMaxScale, whole multiples of 2^-mode stored as integers; kBits, the bits.
constexpr std::uint8_t kMaxScale = 16;
constexpr std::uint8_t kBits = 255;

// v * 2^scale as an integer comes back bit for bit: whole, within 2^53, and not -0 (scaling by a
// power of two is exact, as is the way back).
bool scales_to_integer(double v, int scale) {
  const double x = std::ldexp(v, scale);
  return std::trunc(x) == x && std::fabs(x) <= 9007199254740992.0 && !(v == 0 && std::signbit(v));
}

// The smallest scale that makes every value an integer, or kBits.
std::uint8_t value_mode(const PackedCounter* samples, std::size_t count) {
  for (int scale = 0; scale <= kMaxScale; ++scale) {
    bool all = true;
    for (std::size_t i = 0; i < count && all; ++i) all = scales_to_integer(samples[i].value, scale);
    if (all) return static_cast<std::uint8_t>(scale);
  }
  return kBits;
}

std::string where(const std::string& db_path, std::int64_t run_id, std::int64_t first_seq) {
  return db_path + ": corrupt counter block of run " + std::to_string(run_id) + " at sample " +
         std::to_string(first_seq);
}

}  // namespace

void encode_counter_block(const PackedCounter* samples, std::size_t count,
                          std::vector<std::uint8_t>& out) {
  if (count > kCounterBlockSamples)
    throw std::invalid_argument("encode_counter_block: " + std::to_string(count) +
                                " samples, over " + std::to_string(kCounterBlockSamples));
  const std::uint8_t mode = value_mode(samples, count);
  std::array<std::vector<std::int64_t>, kColumns> v;
  for (auto& c : v) c.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const PackedCounter& p = samples[i];
    v[kTimeStep][i] =
        i == 0 ? 0
               : static_cast<std::int64_t>(static_cast<std::uint64_t>(p.t_ns) -
                                           static_cast<std::uint64_t>(samples[i - 1].t_ns));
    if (mode != kBits)
      v[kValue][i] = static_cast<std::int64_t>(std::ldexp(p.value, mode));
    else
      std::memcpy(&v[kValue][i], &p.value, sizeof p.value);
    v[kRank][i] = p.rank;
    v[kName][i] = static_cast<std::int64_t>(p.name);
  }
  const std::array<const std::int64_t*, kColumns> columns = {v[0].data(), v[1].data(), v[2].data(),
                                                             v[3].data()};
  out.clear();
  out.push_back(kCounterBlockFormat);
  out.push_back(mode);
  put_varint(zigzag(count > 0 ? samples[0].t_ns : 0), out);
  append_columns(columns.data(), kColumns, count, out);
}

void decode_counter_block(const void* blob, std::size_t bytes, std::int64_t count,
                          std::int64_t run_id, std::int64_t first_seq, const std::string& db_path,
                          std::vector<profiler::CounterSample>& out) {
  const auto malformed = [&] {
    return InputError(where(db_path, run_id, first_seq) + " (" + std::to_string(bytes) +
                      " bytes for " + std::to_string(count) + " samples, not a block of format " +
                      std::to_string(kCounterBlockFormat) + ")");
  };
  if (count <= 0 || count > static_cast<std::int64_t>(kCounterBlockSamples) || blob == nullptr ||
      bytes < 2)
    throw malformed();
  const auto* p = static_cast<const std::uint8_t*>(blob);
  const std::uint8_t* const end = p + bytes;
  const auto n = static_cast<std::size_t>(count);
  const std::uint8_t format = *p++;
  const std::uint8_t mode = *p++;
  std::uint64_t first_t = 0;
  std::array<std::vector<std::uint64_t>, kColumns> v;
  for (auto& c : v) c.resize(n);
  const std::array<std::uint64_t*, kColumns> columns = {v[0].data(), v[1].data(), v[2].data(),
                                                        v[3].data()};
  if (format != kCounterBlockFormat || (mode > kMaxScale && mode != kBits) ||
      !read_varint(p, end, first_t) || !read_columns(p, end, kColumns, n, columns.data()))
    throw malformed();
  std::uint64_t t = static_cast<std::uint64_t>(unzigzag(first_t));
  out.reserve(out.size() + n);
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) t += v[kTimeStep][i];
    const auto rank = static_cast<std::int64_t>(v[kRank][i]);
    const auto name = static_cast<std::int64_t>(v[kName][i]);
    if (rank < std::numeric_limits<std::int32_t>::min() ||
        rank > std::numeric_limits<std::int32_t>::max() || name < 0 ||
        name > std::numeric_limits<std::uint32_t>::max())
      throw InputError(where(db_path, run_id, first_seq) + " (sample " + std::to_string(i) +
                       " has a rank or name out of its range)");
    double value = 0;
    if (mode != kBits)
      value = std::ldexp(static_cast<double>(static_cast<std::int64_t>(v[kValue][i])), -mode);
    else
      std::memcpy(&value, &v[kValue][i], sizeof value);
    out.push_back(profiler::CounterSample{static_cast<std::int32_t>(rank),
                                          static_cast<std::uint32_t>(name),
                                          static_cast<std::int64_t>(t), value});
  }
}

void decode_version4_counter_block(const void* blob, std::size_t bytes, std::int64_t count,
                                   std::int64_t run_id, std::int64_t first_seq,
                                   const std::string& db_path, std::vector<PackedCounter>& out) {
  if (count <= 0 || count > static_cast<std::int64_t>(kCounterBlockSamples) ||
      bytes != static_cast<std::size_t>(count) * sizeof(PackedCounter) || blob == nullptr)
    throw InputError(where(db_path, run_id, first_seq) + " (" + std::to_string(bytes) +
                     " bytes for " + std::to_string(count) + " samples)");
  out.resize(static_cast<std::size_t>(count));
  std::memcpy(out.data(), blob, bytes);
}

}  // namespace pipetune::db
