// Helpers for the CPU kernels: ISA clones, a vectorisable exp, lane-wise row reductions and a
// 16-float vector type for register-tiled kernels.
//
// The project builds for baseline x86-64 (SSE2). Hot kernels are free functions marked
// PIPETUNE_CPU_KERNEL: GCC compiles them once per ISA level (AVX-512, AVX2+FMA, baseline) and
// picks one at load time, so one machine always runs the same code. Kernels whose tile shape
// depends on the ISA are written once per level (PIPETUNE_TARGET_V4 / _V3) and picked with
// CpuBackend::isa(). The helpers below are always_inline so they compile inside each clone.
//
// Determinism: nothing here depends on the thread count. Reductions over a row use 16
// independent partial sums (lane l takes the elements i with i % 16 == l) combined by a fixed
// tree, so the result is the same whatever the vector width; exp_approx is plain arithmetic (no
// libm call whose vector and scalar forms could differ).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define PIPETUNE_CPU_ISA_LEVELS 1
#define PIPETUNE_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define PIPETUNE_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#else
#define PIPETUNE_CPU_ISA_LEVELS 0
#endif

// target_clones dispatches through an IFUNC resolver that runs while the program is being
// relocated, before ThreadSanitizer's runtime is up (the instrumented resolver crashes): under
// TSan the kernels are built for the baseline ISA only.
#if PIPETUNE_CPU_ISA_LEVELS && !defined(__SANITIZE_THREAD__)
#define PIPETUNE_CPU_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PIPETUNE_CPU_KERNEL
#endif

#define PIPETUNE_INLINE inline __attribute__((always_inline))

// Vec16 values only live inside always_inline code, so GCC's "vector ABI changed" note (-Wpsabi,
// reported where the helpers are inlined) is moot: it stays off in the kernel files that include
// this header.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace pipetune::tensor::cpu {

// 16 floats; GCC lowers it to one zmm, two ymm or four xmm registers depending on the ISA the
// enclosing function is compiled for. Only used inside always_inline helpers and kernels (never
// passed by value across a call, so the vector ABI does not matter).
using Vec16 = float __attribute__((vector_size(64)));
using Int16 = std::int32_t __attribute__((vector_size(64)));
inline constexpr int kVec = 16;

PIPETUNE_INLINE Vec16 load16(const float* p) {
  Vec16 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

PIPETUNE_INLINE void store16(float* p, const Vec16& v) {
  __builtin_memcpy(p, &v, sizeof v);
}

PIPETUNE_INLINE Int16 lane_index() {
  return Int16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
}

// Lanes l < n - i hold x[i + l] (1 <= n - i < 16), the others `fill`. Reads only x[0, n): when
// n >= 16 one load of x[n - 16, n) and a lane rotation (no scalar stores, so no
// store-forwarding stall); shorter rows go through a small array.
PIPETUNE_INLINE Vec16 load_tail(const float* x, std::int64_t i, std::int64_t n, float fill) {
  const auto m = static_cast<std::int32_t>(n - i);
  const Int16 lane = lane_index();
  if (n >= kVec) {
    const Vec16 w = load16(x + n - kVec);  // x[i + l] sits in lane 16 - m + l
    const Vec16 v = __builtin_shuffle(w, (lane + (kVec - m)) & (kVec - 1));
    return lane < m ? v : Vec16{} + fill;
  }
  float t[kVec];
  for (int l = 0; l < kVec; ++l) t[l] = l < m ? x[i + l] : fill;
  return load16(t);
}

PIPETUNE_INLINE float vmin(float a, float b) {
  return b < a ? b : a;
}
PIPETUNE_INLINE float vmax(float a, float b) {
  return a < b ? b : a;
}
PIPETUNE_INLINE Vec16 vmin(Vec16 a, Vec16 b) {
  return b < a ? b : a;
}
PIPETUNE_INLINE Vec16 vmax(Vec16 a, Vec16 b) {
  return a < b ? b : a;
}
PIPETUNE_INLINE std::int32_t to_int(float x) {
  return static_cast<std::int32_t>(x);
}
PIPETUNE_INLINE Int16 to_int(Vec16 x) {
  return __builtin_convertvector(x, Int16);
}
PIPETUNE_INLINE float from_bits(std::int32_t b) {
  return std::bit_cast<float>(b);
}
PIPETUNE_INLINE Vec16 from_bits(Int16 b) {
  return std::bit_cast<Vec16>(b);
}

// exp(x) for a float or a Vec16 (lane-wise), to about 1 ulp (Cephes expf polynomial on a
// round-to-nearest range reduction); 0 below -87.33 (no denormals), +inf above 88.72, exp(88)
// on [88, 88.72]. Plain arithmetic, so scalar and vector forms agree.
template <class V>
PIPETUNE_INLINE V exp_approx(V x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to integer
  const V zero = V{};
  const V xc = vmin(vmax(x, zero - 87.33654f), zero + 88.0f);
  const V n = (xc * kLog2e + kRound) - kRound;
  V r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  V p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const V y = p * (r * r) + r + 1.0f;
  V e = y * from_bits((to_int(n) + 127) << 23);
  e = x < -87.33654f ? zero : e;
  e = x > 88.72283f ? zero + std::numeric_limits<float>::infinity() : e;
  return e;
}

// Lane l of a row reduction takes the elements i with i % 16 == l; the 16 lanes are combined by
// a fixed pairwise tree. The result does not depend on the vector width the ISA offers.
PIPETUNE_INLINE float lanes_sum(const Vec16& v) {
  float t[kVec];
  store16(t, v);
  for (int w = kVec / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) t[l] += t[l + w];
  }
  return t[0];
}

PIPETUNE_INLINE float lanes_max(const Vec16& v) {
  float t[kVec];
  store16(t, v);
  for (int w = kVec / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) t[l] = vmax(t[l], t[l + w]);
  }
  return t[0];
}

// sum_i x[i] over n elements, in lanes.
PIPETUNE_INLINE float row_sum(const float* x, std::int64_t n) {
  Vec16 acc = {};
  std::int64_t i = 0;
  for (; i + kVec <= n; i += kVec) acc += load16(x + i);
  if (i < n) acc += load_tail(x, i, n, 0.0f);
  return lanes_sum(acc);
}

// max_i x[i] (-inf for n = 0); max is exact, so any order gives the same value.
PIPETUNE_INLINE float row_max(const float* x, std::int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  Vec16 acc = Vec16{} + kNegInf;
  std::int64_t i = 0;
  for (; i + kVec <= n; i += kVec) acc = vmax(acc, load16(x + i));
  if (i < n) acc = vmax(acc, load_tail(x, i, n, kNegInf));
  return lanes_max(acc);
}

// sum_i exp(x[i] - shift), in lanes.
PIPETUNE_INLINE float row_sum_exp(const float* x, std::int64_t n, float shift) {
  Vec16 acc = {};
  std::int64_t i = 0;
  for (; i + kVec <= n; i += kVec) acc += exp_approx(load16(x + i) - shift);
  if (i < n) {  // padding lanes hold -inf: exp gives exact zeros
    acc += exp_approx(load_tail(x, i, n, -std::numeric_limits<float>::infinity()) - shift);
  }
  return lanes_sum(acc);
}

// sum_i a[i] * b[i], in lanes.
PIPETUNE_INLINE float row_dot(const float* a, const float* b, std::int64_t n) {
  Vec16 acc = {};
  std::int64_t i = 0;
  for (; i + kVec <= n; i += kVec) acc += load16(a + i) * load16(b + i);
  if (i < n) acc += load_tail(a, i, n, 0.0f) * load_tail(b, i, n, 0.0f);
  return lanes_sum(acc);
}

}  // namespace pipetune::tensor::cpu
