// Launch shapes and scratch sizes of the CUDA backend's kernels, in plain C++ (no CUDA headers):
// the kernels launch with exactly these numbers, and tests/cuda checks them against closed forms
// without a GPU. Every grid is one-dimensional (x up to 2^31 - 1 blocks); a shape that would not
// fit, or a head size the flash kernels do not support, is refused with an InputError.
//
// Included by .cu files too, so this header stays C++17.
#pragma once

#include <cstdint>

namespace pipetune::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr std::int64_t kMaxGridBlocks = 2147483647;  // gridDim.x limit

constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}
constexpr std::int64_t round_up(std::int64_t a, std::int64_t m) {
  return ceil_div(a, m) * m;
}

struct LaunchShape {
  std::int64_t blocks = 0;        // 1-D grid; 0 means "nothing to launch"
  int threads = 0;                // per block
  std::int64_t shared_bytes = 0;  // dynamic shared memory per block
};

// Elementwise kernels: 256 threads per block, grid-stride loops, at most 2^16 blocks (enough to
// fill any current GPU; larger tensors loop).
inline constexpr int kElementwiseThreads = 256;
inline constexpr std::int64_t kMaxElementwiseBlocks = 1 << 16;
LaunchShape elementwise_shape(std::int64_t n);

// Row kernels with one warp per row (LayerNorm, softmax rows, attention rows): 8 warps a block.
inline constexpr int kRowWarpsPerBlock = 8;
LaunchShape warp_per_row_shape(std::int64_t rows);

// Row kernels with one block per row (cross-entropy over a vocabulary shard): the block is the
// row's width rounded up to whole warps, between one warp and kMaxRowThreads; shared memory holds
// one float per warp for the block reductions.
inline constexpr int kMaxRowThreads = 512;
LaunchShape block_per_row_shape(std::int64_t rows, std::int64_t cols);

// Deterministic column sums over rows (bias and LayerNorm weight gradients): the rows are cut into
// fixed chunks of kColumnChunkRows (independent of the device), one thread sums one column of one
// chunk in row order into a partial; then a block per 32 columns adds the chunk partials onto the
// destination: each of its kColumnFinishWarps warps sums every kColumnFinishWarps-th chunk in
// order, and the warps' sums are added in warp order (a fixed order, whatever the device).
// `outputs` column sums are computed at once (LayerNorm: dw and db).
inline constexpr std::int64_t kColumnChunkRows = 64;
inline constexpr int kColumnFinishWarps = 16;
struct ColumnReduction {
  std::int64_t chunks = 0;          // ceil(rows / kColumnChunkRows)
  std::int64_t scratch_floats = 0;  // outputs * chunks * cols partials
  LaunchShape partial;              // one thread per (chunk, column)
  LaunchShape finish;               // a block per 32 columns, a warp per 16th of the chunks
};
ColumnReduction column_reduction_shape(std::int64_t rows, std::int64_t cols, int outputs = 1);

// Deterministic sums of n values in double (grad sum of squares, mean loss): block b sums the
// fixed range [b * kSumChunk, (b + 1) * kSumChunk) with a fixed tree; one block then adds the
// block partials in a fixed order. The result does not depend on the device or timing.
inline constexpr int kSumThreads = 256;
inline constexpr std::int64_t kSumChunk = 4096;
struct SumReduction {
  std::int64_t blocks = 0;           // ceil(n / kSumChunk), at least 1
  std::int64_t scratch_doubles = 0;  // blocks partials + 1 result
  LaunchShape partial;               // blocks x kSumThreads, shared: kSumThreads doubles
  LaunchShape finish;                // 1 x kSumThreads, shared: kSumThreads doubles
};
SumReduction sum_reduction_shape(std::int64_t n);

// Flash attention (tiled over keys, online softmax, no (T, T) matrix): a block holds
// kFlashRowsPerBlock warps, each warp one query row (forward, dq) or one key row (dk/dv); lanes
// take kFlashTile keys (or queries) of a tile at a time and, for the output rows, ceil(HS / 32)
// channels each. Shared memory (floats): the tile's rows padded to HS + 1 (no bank conflicts when
// lanes read down a column) plus the block's own rows.
inline constexpr int kFlashRowsPerBlock = 8;
inline constexpr int kFlashTile = 32;
inline constexpr std::int64_t kFlashMaxHeadSize = 128;  // 4 channels per lane
// With q_begin > 0 (token slices) the queries are rows [q_begin, T) only, the keys every row.
struct FlashShape {
  std::int64_t head_size = 0;
  int lane_channels = 0;            // ceil(HS / 32): channels of an output row each lane holds
  std::int64_t row_blocks = 0;      // ceil((T - q_begin) / kFlashRowsPerBlock) per (batch, head)
  std::int64_t key_row_blocks = 0;  // ceil(T / kFlashRowsPerBlock) per (batch, head)
  LaunchShape forward;              // blocks = B * NH * row_blocks
  LaunchShape backward_dq;          // same grid: query rows
  LaunchShape backward_dkdv;        // blocks = B * NH * key_row_blocks: key rows
  LaunchShape row_dot;              // D = rowsum(dout * out): one warp per (b, h, query row)
  std::int64_t scratch_floats = 0;  // D: B * NH * (T - q_begin)
};
// Throws InputError for head sizes outside [1, kFlashMaxHeadSize], a q_begin outside [0, T] or a
// grid too large.
FlashShape flash_attention_shape(std::int64_t B, std::int64_t NH, std::int64_t T, std::int64_t HS,
                                 std::int64_t q_begin = 0);

// Register-tiled flash attention (cuda_flash_attention_tiled.cu) for head sizes 32, 64 and 128:
// a block of kFlashTiledThreads threads takes kFlashTiledRows query rows (forward, dq) or key rows
// (dk/dv) of one (b, h) and walks tiles of kFlashTiledRows keys (or queries); each thread holds a
// 4 x 4 tile of scores and 4 rows x HS/16 channels of its outputs. Shared memory (floats): tiles
// of rows padded to HS + 1, and (64, 65) tiles of probabilities / their gradients; above the
// default 48 KiB, so the launcher raises the kernels' limit (at most 227 KiB on Hopper).
inline constexpr int kFlashTiledRows = 64;
inline constexpr int kFlashTiledThreads = 256;
// rows: the warp-per-row kernels above; tiles: the register-tiled ones; tensor_cores: bf16 WMMA
// tiles (cuda_flash_attention_mma.cu) where the head size has them, else tiles;
// tensor_core_registers: bf16 mma.sync with the scores in registers
// (cuda_flash_attention_registers.cu) where the head size has them, else tiles.
enum class FlashVariant { rows, tiles, tensor_cores, tensor_core_registers };
struct FlashTiledShape {
  bool supported = false;       // HS is 32, 64 or 128
  std::int64_t row_blocks = 0;  // ceil(T / kFlashTiledRows) per (batch, head)
  LaunchShape forward;          // Q, K, V tiles; P
  LaunchShape backward_dq;      // Q, dO, K, V tiles; dS
  LaunchShape backward_dkdv;    // K, V, Q, dO tiles; P, dS; lse and D of the query tile
};
FlashTiledShape flash_tiled_shape(std::int64_t B, std::int64_t NH, std::int64_t T, std::int64_t HS);

// Flash attention on tensor cores (cuda_flash_attention_mma.cu) for head sizes 64 and 128: a
// block of 4 warps takes kFlashMmaRows rows, 16 a warp. Shared memory (bytes) by FlashMmaLayout:
// bf16 (64, HS) tiles of rows with stride HS + 8, fp32 (64, 64) tiles with stride 68, bf16 (64,
// 64) tiles with stride 72, the forward's fp32 output rows with stride HS + 4, and per-row
// statistics; every 16 x 16 tile starts on 32 bytes, as WMMA loads need.
inline constexpr int kFlashMmaRows = 64;
inline constexpr int kFlashMmaThreads = 128;
template <int HS>
struct FlashMmaLayout {
  static constexpr int kLd = HS + 8;
  static constexpr int kSLd = kFlashMmaRows + 4;
  static constexpr int kPLd = kFlashMmaRows + 8;
  static constexpr int kOLd = HS + 4;
  static constexpr int kTile = kFlashMmaRows * kLd * 2;
  static constexpr int kSquare = kFlashMmaRows * kSLd * 4;
  static constexpr int kPSquare = kFlashMmaRows * kPLd * 2;
  static constexpr int kOut = kFlashMmaRows * kOLd * 4;
  static constexpr int kRowStats = kFlashMmaRows * 4;
  static constexpr int kForward = 3 * kTile + kSquare + kPSquare + kOut + 2 * kRowStats;
  static constexpr int kDq = 4 * kTile + 2 * kSquare + kPSquare + 2 * kRowStats;
  static constexpr int kDkdv = 4 * kTile + 2 * kSquare + 2 * kPSquare + 2 * kRowStats;
  static_assert(kTile % 32 == 0 && kSquare % 32 == 0 && kPSquare % 32 == 0 && kOut % 32 == 0,
                "every tile starts on 32 bytes");
  static_assert(2 * kSquare >= kOut, "dq, dk and dv rows leave through the two fp32 squares");
};
struct FlashMmaShape {
  bool supported = false;       // HS is 64 or 128
  std::int64_t row_blocks = 0;  // ceil(T / kFlashMmaRows) per (batch, head)
  LaunchShape forward, backward_dq, backward_dkdv;
};
FlashMmaShape flash_mma_shape(std::int64_t B, std::int64_t NH, std::int64_t T, std::int64_t HS);

// Flash attention with its scores in registers (cuda_flash_attention_registers.cu) for head
// sizes 64 and 128: the same blocks as FlashMmaShape's (4 warps, kFlashMmaRows rows, 16 a warp);
// shared memory holds only the bf16 (64, HS) tiles of FlashMmaLayout (row stride HS + 8): q, k,
// v (forward); q, dout, k, v (dq); k, v, q, dout and the query tile's lse and D (dk/dv).
template <int HS>
struct FlashRegistersLayout {
  static constexpr int kForward = 3 * FlashMmaLayout<HS>::kTile;
  static constexpr int kDq = 4 * FlashMmaLayout<HS>::kTile;
  static constexpr int kDkdv = 4 * FlashMmaLayout<HS>::kTile + 2 * FlashMmaLayout<HS>::kRowStats;
};
FlashMmaShape flash_registers_shape(std::int64_t B, std::int64_t NH, std::int64_t T,
                                    std::int64_t HS);

// The attention that stores att (B, NH, T, T): one warp per (b, h, row); the backward's
// d(scores) scratch is as large as att.
std::int64_t attention_backward_scratch_floats(std::int64_t B, std::int64_t NH, std::int64_t T);

// cuBLASLt workspace: 32 MiB on Hopper and later (compute capability 9+), as NVIDIA recommends
// for its kernels there, 4 MiB before.
std::int64_t cublaslt_workspace_bytes(int compute_major);

// The alignment cuBLASLt may assume for an operand at `address`: its largest power-of-two divisor,
// capped at 256 (256 for a null address). Views into one flat buffer can start anywhere.
int pointer_alignment_bytes(std::uintptr_t address);

// Sub-allocations of one scratch buffer start on 256-byte boundaries.
inline constexpr std::int64_t kScratchAlign = 256;
// cuBLASLt's Hopper GEMM kernels want 16-byte-aligned leading dimensions: the row length of a
// row-major (rows, cols) operand of `element_bytes` rounded up to 16 bytes, in elements.
constexpr std::int64_t aligned_leading_dimension(std::int64_t cols, std::int64_t element_bytes) {
  const std::int64_t per16 = 16 / element_bytes;
  return (cols + per16 - 1) / per16 * per16;
}
constexpr std::int64_t scratch_bytes(std::int64_t bytes) {
  return round_up(bytes, kScratchAlign);
}

}  // namespace pipetune::cuda
