#include "engine/checkpoint/rank_checkpoint_codec.hpp"

#include <cstdint>
#include <stdexcept>

#include "profiler/byte_codec.hpp"

namespace pipetune::checkpoint {

namespace {

constexpr std::uint64_t kRankMessageMagic = 0x3143524b43545450;  // "PTTCKRC1"
const char* const kWhat = "rank checkpoint message";

}  // namespace

std::string encode_rank_checkpoint(const RankCheckpoint& r) {
  profiler::ByteWriter w;
  w.value(kRankMessageMagic);
  w.value(static_cast<std::int64_t>(r.rank));
  w.value(static_cast<std::uint64_t>(r.buffers.size()));
  for (const NamedTensor& t : r.buffers) {
    w.text(t.name);
    w.values(t.shape);
    w.values(t.values);
  }
  w.values(r.rng_state);
  w.value(r.loader);
  w.value(static_cast<std::uint64_t>(r.meta.size()));
  for (const auto& [key, value] : r.meta) {
    w.text(key);
    w.text(value);
  }
  return w.take();
}

RankCheckpoint decode_rank_checkpoint(const std::string& bytes) {
  profiler::ByteReader in(bytes, kWhat);
  if (in.value<std::uint64_t>() != kRankMessageMagic)
    throw std::runtime_error(std::string(kWhat) + ": bad magic");
  RankCheckpoint r;
  r.rank = static_cast<int>(in.value<std::int64_t>());
  const std::size_t buffers = in.count(3 * sizeof(std::uint64_t));
  for (std::size_t i = 0; i < buffers; ++i) {
    NamedTensor t;
    t.name = in.text();
    t.shape = in.values<std::int64_t>();
    t.values = in.values<float>();
    r.buffers.push_back(std::move(t));
  }
  r.rng_state = in.values<std::uint64_t>();
  r.loader = in.value<data::LoaderState>();
  const std::size_t meta = in.count(2 * sizeof(std::uint64_t));
  for (std::size_t i = 0; i < meta; ++i) {
    std::string key = in.text();
    r.meta[key] = in.text();
  }
  in.expect_end();
  return r;
}

}  // namespace pipetune::checkpoint
