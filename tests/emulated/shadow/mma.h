// Host stand-in for CUDA's <mma.h> (nvcuda::wmma) in tests/emulated: 16 x 16 x 16 tiles of bf16
// inputs and fp32 accumulators, with the API's contract and none of a real fragment's layout.
// Every lane of a warp holds the whole tile (num_elements = 256), so a kernel that touches
// fragments only through load, store, mma and fill (as the API allows without knowing the
// layout) computes what the hardware computes, up to the order of the fp32 sums inside mma_sync.
// What it checks: the pointers into shared memory start on 32 bytes (relative to the block's
// shared memory, whose base a GPU aligns), the leading dimensions are multiples of 16 bytes
// (bf16) or 16 bytes (fp32), the operands are bf16-rounded, and every lane of the warp takes part
// in a store (one lane writes between two warp barriers, as the warp's lanes share the store).
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_bf16.h"
#include "engine/cuda/device_utils.cuh"  // the emulation's block and warps (this folder's)

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16 x 16 x 16 tiles only");
  static constexpr int num_elements = 256;
  float x[256] = {};  // (16, 16) row-major, the whole tile in every lane
};

namespace detail {

inline float to_float(__nv_bfloat16 b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b.bits) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline void check(const void* p, unsigned ldm, std::size_t element_bytes, const char* what) {
  const auto* base = reinterpret_cast<const unsigned char*>(
      ::pipetune::cuda::emulation::current_block->shared.data());
  const auto* at = static_cast<const unsigned char*>(p);
  const std::size_t size = ::pipetune::cuda::emulation::current_block->shared.size() * 4;
  if (at < base || at >= base + size)
    throw std::logic_error(std::string(what) + ": the emulation takes shared memory only");
  if ((at - base) % 32 != 0)
    throw std::logic_error(std::string(what) + ": pointer not on 32 bytes (offset " +
                           std::to_string(at - base) + ")");
  if ((ldm * element_bytes) % 16 != 0)
    throw std::logic_error(std::string(what) + ": leading dimension " + std::to_string(ldm) +
                           " not a multiple of 16 bytes");
}

inline void warp_barrier() {
  ::pipetune::cuda::emulation::current_block->warp_of(threadIdx.x).arrive_and_wait();
}

}  // namespace detail

template <typename Use, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p,
                      unsigned ldm) {
  detail::check(p, ldm, 2, "load_matrix_sync");
  constexpr bool col = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = detail::to_float(col ? p[c * ldm + r] : p[r * ldm + c]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  detail::check(p, ldm, 4, "load_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  detail::check(p, ldm, 4, "store_matrix_sync");
  detail::warp_barrier();  // every lane's earlier reads of the destination are done
  if (threadIdx.x % 32 == 0)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * 16 + c];
  detail::warp_barrier();  // and the tile is written before any lane goes on
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float v) {
  for (float& x : f.x) x = v;
}

template <typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float acc = c.x[r * 16 + n];
      for (int k = 0; k < 16; ++k) acc += a.x[r * 16 + k] * b.x[k * 16 + n];
      out[r * 16 + n] = acc;
    }
  std::memcpy(d.x, out, sizeof out);
}

}  // namespace nvcuda::wmma
