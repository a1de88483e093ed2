// CudaBackend: construction (device, stream, cuBLASLt handle and workspace), scratch, uploads and
// read-backs, and the elementwise, optimizer and reduction ops. The GEMMs are in cuda_gemm.cpp,
// the other ops in cuda_backend_ops.cpp and cuda_backend_moe.cpp; the kernels in cuda_*.cu.
#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cublaslt_library.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/launch_shapes.hpp"

namespace pipetune::cuda {

using tensor::ConstTensorView;
using tensor::TensorView;

// ---- DeviceBuffer ---------------------------------------------------------------------------

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);  // no throw from a destructor
}

void* DeviceBuffer::reserve(std::size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_ && data_ != nullptr) return data_;
  if (data_ != nullptr) {
    PIPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream));  // earlier kernels may still read it
    PIPETUNE_CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
  }
  // Grow by at least half again, so a sequence of slowly growing requests allocates rarely.
  const std::size_t want =
      std::max<std::size_t>({bytes, bytes_ + bytes_ / 2, static_cast<std::size_t>(kScratchAlign)});
  PIPETUNE_CUDA_CHECK(cudaMalloc(&data_, want));
  bytes_ = want;
  return data_;
}

// ---- construction ---------------------------------------------------------------------------

CudaBackend::CudaBackend() : CudaBackend(Options{}) {}

CudaBackend::CudaBackend(Options options) : options_(options) {
  attention_kernel_ = tensor::AttentionKernel::flash;  // no (T, T) matrix in device memory
  int count = 0;
  PIPETUNE_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (options_.device < 0 || options_.device >= count) {
    throw CudaError("CudaBackend: device " + std::to_string(options_.device) + " does not exist (" +
                    std::to_string(count) + " CUDA devices)");
  }
  PIPETUNE_CUDA_CHECK(cudaSetDevice(options_.device));
  int major = 0;
  PIPETUNE_CUDA_CHECK(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options_.device));
  try {
    PIPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PIPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&staging_done_, cudaEventDisableTiming));
    PIPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&idle_.stream, cudaStreamNonBlocking));
    PIPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&idle_.staging_done, cudaEventDisableTiming));
    PIPETUNE_CUBLAS_CHECK(cublaslt().Create(&lt_));
    workspace_bytes_ = static_cast<std::size_t>(cublaslt_workspace_bytes(major));
    workspace_.reserve(workspace_bytes_, stream_);
  } catch (...) {
    if (lt_ != nullptr) cublaslt().Destroy(lt_);
    for (cudaEvent_t e : {staging_done_, idle_.staging_done})
      if (e != nullptr) cudaEventDestroy(e);
    for (cudaStream_t st : {stream_, idle_.stream})
      if (st != nullptr) cudaStreamDestroy(st);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  // Nothing here throws: a failing call at teardown has nobody to report to.
  cudaSetDevice(options_.device);
  for (cudaStream_t st : {stream_, idle_.stream})
    if (st != nullptr) cudaStreamSynchronize(st);
  for (void* p : {pinned_, idle_.pinned})
    if (p != nullptr) cudaFreeHost(p);
  if (lt_ != nullptr) cublaslt().Destroy(lt_);
  for (cudaEvent_t e : {staging_done_, idle_.staging_done})
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaStream_t st : {stream_, idle_.stream})
    if (st != nullptr) cudaStreamDestroy(st);
}

void CudaBackend::use_second_stream(bool on) {
  if (on == on_second_) return;
  // The second stream's cuBLASLt workspace on its first use (the first stream's is reserved at
  // construction): a rank that never pairs ops pays nothing for it.
  if (on && idle_.workspace.get() == nullptr) {
    activate();
    idle_.workspace.reserve(workspace_bytes_, idle_.stream);
  }
  swap_lanes();
  on_second_ = on;
}

void CudaBackend::swap_lanes() noexcept {
  std::swap(stream_, idle_.stream);
  std::swap(staging_done_, idle_.staging_done);
  std::swap(pinned_, idle_.pinned);
  std::swap(pinned_bytes_, idle_.pinned_bytes);
  workspace_.swap(idle_.workspace);
  scratch_.swap(idle_.scratch);
  ids_.swap(idle_.ids);
  bf16_[0].swap(idle_.bf16[0]);
  bf16_[1].swap(idle_.bf16[1]);
  realign_.swap(idle_.realign);
}

void CudaBackend::activate() {
  PIPETUNE_CUDA_CHECK(cudaSetDevice(options_.device));
}

void CudaBackend::synchronize() {
  activate();
  PIPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- staging, uploads and read-backs --------------------------------------------------------

void* CudaBackend::staging(std::size_t bytes) {
  // The previous copy from (or into) staging must be done before the host touches it again.
  PIPETUNE_CUDA_CHECK(cudaEventSynchronize(staging_done_));
  if (bytes > pinned_bytes_) {
    if (pinned_ != nullptr) PIPETUNE_CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    const std::size_t want = std::max<std::size_t>(bytes, 4096);
    PIPETUNE_CUDA_CHECK(cudaMallocHost(&pinned_, want));
    pinned_bytes_ = want;
  }
  return pinned_;
}

void* CudaBackend::upload(const void* host, std::size_t bytes) {
  void* dev = ids_.reserve(std::max<std::size_t>(bytes, 4), stream_);
  if (bytes == 0) return dev;
  void* pinned = staging(bytes);
  std::memcpy(pinned, host, bytes);
  PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, stream_));
  PIPETUNE_CUDA_CHECK(cudaEventRecord(staging_done_, stream_));
  return dev;
}

const std::int32_t* CudaBackend::upload_ids(std::span<const std::int32_t> ids) {
  return static_cast<const std::int32_t*>(upload(ids.data(), ids.size_bytes()));
}

void CudaBackend::download(void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  void* pinned = staging(bytes);
  PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(pinned, device, bytes, cudaMemcpyDeviceToHost, stream_));
  PIPETUNE_CUDA_CHECK(cudaEventRecord(staging_done_, stream_));
  PIPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::memcpy(host, pinned, bytes);
}

// ---- elementwise ----------------------------------------------------------------------------

void CudaBackend::do_zero(TensorView t) {
  activate();
  if (t.numel() == 0) return;
  PIPETUNE_CUDA_CHECK(
      cudaMemsetAsync(t.data, 0, static_cast<std::size_t>(t.numel()) * sizeof(float), stream_));
}

void CudaBackend::do_scale(TensorView t, float s) {
  activate();
  kernels::scale(stream_, t.data, s, t.numel());
}

void CudaBackend::do_add(ConstTensorView a, ConstTensorView b, TensorView out) {
  activate();
  kernels::add(stream_, a.data, b.data, out.data, out.numel());
}

void CudaBackend::do_accumulate(TensorView dst, ConstTensorView src) {
  activate();
  kernels::accumulate(stream_, dst.data, src.data, dst.numel());
}

void CudaBackend::do_fill_columns(TensorView t, std::int64_t col_lo, float value) {
  activate();
  kernels::fill_columns(stream_, t.data, t.shape[0], t.shape[1], col_lo, value);
}

void CudaBackend::do_gelu_forward(ConstTensorView x, TensorView y) {
  activate();
  kernels::gelu_forward(stream_, x.data, y.data, x.numel());
}

void CudaBackend::do_gelu_backward_input(ConstTensorView dy, ConstTensorView x, TensorView dx,
                                         tensor::GradientWrite write) {
  activate();
  kernels::gelu_backward(stream_, dy.data, x.data, dx.data, x.numel(),
                         write == tensor::GradientWrite::overwrite);
}

// ---- optimizer ------------------------------------------------------------------------------

void CudaBackend::do_adamw_step(TensorView params, ConstTensorView grads, TensorView m,
                                TensorView v, const tensor::AdamWConfig& cfg, std::int64_t step) {
  const tensor::AdamWSegment whole{0, params.numel(), true};
  do_adamw_step_segments(params, grads, m, v, {&whole, 1}, cfg, step, 1.0f);
}

// A launch per kAdamWSegmentsPerLaunch segments (GPT-2's 149 parameter tensors make about 100
// segments of alternating weight decay: 2 launches, where a launch per tensor was 149, and as
// many scale launches again when clipping).
void CudaBackend::do_adamw_step_segments(TensorView params, ConstTensorView grads, TensorView m,
                                         TensorView v,
                                         std::span<const tensor::AdamWSegment> segments,
                                         const tensor::AdamWConfig& cfg, std::int64_t step,
                                         float grad_scale) {
  activate();
  const tensor::AdamWBiasCorrections bc = tensor::adamw_bias_corrections(cfg, step);
  for (std::size_t first = 0; first < segments.size(); first += kernels::kAdamWSegmentsPerLaunch) {
    kernels::AdamWSegmentTable table;
    table.count = static_cast<int>(
        std::min<std::size_t>(kernels::kAdamWSegmentsPerLaunch, segments.size() - first));
    for (int k = 0; k < table.count; ++k) {
      const tensor::AdamWSegment& seg = segments[first + static_cast<std::size_t>(k)];
      table.begin[k] = seg.begin;
      table.end[k] = seg.end;
      if (seg.decay) table.decay_bits |= std::uint64_t{1} << k;
    }
    kernels::adamw_segments(stream_, params.data, grads.data, m.data, v.data, table, grad_scale,
                            cfg.beta1, cfg.beta2, cfg.lr, cfg.eps, cfg.weight_decay, bc.first,
                            bc.second);
  }
}

// One readback for all segments (a readback per parameter tensor was GPT-2's optimizer phase's
// 150 synchronisations a step).
double CudaBackend::do_grad_sum_squares_segments(ConstTensorView g,
                                                 std::span<const tensor::FlatSegment> segments) {
  activate();
  std::vector<std::int64_t> begin, end;
  begin.reserve(segments.size());
  end.reserve(segments.size());
  for (const tensor::FlatSegment& seg : segments) {
    begin.push_back(seg.begin);
    end.push_back(seg.end);
  }
  const int count = static_cast<int>(segments.size());
  const std::int64_t doubles =
      kernels::sum_segments_scratch_doubles(begin.data(), end.data(), count);
  auto* partial = static_cast<double*>(scratch(static_cast<std::size_t>(doubles) * sizeof(double)));
  kernels::sum_squares_segments(stream_, g.data, begin.data(), end.data(), count, partial);
  double total = 0.0;
  download(&total, partial + doubles - 1, sizeof total);
  return total;
}

double CudaBackend::do_grad_sum_squares(ConstTensorView g) {
  activate();
  const SumReduction r = sum_reduction_shape(g.numel());
  auto* partial =
      static_cast<double*>(scratch(static_cast<std::size_t>(r.scratch_doubles) * sizeof(double)));
  kernels::sum_squares(stream_, g.data, g.numel(), partial);
  double total = 0.0;
  download(&total, partial + r.blocks, sizeof total);
  return total;
}

}  // namespace pipetune::cuda
