// The CUDA backend's launch shapes and scratch sizes (engine/cuda/launch_shapes.hpp) against
// their closed forms: plain C++, no GPU needed.
#include "engine/cuda/launch_shapes.hpp"

#include <gtest/gtest.h>

#include "engine/errors.hpp"

namespace pipetune::cuda {
namespace {

TEST(LaunchShapes, CeilDivAndRoundUp) {
  EXPECT_EQ(ceil_div(0, 8), 0);
  EXPECT_EQ(ceil_div(1, 8), 1);
  EXPECT_EQ(ceil_div(8, 8), 1);
  EXPECT_EQ(ceil_div(9, 8), 2);
  EXPECT_EQ(round_up(9, 8), 16);
  EXPECT_EQ(round_up(16, 8), 16);
  EXPECT_EQ(scratch_bytes(1), 256);
  EXPECT_EQ(scratch_bytes(256), 256);
  EXPECT_EQ(scratch_bytes(257), 512);
}

TEST(LaunchShapes, ElementwiseIsCeilDivCappedAtTwoToThe16Blocks) {
  for (std::int64_t n : {1LL, 255LL, 256LL, 257LL, 1000000LL}) {
    const LaunchShape s = elementwise_shape(n);
    EXPECT_EQ(s.threads, 256);
    EXPECT_EQ(s.blocks, (n + 255) / 256) << n;
    EXPECT_EQ(s.shared_bytes, 0);
  }
  EXPECT_EQ(elementwise_shape(0).blocks, 0);  // nothing to launch
  EXPECT_EQ(elementwise_shape(std::int64_t{1} << 40).blocks, std::int64_t{1} << 16);
  // The cap leaves grid-stride loops covering every element: blocks * threads <= n.
  const LaunchShape big = elementwise_shape(std::int64_t{1} << 30);
  EXPECT_LE(big.blocks * big.threads, std::int64_t{1} << 30);
}

TEST(LaunchShapes, WarpPerRowHasEightRowsABlock) {
  for (std::int64_t rows : {1LL, 7LL, 8LL, 9LL, 8192LL, 12LL * 1024 * 8}) {
    const LaunchShape s = warp_per_row_shape(rows);
    EXPECT_EQ(s.threads, 256);
    EXPECT_EQ(s.blocks, (rows + 7) / 8) << rows;
    EXPECT_GE(s.blocks * s.threads / 32, rows);  // a warp for every row
  }
  EXPECT_EQ(warp_per_row_shape(0).blocks, 0);
  EXPECT_THROW(warp_per_row_shape(std::int64_t{1} << 40), InputError);
}

TEST(LaunchShapes, BlockPerRowRoundsTheRowToWarpsUpTo512Threads) {
  EXPECT_EQ(block_per_row_shape(4, 1).threads, 32);
  EXPECT_EQ(block_per_row_shape(4, 0).threads, 32);  // an empty shard still reduces
  EXPECT_EQ(block_per_row_shape(4, 33).threads, 64);
  EXPECT_EQ(block_per_row_shape(4, 500).threads, 512);
  EXPECT_EQ(block_per_row_shape(4, 50257).threads, 512);
  const LaunchShape s = block_per_row_shape(8192, 50257);
  EXPECT_EQ(s.blocks, 8192);
  EXPECT_EQ(s.shared_bytes, 512 / 32 * 4);  // one float per warp
  EXPECT_EQ(s.threads % 32, 0);
}

TEST(LaunchShapes, ColumnReductionChunksRowsBy64) {
  const ColumnReduction r = column_reduction_shape(1000, 768);
  EXPECT_EQ(r.chunks, 16);  // ceil(1000 / 64)
  EXPECT_EQ(r.scratch_floats, 16 * 768);
  EXPECT_EQ(r.partial.blocks, (16 * 768 + 255) / 256);
  EXPECT_EQ(r.partial.threads, 256);
  EXPECT_EQ(r.finish.blocks, 24);  // ceil(768 / 32): a block per 32 columns
  EXPECT_EQ(r.finish.threads, 32 * kColumnFinishWarps);
  EXPECT_EQ(r.finish.shared_bytes, 32 * kColumnFinishWarps * 4);  // a float per thread
  const ColumnReduction two = column_reduction_shape(64, 10, 2);
  EXPECT_EQ(two.chunks, 1);
  EXPECT_EQ(two.scratch_floats, 2 * 10);
  const ColumnReduction none = column_reduction_shape(0, 10);
  EXPECT_EQ(none.chunks, 0);
  EXPECT_EQ(none.partial.blocks, 0);
  EXPECT_EQ(none.finish.blocks, 1);  // still adds (zero) onto every column
}

TEST(LaunchShapes, SumReductionHasOneBlockPer4096Values) {
  const SumReduction r = sum_reduction_shape(124'000'000);
  EXPECT_EQ(r.blocks, (124'000'000 + 4095) / 4096);
  EXPECT_EQ(r.scratch_doubles, r.blocks + 1);
  EXPECT_EQ(r.partial.blocks, r.blocks);
  EXPECT_EQ(r.partial.threads, 256);
  EXPECT_EQ(r.partial.shared_bytes, 256 * 8);
  EXPECT_EQ(r.finish.blocks, 1);
  EXPECT_EQ(sum_reduction_shape(0).blocks, 1);  // the result slot is still written
  EXPECT_EQ(sum_reduction_shape(4096).blocks, 1);
  EXPECT_EQ(sum_reduction_shape(4097).blocks, 2);
}

TEST(LaunchShapes, FlashAttentionTilesAndSharedMemory) {
  // GPT-2 124M: B 8, NH 12, T 1024, HS 64.
  const FlashShape f = flash_attention_shape(8, 12, 1024, 64);
  EXPECT_EQ(f.lane_channels, 2);
  EXPECT_EQ(f.row_blocks, 128);  // 1024 / 8 rows a block
  EXPECT_EQ(f.forward.blocks, 8 * 12 * 128);
  EXPECT_EQ(f.forward.threads, 256);
  // forward: K and V tiles of 32 rows padded to 65 floats, plus the block's 8 query rows
  EXPECT_EQ(f.forward.shared_bytes, 4 * (2 * 32 * 65 + 8 * 64));
  EXPECT_EQ(f.backward_dq.shared_bytes, 4 * (2 * 32 * 65 + 2 * 8 * 64));
  EXPECT_EQ(f.backward_dkdv.shared_bytes, 4 * (2 * 32 * 65 + 2 * 32 + 2 * 8 * 64));
  EXPECT_EQ(f.backward_dq.blocks, f.forward.blocks);
  EXPECT_EQ(f.backward_dkdv.blocks, f.forward.blocks);
  EXPECT_EQ(f.row_dot.blocks, 8 * 12 * 1024 / 8);
  EXPECT_EQ(f.scratch_floats, 8 * 12 * 1024);
}

TEST(LaunchShapes, FlashSharedMemoryStaysUnderTheDefault48KiBForEverySupportedHeadSize) {
  for (std::int64_t hs = 1; hs <= kFlashMaxHeadSize; ++hs) {
    const FlashShape f = flash_attention_shape(1, 1, 100, hs);
    EXPECT_EQ(f.lane_channels, (hs + 31) / 32) << hs;
    EXPECT_LE(f.forward.shared_bytes, 48 * 1024) << hs;
    EXPECT_LE(f.backward_dq.shared_bytes, 48 * 1024) << hs;
    EXPECT_LE(f.backward_dkdv.shared_bytes, 48 * 1024) << hs;
  }
  EXPECT_EQ(flash_attention_shape(1, 1, 7, 3).row_blocks, 1);
  EXPECT_EQ(flash_attention_shape(1, 1, 9, 3).row_blocks, 2);
  EXPECT_EQ(flash_attention_shape(2, 3, 0, 16).forward.blocks, 0);  // nothing to launch
}

// A token slice's queries: rows [q_begin, T) for the forward, dq and D; the dk/dv grid still
// covers every key row.
TEST(LaunchShapes, FlashQueryRowsFromAnOffset) {
  const FlashShape f = flash_attention_shape(2, 3, 100, 64, 37);  // 63 query rows
  EXPECT_EQ(f.row_blocks, 8);                                     // ceil(63 / 8)
  EXPECT_EQ(f.key_row_blocks, 13);                                // ceil(100 / 8)
  EXPECT_EQ(f.forward.blocks, 2 * 3 * 8);
  EXPECT_EQ(f.backward_dq.blocks, 2 * 3 * 8);
  EXPECT_EQ(f.backward_dkdv.blocks, 2 * 3 * 13);
  EXPECT_EQ(f.scratch_floats, 2 * 3 * 63);
  EXPECT_EQ(f.row_dot.blocks, (2 * 3 * 63 + kRowWarpsPerBlock - 1) / kRowWarpsPerBlock);
  EXPECT_EQ(flash_attention_shape(1, 1, 10, 8, 10).forward.blocks, 0);  // no query rows
  EXPECT_THROW(flash_attention_shape(1, 1, 10, 8, 11), InputError);
  EXPECT_THROW(flash_attention_shape(1, 1, 10, 8, -1), InputError);
}

TEST(LaunchShapes, FlashRefusesUnsupportedHeadSizesNamingTheRange) {
  try {
    flash_attention_shape(1, 1, 16, 256);
    FAIL() << "head size 256 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("head size 256"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1 to 128"), std::string::npos) << e.what();
  }
  EXPECT_THROW(flash_attention_shape(1, 1, 16, 0), InputError);
  EXPECT_THROW(flash_attention_shape(1, 1, 16, 129), InputError);
  EXPECT_NO_THROW(flash_attention_shape(1, 1, 16, 128));
}

TEST(LaunchShapes, TiledFlashAttentionTilesAndSharedMemory) {
  const FlashTiledShape f = flash_tiled_shape(8, 12, 1024, 64);  // GPT-2 124M
  ASSERT_TRUE(f.supported);
  EXPECT_EQ(f.row_blocks, 16);  // 1024 / 64
  EXPECT_EQ(f.forward.blocks, 8 * 12 * 16);
  EXPECT_EQ(f.forward.threads, 256);
  // Q, K, V tiles of 64 rows padded to 65 floats, and the (64, 65) probabilities
  EXPECT_EQ(f.forward.shared_bytes, 4 * (3 * 64 * 65 + 64 * 65));
  EXPECT_EQ(f.backward_dq.shared_bytes, 4 * (4 * 64 * 65 + 64 * 65));
  EXPECT_EQ(f.backward_dkdv.shared_bytes, 4 * (4 * 64 * 65 + 2 * 64 * 65 + 2 * 64));
  EXPECT_EQ(f.backward_dq.blocks, f.forward.blocks);
  EXPECT_EQ(f.backward_dkdv.blocks, f.forward.blocks);
  EXPECT_EQ(flash_tiled_shape(1, 1, 65, 32).row_blocks, 2);  // a partial last tile
  // The largest head size stays under Hopper's 227 KiB a block.
  EXPECT_LE(flash_tiled_shape(1, 1, 100, 128).backward_dkdv.shared_bytes, 227 * 1024);
  for (std::int64_t hs : {1, 20, 48, 96, 127})
    EXPECT_FALSE(flash_tiled_shape(1, 1, 100, hs).supported) << hs;  // the warp-per-row kernels
}

TEST(LaunchShapes, GemmRowsArePaddedTo16Bytes) {
  EXPECT_EQ(aligned_leading_dimension(50257, 2), 50264);  // bf16: a multiple of 8 elements
  EXPECT_EQ(aligned_leading_dimension(50257, 4), 50260);  // fp32: of 4
  EXPECT_EQ(aligned_leading_dimension(768, 2), 768);
  EXPECT_EQ(aligned_leading_dimension(1, 4), 4);
}

TEST(LaunchShapes, AttentionBackwardScratchIsAsLargeAsAtt) {
  EXPECT_EQ(attention_backward_scratch_floats(2, 3, 5), 2 * 3 * 5 * 5);
}

TEST(LaunchShapes, CublasLtWorkspaceIs32MiBOnHopperAnd4MiBBefore) {
  EXPECT_EQ(cublaslt_workspace_bytes(8), 4 << 20);
  EXPECT_EQ(cublaslt_workspace_bytes(9), 32 << 20);
  EXPECT_EQ(cublaslt_workspace_bytes(10), 32 << 20);
}

TEST(LaunchShapes, PointerAlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(pointer_alignment_bytes(0), 256);
  EXPECT_EQ(pointer_alignment_bytes(0x1000), 256);
  EXPECT_EQ(pointer_alignment_bytes(0x1004), 4);
  EXPECT_EQ(pointer_alignment_bytes(0x1010), 16);
  EXPECT_EQ(pointer_alignment_bytes(0x1080), 128);
  EXPECT_EQ(pointer_alignment_bytes(0x1001), 1);
}

}  // namespace
}  // namespace pipetune::cuda
