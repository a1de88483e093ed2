// FNV-1a over 64-bit words: the cheap hash the tuner's caches screen their keys with (equality
// still decides).
#pragma once

#include <cstdint>
#include <cstring>

namespace pipetune::tuner {

class Fnv1a {
 public:
  void add(std::uint64_t word) { h_ = (h_ ^ word) * 1099511628211ull; }
  void add(double value) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    add(bits);
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 1469598103934665603ull;
};

}  // namespace pipetune::tuner
