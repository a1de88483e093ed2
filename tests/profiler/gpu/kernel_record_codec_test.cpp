// Kernel records survive the bytes they travel in between processes, field for field; damaged
// bytes are an error, never an overread.
#include "profiler/gpu/kernel_record_codec.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace pipetune::profiler {
namespace {

std::vector<KernelRecord> records() {
  KernelRecord gemm;
  gemm.rank = 3;
  gemm.device = 1;
  gemm.stream = 13;
  gemm.correlation = 123456789012;
  gemm.start_ns = 1'000'000'007;
  gemm.end_ns = 1'000'500'000;
  gemm.name = "nvjet_tst_128x64";
  gemm.grid = {132, 2, 1};
  gemm.block = {384, 1, 1};
  gemm.op = "F3.1";
  gemm.phase = SpanKind::F;
  gemm.microbatch = 3;
  gemm.chunk = 1;
  KernelRecord copy;
  copy.name = "memcpy DtoD";
  copy.bytes = 1 << 20;  // no phase, no op
  return {gemm, copy};
}

TEST(KernelRecordCodec, RoundTripsEveryField) {
  const std::vector<KernelRecord> in = records();
  const std::vector<KernelRecord> out = decode_kernels(encode_kernels(in));
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].rank, in[i].rank);
    EXPECT_EQ(out[i].device, in[i].device);
    EXPECT_EQ(out[i].stream, in[i].stream);
    EXPECT_EQ(out[i].correlation, in[i].correlation);
    EXPECT_EQ(out[i].start_ns, in[i].start_ns);
    EXPECT_EQ(out[i].end_ns, in[i].end_ns);
    EXPECT_EQ(out[i].name, in[i].name);
    EXPECT_EQ(out[i].grid, in[i].grid);
    EXPECT_EQ(out[i].block, in[i].block);
    EXPECT_EQ(out[i].bytes, in[i].bytes);
    EXPECT_EQ(out[i].op, in[i].op);
    EXPECT_EQ(out[i].phase, in[i].phase);
    EXPECT_EQ(out[i].microbatch, in[i].microbatch);
    EXPECT_EQ(out[i].chunk, in[i].chunk);
  }
  EXPECT_TRUE(decode_kernels(encode_kernels({})).empty());
}

TEST(KernelRecordCodec, DamagedBytesAreAnError) {
  const std::string bytes = encode_kernels(records());
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, std::size_t{12}, bytes.size() - 1})
    EXPECT_THROW(decode_kernels(bytes.substr(0, cut)), std::runtime_error) << cut;
  EXPECT_THROW(decode_kernels(bytes + "x"), std::runtime_error);  // bytes after the end
  std::string foreign = bytes;
  foreign[0] ^= 0x55;
  EXPECT_THROW(decode_kernels(foreign), std::runtime_error);
}

}  // namespace
}  // namespace pipetune::profiler
