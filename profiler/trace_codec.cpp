#include "profiler/trace_codec.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

namespace pipetune::profiler {

namespace {

constexpr std::uint32_t kMagic = 0x50545443;  // "PTTC"
constexpr std::uint32_t kVersion = 1;

class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <class T>
  void pods(const std::vector<T>& v) {
    pod(static_cast<std::uint64_t>(v.size()));
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), sizeof(T) * v.size());
  }
  void text(const std::string& s) {
    pod(static_cast<std::uint64_t>(s.size()));
    out_.append(s);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <class T>
  T pod() {
    T v;
    need(sizeof v);
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  template <class T>
  std::vector<T> pods() {
    const auto n = count(sizeof(T));
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), in_.data() + at_, sizeof(T) * n);
    at_ += sizeof(T) * n;
    return v;
  }
  std::string text() {
    const auto n = count(1);
    std::string s = in_.substr(at_, n);
    at_ += n;
    return s;
  }
  std::size_t count(std::size_t element) {
    const auto n = pod<std::uint64_t>();
    if (element > 0 && n > (in_.size() - at_) / element)
      throw std::runtime_error("decode_trace: a count of " + std::to_string(n) +
                               " runs past the end");
    return static_cast<std::size_t>(n);
  }
  bool done() const { return at_ == in_.size(); }

 private:
  void need(std::size_t n) const {
    if (in_.size() - at_ < n) throw std::runtime_error("decode_trace: truncated");
  }
  const std::string& in_;
  std::size_t at_ = 0;
};

}  // namespace

std::string encode_trace(const Trace& t) {
  Writer w;
  w.pod(kMagic);
  w.pod(kVersion);
  w.pod(t.kind);
  w.pod(static_cast<std::uint64_t>(t.lanes.size()));
  for (const Lane& l : t.lanes) {
    w.pod(l.rank);
    w.pod(l.stream);
    w.pod(l.index);
    w.text(l.name);
  }
  w.pods(t.spans);
  w.pods(t.memory);
  w.pods(t.counters);
  w.pods(t.steps);
  w.pod(static_cast<std::uint64_t>(t.names.size()));
  for (const std::string& n : t.names) w.text(n);
  return w.take();
}

Trace decode_trace(const std::string& bytes) {
  Reader r(bytes);
  if (r.pod<std::uint32_t>() != kMagic) throw std::runtime_error("decode_trace: not a trace");
  const auto version = r.pod<std::uint32_t>();
  if (version != kVersion)
    throw std::runtime_error("decode_trace: version " + std::to_string(version) + ", this build " +
                             "reads " + std::to_string(kVersion));
  Trace t;
  t.kind = r.pod<TraceKind>();
  const std::size_t lanes = r.count(sizeof(std::int32_t) * 2);
  t.lanes.resize(lanes);
  for (Lane& l : t.lanes) {
    l.rank = r.pod<std::int32_t>();
    l.stream = r.pod<Stream>();
    l.index = r.pod<std::int32_t>();
    l.name = r.text();
  }
  t.spans = r.pods<Span>();
  t.memory = r.pods<MemorySample>();
  t.counters = r.pods<CounterSample>();
  t.steps = r.pods<StepMetric>();
  const std::size_t names = r.count(sizeof(std::uint64_t));
  t.names.clear();
  for (std::size_t i = 0; i < names; ++i) t.names.push_back(r.text());
  if (!r.done()) throw std::runtime_error("decode_trace: bytes after the trace");
  return t;
}

}  // namespace pipetune::profiler
