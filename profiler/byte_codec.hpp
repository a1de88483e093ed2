// Bytes for messages between the processes of one run (trace parts, rank checkpoints): values in
// host order, vectors and strings length-prefixed. ByteReader checks every length against the
// bytes left before reading, so a truncated or foreign message is an error, never an overread.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace pipetune::profiler {

class ByteWriter {
 public:
  template <class T>
  void value(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <class T>
  void values(const std::vector<T>& v) {
    value(static_cast<std::uint64_t>(v.size()));
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), sizeof(T) * v.size());
  }
  void text(const std::string& s) {
    value(static_cast<std::uint64_t>(s.size()));
    out_.append(s);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  // `what` names the message in errors ("decode_trace").
  ByteReader(const std::string& in, std::string what) : in_(in), what_(std::move(what)) {}
  template <class T>
  T value() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    take(&v, sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> values() {
    std::vector<T> v(count(sizeof(T)));
    take(v.data(), sizeof(T) * v.size());
    return v;
  }
  std::string text() {
    std::string s(count(1), '\0');
    take(s.data(), s.size());
    return s;
  }
  // A length prefix, checked against the bytes left for elements of at least `element` bytes.
  std::size_t count(std::size_t element) {
    const auto n = value<std::uint64_t>();
    if (element > 0 && n > (in_.size() - at_) / element)
      throw std::runtime_error(what_ + ": a count of " + std::to_string(n) + " runs past the end");
    return static_cast<std::size_t>(n);
  }
  void expect_end() const {
    if (at_ != in_.size()) throw std::runtime_error(what_ + ": bytes after the end");
  }

 private:
  void take(void* out, std::size_t n) {
    if (in_.size() - at_ < n) throw std::runtime_error(what_ + ": truncated");
    if (n > 0) std::memcpy(out, in_.data() + at_, n);
    at_ += n;
  }
  const std::string& in_;
  std::string what_;
  std::size_t at_ = 0;
};

}  // namespace pipetune::profiler
