// Warp-level bf16 tensor-core primitives in PTX (sm_80 on): ldmatrix, which loads four 8 x 8
// matrices of 16-bit values from shared memory into the fragment layout of mma.sync, and
// mma.sync m16n8k16 with bf16 inputs and fp32 accumulators. Unlike WMMA, the register layout of
// these fragments is fixed by the PTX ISA, so a kernel may work on accumulators in registers (the
// softmax of cuda_flash_attention_registers.cu) and turn them into the next product's operand
// without going through shared memory. Layouts (g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major) a[0]: (g, 2t..2t+1), a[1]: (g + 8, 2t..), a[2]: (g, 2t + 8..),
//     a[3]: (g + 8, 2t + 8..), the lower column in the low half of each register;
//   B (16 x 8, k x n) b0: (k 2t..2t+1, n g), b1: (k 2t + 8.., n g);
//   C (16 x 8) c[0], c[1]: (g, 2t), (g, 2t + 1); c[2], c[3]: (g + 8, 2t), (g + 8, 2t + 1).
// tests/emulated/shadow has the host version of this file, which computes from those layouts.
#pragma once

#include <cuda_bf16.h>

namespace pipetune::cuda::kernels {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Lane l passes the address of row l % 8 of matrix l / 8 (8 bf16, 16-byte aligned, in shared
// memory); r[i] receives matrix i's elements (g, 2t) and (g, 2t + 1).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const __nv_bfloat16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// As ldmatrix_x4, each matrix transposed: r[i] receives matrix i's elements (2t, g) and (2t + 1,
// g).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const __nv_bfloat16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// d (16 x 8, fp32) += a (16 x 16, bf16) b (16 x 8, bf16 in b0, b1).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                               unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace pipetune::cuda::kernels
