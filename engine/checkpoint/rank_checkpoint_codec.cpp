#include "engine/checkpoint/rank_checkpoint_codec.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

namespace pipetune::checkpoint {

namespace {

constexpr std::uint64_t kMagic = 0x3143524b43545450;  // "PTTCKRC1"

template <class T>
void put(std::string& out, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
void put_vector(std::string& out, const std::vector<T>& v) {
  put(out, static_cast<std::uint64_t>(v.size()));
  if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), sizeof(T) * v.size());
}

void put_text(std::string& out, const std::string& s) {
  put(out, static_cast<std::uint64_t>(s.size()));
  out.append(s);
}

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <class T>
  T get() {
    T v;
    take(&v, sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> vector() {
    std::vector<T> v(count(sizeof(T)));
    take(v.data(), sizeof(T) * v.size());
    return v;
  }
  std::string text() {
    std::string s(count(1), '\0');
    take(s.data(), s.size());
    return s;
  }
  std::size_t count(std::size_t element) {
    const auto n = get<std::uint64_t>();
    if (n > (in_.size() - at_) / element)
      throw std::runtime_error("rank checkpoint message: a count of " + std::to_string(n) +
                               " runs past its end");
    return static_cast<std::size_t>(n);
  }
  bool done() const { return at_ == in_.size(); }

 private:
  void take(void* out, std::size_t n) {
    if (in_.size() - at_ < n) throw std::runtime_error("rank checkpoint message: truncated");
    if (n > 0) std::memcpy(out, in_.data() + at_, n);
    at_ += n;
  }
  const std::string& in_;
  std::size_t at_ = 0;
};

}  // namespace

std::string encode_rank_checkpoint(const RankCheckpoint& r) {
  std::string out;
  put(out, kMagic);
  put(out, static_cast<std::int64_t>(r.rank));
  put(out, static_cast<std::uint64_t>(r.buffers.size()));
  for (const NamedTensor& t : r.buffers) {
    put_text(out, t.name);
    put_vector(out, t.shape);
    put_vector(out, t.values);
  }
  put_vector(out, r.rng_state);
  put(out, r.loader);
  put(out, static_cast<std::uint64_t>(r.meta.size()));
  for (const auto& [key, value] : r.meta) {
    put_text(out, key);
    put_text(out, value);
  }
  return out;
}

RankCheckpoint decode_rank_checkpoint(const std::string& bytes) {
  Reader in(bytes);
  if (in.get<std::uint64_t>() != kMagic)
    throw std::runtime_error("rank checkpoint message: bad magic");
  RankCheckpoint r;
  r.rank = static_cast<int>(in.get<std::int64_t>());
  const std::size_t buffers = in.count(3 * sizeof(std::uint64_t));
  for (std::size_t i = 0; i < buffers; ++i) {
    NamedTensor t;
    t.name = in.text();
    t.shape = in.vector<std::int64_t>();
    t.values = in.vector<float>();
    r.buffers.push_back(std::move(t));
  }
  r.rng_state = in.vector<std::uint64_t>();
  r.loader = in.get<data::LoaderState>();
  const std::size_t meta = in.count(2 * sizeof(std::uint64_t));
  for (std::size_t i = 0; i < meta; ++i) {
    std::string key = in.text();
    r.meta[key] = in.text();
  }
  if (!in.done()) throw std::runtime_error("rank checkpoint message: bytes after its end");
  return r;
}

}  // namespace pipetune::checkpoint
