#include "engine/cuda/launch_shapes.hpp"

#include <algorithm>
#include <string>

#include "engine/errors.hpp"

namespace pipetune::cuda {

namespace {

std::int64_t checked_blocks(std::int64_t blocks, const char* what) {
  if (blocks > kMaxGridBlocks) {
    throw InputError(std::string(what) + ": " + std::to_string(blocks) +
                     " blocks exceed the CUDA grid limit of " + std::to_string(kMaxGridBlocks));
  }
  return blocks;
}

}  // namespace

LaunchShape elementwise_shape(std::int64_t n) {
  LaunchShape s;
  s.threads = kElementwiseThreads;
  s.blocks =
      std::min(ceil_div(std::max<std::int64_t>(n, 0), kElementwiseThreads), kMaxElementwiseBlocks);
  return s;
}

LaunchShape warp_per_row_shape(std::int64_t rows) {
  LaunchShape s;
  s.threads = kRowWarpsPerBlock * kWarpSize;
  s.blocks = checked_blocks(ceil_div(std::max<std::int64_t>(rows, 0), kRowWarpsPerBlock),
                            "warp-per-row kernel");
  return s;
}

LaunchShape block_per_row_shape(std::int64_t rows, std::int64_t cols) {
  LaunchShape s;
  s.threads = static_cast<int>(std::clamp<std::int64_t>(
      round_up(std::max<std::int64_t>(cols, 1), kWarpSize), kWarpSize, kMaxRowThreads));
  s.blocks = checked_blocks(std::max<std::int64_t>(rows, 0), "block-per-row kernel");
  s.shared_bytes = static_cast<std::int64_t>(s.threads / kWarpSize) * 4;
  return s;
}

ColumnReduction column_reduction_shape(std::int64_t rows, std::int64_t cols, int outputs) {
  ColumnReduction r;
  rows = std::max<std::int64_t>(rows, 0);
  cols = std::max<std::int64_t>(cols, 0);
  r.chunks = ceil_div(rows, kColumnChunkRows);
  r.scratch_floats = static_cast<std::int64_t>(outputs) * r.chunks * cols;
  r.partial.threads = kElementwiseThreads;
  r.partial.blocks =
      checked_blocks(ceil_div(r.chunks * cols, kElementwiseThreads), "column reduction");
  r.finish.threads = 32 * kColumnFinishWarps;
  r.finish.blocks = ceil_div(cols, 32);
  r.finish.shared_bytes = 32 * kColumnFinishWarps * static_cast<std::int64_t>(sizeof(float));
  return r;
}

SumReduction sum_reduction_shape(std::int64_t n) {
  SumReduction r;
  r.blocks = std::max<std::int64_t>(1, ceil_div(std::max<std::int64_t>(n, 0), kSumChunk));
  checked_blocks(r.blocks, "sum reduction");
  r.scratch_doubles = r.blocks + 1;
  r.partial = {r.blocks, kSumThreads, kSumThreads * 8};
  r.finish = {1, kSumThreads, kSumThreads * 8};
  return r;
}

FlashShape flash_attention_shape(std::int64_t B, std::int64_t NH, std::int64_t T, std::int64_t HS,
                                 std::int64_t q_begin) {
  if (HS < 1 || HS > kFlashMaxHeadSize) {
    throw InputError("flash attention: head size " + std::to_string(HS) +
                     " is not supported by the CUDA kernels (1 to " +
                     std::to_string(kFlashMaxHeadSize) + ")");
  }
  if (q_begin < 0 || q_begin > T)
    throw InputError("flash attention: query rows from " + std::to_string(q_begin) +
                     " are outside the sequence of " + std::to_string(T));
  const std::int64_t query_rows = T - q_begin;
  FlashShape f;
  f.head_size = HS;
  f.lane_channels = static_cast<int>(ceil_div(HS, kWarpSize));
  f.row_blocks = ceil_div(query_rows, kFlashRowsPerBlock);
  f.key_row_blocks = ceil_div(T, kFlashRowsPerBlock);
  const std::int64_t blocks = checked_blocks(B * NH * f.row_blocks, "flash attention");
  const std::int64_t key_blocks = checked_blocks(B * NH * f.key_row_blocks, "flash attention");
  const int threads = kFlashRowsPerBlock * kWarpSize;
  const std::int64_t tile = kFlashTile * (HS + 1);               // one padded tile of rows
  const std::int64_t rows = kFlashRowsPerBlock * HS;             // the block's own rows
  f.forward = {blocks, threads, 4 * (2 * tile + rows)};          // K, V tiles; Q rows
  f.backward_dq = {blocks, threads, 4 * (2 * tile + 2 * rows)};  // K, V tiles; Q, dO rows
  f.backward_dkdv = {key_blocks, threads,
                     4 * (2 * tile + 2 * kFlashTile + 2 * rows)};  // Q, dO tiles; lse, D; K, V
  f.row_dot = warp_per_row_shape(B * NH * query_rows);
  f.scratch_floats = B * NH * query_rows;
  return f;
}

FlashTiledShape flash_tiled_shape(std::int64_t B, std::int64_t NH, std::int64_t T,
                                  std::int64_t HS) {
  FlashTiledShape f;
  f.supported = HS == 32 || HS == 64 || HS == 128;
  if (!f.supported) return f;
  f.row_blocks = ceil_div(T, kFlashTiledRows);
  const std::int64_t blocks = checked_blocks(B * NH * f.row_blocks, "flash attention");
  const std::int64_t rows = kFlashTiledRows * (HS + 1);                 // a padded tile of rows
  const std::int64_t square = kFlashTiledRows * (kFlashTiledRows + 1);  // P or dS
  f.forward = {blocks, kFlashTiledThreads, 4 * (3 * rows + square)};
  f.backward_dq = {blocks, kFlashTiledThreads, 4 * (4 * rows + square)};
  f.backward_dkdv = {blocks, kFlashTiledThreads, 4 * (4 * rows + 2 * square + 2 * kFlashTiledRows)};
  return f;
}

namespace {

// The tensor-core kernels' blocks (kFlashMmaRows rows, kFlashMmaThreads threads) and their shared
// memory by head size, from a layout with kForward, kDq and kDkdv bytes.
template <template <int> class Layout>
FlashMmaShape tensor_core_flash_shape(std::int64_t B, std::int64_t NH, std::int64_t T,
                                      std::int64_t HS) {
  FlashMmaShape f;
  f.supported = HS == 64 || HS == 128;
  if (!f.supported) return f;
  f.row_blocks = ceil_div(T, kFlashMmaRows);
  const std::int64_t blocks = checked_blocks(B * NH * f.row_blocks, "flash attention");
  const bool small = HS == 64;
  f.forward = {blocks, kFlashMmaThreads, small ? Layout<64>::kForward : Layout<128>::kForward};
  f.backward_dq = {blocks, kFlashMmaThreads, small ? Layout<64>::kDq : Layout<128>::kDq};
  f.backward_dkdv = {blocks, kFlashMmaThreads, small ? Layout<64>::kDkdv : Layout<128>::kDkdv};
  return f;
}

}  // namespace

FlashMmaShape flash_mma_shape(std::int64_t B, std::int64_t NH, std::int64_t T, std::int64_t HS) {
  return tensor_core_flash_shape<FlashMmaLayout>(B, NH, T, HS);
}

FlashMmaShape flash_registers_shape(std::int64_t B, std::int64_t NH, std::int64_t T,
                                    std::int64_t HS) {
  return tensor_core_flash_shape<FlashRegistersLayout>(B, NH, T, HS);
}

std::int64_t attention_backward_scratch_floats(std::int64_t B, std::int64_t NH, std::int64_t T) {
  return B * NH * T * T;
}

std::int64_t cublaslt_workspace_bytes(int compute_major) {
  return compute_major >= 9 ? std::int64_t{32} << 20 : std::int64_t{4} << 20;
}

int pointer_alignment_bytes(std::uintptr_t address) {
  if (address == 0) return 256;
  const std::uintptr_t lowest = address & (~address + 1);
  return static_cast<int>(std::min<std::uintptr_t>(lowest, 256));
}

}  // namespace pipetune::cuda
