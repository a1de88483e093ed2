// Portable pseudo-random numbers for the data pipeline. std:: distributions are
// implementation-defined, so the corpus draws only from these integer generators and maps them to
// ranges with integer arithmetic: the same seed gives the same tokens on every platform.
#pragma once

#include <cstdint>

namespace pipetune::data {

// splitmix64 finaliser: a bijective 64-bit mixer, used both to seed xoshiro and as a stateless
// hash of (seed, index) pairs so that per-token tables need no stored state.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Hash of a tuple of integers; each field goes through the mixer so that (a, b) and (b, a) differ.
constexpr uint64_t hash64(uint64_t a, uint64_t b) {
  return mix64(mix64(a) ^ (b + 0x632be59bd9b4e019ULL));
}
constexpr uint64_t hash64(uint64_t a, uint64_t b, uint64_t c) {
  return hash64(hash64(a, b), c);
}
constexpr uint64_t hash64(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return hash64(hash64(a, b, c), d);
}

// Uniform integer in [0, n) from 64 random bits by multiply-shift (Lemire); the bias is below
// n / 2^64, far under anything a test could see, and unlike `% n` it keeps the high bits.
constexpr uint64_t bounded(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

// xoshiro256** (Blackman and Vigna): fast, 256-bit state, seeded through splitmix64 as its
// authors recommend so that nearby seeds give unrelated streams.
class Xoshiro256 {
 public:
  explicit constexpr Xoshiro256(uint64_t seed) {
    for (uint64_t& word : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      word = mix64(seed);
    }
  }

  constexpr uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n).
  constexpr uint64_t below(uint64_t n) { return bounded(next(), n); }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4] = {};
};

}  // namespace pipetune::data
