// Host cost of a step's CUPTI records at the collector's flush (engine/cuda/cupti_records.hpp),
// on the CPU: no GPU needed. The buffer is what a step of short kernels hands over: L layers of
// 16 kernels each (cuBLASLt GEMMs with their unmangled names, pipetune's own kernels mangled),
// each kernel record after its launch call's record and three calls that launch nothing (CUPTI
// recorded 686 runtime and driver calls for the capture benchmark's 168 kernels on an H100),
// 5 * 16 * L records in all, laid out as CUPTI lays them (8-byte aligned, one name string shared
// by the records of a kernel).
//   BM_StepRecords/cached:0  every name worked out afresh (demangled, looked up in CUPTI's
//                            tables) for each record, as the collector did before its cache
//   BM_StepRecords/cached:1  the collector's way: CuptiNameCache kept across flushes
//   .../launches_only:1      the hub's collector: the calls that launch nothing dropped as the
//                            buffer is read (ApiCallsKept::launches)
// Reported: time per step's buffer, and records per second (items_per_second).
#include <benchmark/benchmark.h>
#include <cupti.h>

#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/cupti_collector.hpp"
#include "engine/cuda/cupti_records.hpp"

namespace {

// The kernels of one layer's MLP (names as CUPTI reports them: cuBLASLt's nvjet kernels are not
// mangled, pipetune's are), each one string, as CUPTI shares one among a kernel's records.
constexpr const char* kGemmForward = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_bias_TNT";
constexpr const char* kGemmInputGradient = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT";
constexpr const char* kGemmWeightGradient = "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_coopA_NTN";
constexpr const char* kGeluForward =
    "_ZN8pipetune4cuda7kernels52_GLOBAL__N__5ac1e9d2_19_cuda_elementwise_cu_3e1f0a7b"
    "19gelu_forward_kernelEPKfPfl";
constexpr const char* kGeluBackward =
    "_ZN8pipetune4cuda7kernels52_GLOBAL__N__5ac1e9d2_19_cuda_elementwise_cu_3e1f0a7b"
    "20gelu_backward_kernelEPKfS4_Pfl";
constexpr const char* kColumnPartial =
    "_ZN8pipetune4cuda7kernels47_GLOBAL__N__374a3c87_14_cuda_reduce_cu_4a357be021column_"
    "partial_kernelEPKflllPf";
constexpr const char* kColumnFinish =
    "_ZN8pipetune4cuda7kernels47_GLOBAL__N__374a3c87_14_cuda_reduce_cu_4a357be020column_"
    "finish_kernelEPKfllPf";
constexpr const char* kAxpy =
    "_ZN8pipetune4cuda7kernels52_GLOBAL__N__5ac1e9d2_19_cuda_elementwise_cu_3e1f0a7b"
    "14axpy_kernelEfPKfPfl";
constexpr const char* kCutlassGemm =
    "_ZN7cutlass7Kernel2I74cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_64x1_tn_"
    "align8EEvNT_6ParamsE";
constexpr const char* kScale =
    "_ZN8pipetune4cuda7kernels52_GLOBAL__N__5ac1e9d2_19_cuda_elementwise_cu_3e1f0a7b"
    "14scale_kernelEfPfl";
// In launch order: forward, then each linear layer's input gradient, bias and weight gradient.
const char* const kLayerKernels[] = {kGemmForward,
                                     kGeluForward,
                                     kGemmForward,
                                     kColumnPartial,
                                     kColumnFinish,
                                     kGemmInputGradient,
                                     kGemmWeightGradient,
                                     kGeluBackward,
                                     kColumnPartial,
                                     kColumnFinish,
                                     kGemmInputGradient,
                                     kGemmWeightGradient,
                                     kAxpy,
                                     kAxpy,
                                     kCutlassGemm,
                                     kScale};
constexpr int kLayers = 12;
// The calls CUPTI records beside each launch.
const std::pair<CUpti_ActivityKind, CUpti_CallbackId> kCallsThatLaunchNothing[] = {
    {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020},
    {CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent},
    {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetCaptureInfo_v2_v11030}};

class StepBuffer {
 public:
  StepBuffer() {
    std::uint32_t correlation = 1;
    std::uint64_t t = 1'000'000;
    for (int layer = 0; layer < kLayers; ++layer)
      for (const char* name : kLayerKernels) {
        for (const auto& [kind, cbid] : kCallsThatLaunchNothing) {
          CUpti_ActivityAPI other;
          std::memset(&other, 0, sizeof other);
          other.kind = kind;
          other.cbid = cbid;
          other.start = t;
          other.end = t + 300;
          other.threadId = 4242;
          other.correlationId = correlation++;
          add(other);
        }
        CUpti_ActivityAPI a;
        std::memset(&a, 0, sizeof a);
        a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
        a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
        a.start = t;
        a.end = t + 3'000;
        a.threadId = 4242;
        a.correlationId = correlation;
        add(a);
        CUpti_ActivityKernel10 k;
        std::memset(&k, 0, sizeof k);
        k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k.start = t + 5'000;
        k.end = t + 150'000;
        k.streamId = 7;
        k.gridX = 96;
        k.gridY = k.gridZ = 1;
        k.blockX = 256;
        k.blockY = k.blockZ = 1;
        k.correlationId = correlation++;
        k.name = name;  // one string per kernel, as CUPTI shares it
        add(k);
        t += 160'000;
      }
  }
  std::uint8_t* data() { return reinterpret_cast<std::uint8_t*>(words_.data()); }
  std::size_t bytes() const { return bytes_; }
  std::size_t records() const { return records_; }

 private:
  template <typename Record>
  void add(const Record& r) {
    const std::size_t padded = (sizeof r + 7) / 8 * 8;
    words_.resize((bytes_ + padded) / 8, 0);
    std::memcpy(reinterpret_cast<std::uint8_t*>(words_.data()) + bytes_, &r, sizeof r);
    bytes_ += padded;
    ++records_;
  }
  std::vector<std::uint64_t> words_;
  std::size_t bytes_ = 0, records_ = 0;
};

void BM_StepRecords(benchmark::State& state) {
  const bool cached = state.range(0) != 0;
  const auto kept = state.range(1) != 0 ? pipetune::cuda::ApiCallsKept::launches
                                        : pipetune::cuda::ApiCallsKept::all;
  StepBuffer buffer;
  pipetune::cuda::CuptiNameCache names;  // the collector's: lives across flushes
  std::size_t kept_records = 0;
  for (auto _ : state) {
    pipetune::profiler::GpuCapture capture;
    if (cached) {
      const auto walk =
          pipetune::cuda::append_cupti_buffer(buffer.data(), buffer.bytes(), capture, names, kept);
      benchmark::DoNotOptimize(walk.kept);
    } else {
      CUpti_Activity* record = nullptr;
      while (pipetune::cuda::cupti().ActivityGetNextRecord(buffer.data(), buffer.bytes(),
                                                           &record) == CUPTI_SUCCESS)
        benchmark::DoNotOptimize(pipetune::cuda::append_cupti_record(*record, capture));
    }
    kept_records = capture.activities.size() + capture.api_calls.size();
    benchmark::DoNotOptimize(capture.activities.data());
  }
  // Every record, or every device record and its launch call.
  const std::size_t expected = kept == pipetune::cuda::ApiCallsKept::all
                                   ? buffer.records()
                                   : 2 * std::size(kLayerKernels) * kLayers;
  if (kept_records != expected) state.SkipWithError("records lost in the walk");
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(buffer.records()));
  state.counters["records"] = static_cast<double>(buffer.records());
  state.counters["kept"] = static_cast<double>(kept_records);
}
BENCHMARK(BM_StepRecords)
    ->ArgNames({"cached", "launches_only"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
