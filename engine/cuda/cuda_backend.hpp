// CudaBackend: the engine's Backend interface (engine/tensor/backend.hpp) on one CUDA device.
// GEMMs through cuBLASLt, own kernels for everything else (engine/cuda/cuda_*.cu), all on one
// stream the backend owns. Every op runs in the op tests beside CpuBackend, on the same inputs
// and checks (tests/engine/tensor/*_op_test.cpp); what only this backend has (bf16, flash
// variants, GELU epilogues) is compared with CpuBackend in tests/gpu.
//
// Memory convention:
//  - Every TensorView passed to a CudaBackend op points to DEVICE memory of the backend's device
//    (the shape checks of backend.cpp read shapes only, never data).
//  - Token ids, targets and MoeRouting stay HOST data, as for every backend: the shared checks
//    read the ids (range errors are InputErrors before any launch), and the backend uploads them
//    through a pinned staging buffer into device scratch, stream-ordered before the kernels that
//    read them. The embedding backward uses that: it groups each table row's positions on the
//    host, so its scatter-add is deterministic without atomics or a device sort.
//  - Ops are asynchronous on stream() unless they return a value to the host: the losses
//    (cross_entropy_forward, vocab_ce_loss), moe_aux_loss and grad_sum_squares synchronise the
//    stream and copy their scalar back; moe_router_forward copies the probabilities back to run
//    the routing on the host (see below). synchronize() waits for everything issued.
//  - MoE routing is host data (MoeRouting): the router's softmax runs on the device, the
//    probabilities come back to the host, route_top_k (moe_routing.hpp, the CPU backend's own
//    routing) decides the top-k choices and capacity slots, and dispatch / combine upload the
//    routing's slot tables on each call (they are small: N*k + E*capacity ints).
//
// Numerics: fp32 everywhere by default (cuBLASLt with CUBLAS_COMPUTE_32F: no TF32). With
// Options::precision = bf16 the linear layers convert their GEMM inputs (x, w, dy) to bf16 copies
// in scratch and multiply with fp32 accumulation and fp32 outputs; weights, gradients, optimizer
// state and every other op stay fp32 (master weights are the fp32 tensors the caller owns).
// Reductions (grad sum of squares, mean loss, bias / LayerNorm weight gradients, embedding
// gradients, attention backward) use fixed orders and no atomics: a run repeats bit for bit on
// the same device.
//
// Errors: a failing CUDA or cuBLASLt call throws CudaError (cuda_check.hpp) naming the call, file
// and line; shapes and ids are checked by the Backend interface (InputError). The constructor
// throws CudaError when no device is usable (the message is cudaGetDeviceCount's). A head size
// the flash kernels do not support is an InputError (launch_shapes.hpp).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/cuda/launch_shapes.hpp"
#include "engine/tensor/backend.hpp"

namespace pipetune::cuda {

enum class Precision { fp32, bf16 };

// Where a bf16 GEMM's operands become bf16. copies: a kernel writes bf16 copies of both fp32
// operands first (rows padded to 16 bytes) and cuBLASLt multiplies bf16; in_gemm: cuBLASLt reads
// the fp32 operands and rounds them itself (CUBLAS_COMPUTE_32F_FAST_16BF), which saves the
// copies' traffic (37 ms of the H200's 330 ms bf16 GPT-2 step) if its kernels for that keep pace
// with the bf16 ones (not yet measured: tests/bench/cuda/cuda_gemm_bench.cpp compares them).
enum class Bf16Operands { copies, in_gemm };

// A growable device allocation (cudaMalloc). Growing first synchronises `stream`, since kernels
// issued earlier may still read the old allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  void* reserve(std::size_t bytes, cudaStream_t stream);
  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  void swap(DeviceBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class CudaBackend final : public tensor::Backend {
 public:
  struct Options {
    Precision precision = Precision::fp32;  // of the linear layers' GEMM inputs
    int device = 0;
    // Flash attention's kernels: register tiles where the head size has them (32, 64, 128), the
    // warp-per-row kernels everywhere (kept to compare with), or bf16 products on tensor cores
    // where the head size has them (64, 128; else tiles), whatever the GEMMs' precision.
    FlashVariant flash = FlashVariant::tiles;
    Bf16Operands bf16_operands = Bf16Operands::copies;  // with Precision::bf16
    // linear_gelu_forward / linear_gelu_backward_input as one GEMM with cuBLASLt's GELU_AUX and
    // DGELU epilogues (true), or as the GEMM and then the element-wise kernel (false: the path
    // measured on a GPU; the epilogues are not yet, nor is cuBLASLt's GELU checked there against
    // the tanh approximation the other backends compute).
    bool gelu_epilogues = false;
  };

  CudaBackend();
  explicit CudaBackend(Options options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override {
    return options_.precision == Precision::bf16 ? "cuda-bf16" : "cuda";
  }
  const Options& options() const { return options_; }
  cudaStream_t stream() const { return stream_; }
  std::size_t gemm_workspace_bytes() const { return workspace_bytes_; }
  // Waits for every op issued so far on the current stream.
  void synchronize();

  // The second stream, for two ops of the rank at once (an overlapped pair: DualPipeV's "F & B").
  // While on, ops are issued on it with their own scratch, cuBLASLt workspace, id uploads and
  // pinned staging, so that neither stream's kernels touch the other's temporaries; stream() is
  // then the second stream. Ordering the two streams is the caller's (events: CudaRankDevice).
  // The stream exists from construction (a capture can name it); its buffers come on first use.
  void use_second_stream(bool on);
  bool on_second_stream() const { return on_second_; }
  cudaStream_t second_stream() const { return on_second_ ? stream_ : idle_.stream; }
  cudaStream_t first_stream() const { return on_second_ ? idle_.stream : stream_; }

 protected:
  void do_zero(tensor::TensorView t) override;
  void do_scale(tensor::TensorView t, float s) override;
  void do_add(tensor::ConstTensorView a, tensor::ConstTensorView b,
              tensor::TensorView out) override;
  void do_accumulate(tensor::TensorView dst, tensor::ConstTensorView src) override;
  void do_fill_columns(tensor::TensorView t, std::int64_t col_lo, float value) override;
  void do_linear_forward(tensor::ConstTensorView x, tensor::ConstTensorView w,
                         tensor::ConstTensorView b, tensor::TensorView y) override;
  void do_linear_backward_input(tensor::ConstTensorView dy, tensor::ConstTensorView w,
                                tensor::TensorView dx, tensor::GradientWrite write) override;
  void do_linear_backward_weight(tensor::ConstTensorView dy, tensor::ConstTensorView x,
                                 tensor::TensorView dw, tensor::TensorView db) override;
  void do_linear_gelu_backward(tensor::ConstTensorView dy, tensor::ConstTensorView x,
                               tensor::ConstTensorView w, tensor::ConstTensorView pre,
                               tensor::TensorView dpre, tensor::TensorView dw,
                               tensor::TensorView db) override;
  void do_linear_backward(tensor::ConstTensorView dy, tensor::ConstTensorView x,
                          tensor::ConstTensorView w, tensor::TensorView dx,
                          tensor::GradientWrite write, tensor::TensorView dw,
                          tensor::TensorView db) override;
  void do_linear_gelu_forward(tensor::ConstTensorView x, tensor::ConstTensorView w,
                              tensor::ConstTensorView b, tensor::TensorView pre,
                              tensor::TensorView y) override;
  void do_linear_gelu_backward_input(tensor::ConstTensorView dy, tensor::ConstTensorView w,
                                     tensor::ConstTensorView pre, tensor::TensorView dpre) override;
  void do_embedding_forward(std::span<const std::int32_t> tokens, tensor::ConstTensorView wte,
                            std::int64_t vocab_lo, tensor::ConstTensorView wpe,
                            tensor::TensorView out) override;
  void do_embedding_backward_weight(std::span<const std::int32_t> tokens,
                                    tensor::ConstTensorView dout, std::int64_t vocab_lo,
                                    tensor::TensorView dwte, tensor::TensorView dwpe) override;
  void do_layernorm_forward(tensor::ConstTensorView x, tensor::ConstTensorView w,
                            tensor::ConstTensorView b, tensor::TensorView y,
                            tensor::TensorView mean, tensor::TensorView rstd) override;
  void do_layernorm_backward_input(tensor::ConstTensorView dy, tensor::ConstTensorView x,
                                   tensor::ConstTensorView w, tensor::ConstTensorView mean,
                                   tensor::ConstTensorView rstd, tensor::ConstTensorView residual,
                                   tensor::TensorView dx) override;
  void do_layernorm_backward_weight(tensor::ConstTensorView dy, tensor::ConstTensorView x,
                                    tensor::ConstTensorView mean, tensor::ConstTensorView rstd,
                                    tensor::TensorView dw, tensor::TensorView db) override;
  void do_gelu_forward(tensor::ConstTensorView x, tensor::TensorView y) override;
  void do_gelu_backward_input(tensor::ConstTensorView dy, tensor::ConstTensorView x,
                              tensor::TensorView dx, tensor::GradientWrite write) override;
  void do_attention_forward(tensor::ConstTensorView qkv, std::int64_t num_heads,
                            tensor::TensorView out, tensor::TensorView att) override;
  void do_attention_backward_input(tensor::ConstTensorView dout, tensor::ConstTensorView qkv,
                                   tensor::ConstTensorView att, std::int64_t num_heads,
                                   tensor::TensorView dqkv) override;
  void do_attention_flash_forward(tensor::ConstTensorView qkv, std::int64_t num_heads,
                                  tensor::TensorView out, tensor::TensorView lse) override;
  void do_attention_flash_backward_input(tensor::ConstTensorView dout, tensor::ConstTensorView qkv,
                                         tensor::ConstTensorView out, tensor::ConstTensorView lse,
                                         std::int64_t num_heads, tensor::TensorView dqkv,
                                         tensor::GradientWrite write) override;
  void do_attention_flash_forward_rows(tensor::ConstTensorView qkv, std::int64_t q_begin,
                                       std::int64_t num_heads, tensor::TensorView out,
                                       tensor::TensorView lse) override;
  void do_attention_flash_backward_input_rows(tensor::ConstTensorView dout,
                                              tensor::ConstTensorView qkv,
                                              tensor::ConstTensorView out,
                                              tensor::ConstTensorView lse, std::int64_t q_begin,
                                              std::int64_t num_heads,
                                              tensor::TensorView dqkv) override;
  float do_cross_entropy_forward(tensor::ConstTensorView logits,
                                 std::span<const std::int32_t> targets,
                                 tensor::TensorView losses) override;
  void do_cross_entropy_backward(tensor::ConstTensorView logits,
                                 std::span<const std::int32_t> targets, float grad_scale,
                                 tensor::TensorView dlogits) override;
  void do_vocab_ce_local_stats(tensor::ConstTensorView logits_shard,
                               std::span<const std::int32_t> targets, std::int64_t vocab_lo,
                               tensor::TensorView local_max, tensor::TensorView local_sum,
                               tensor::TensorView target_logit) override;
  void do_vocab_ce_rescale_sum(tensor::ConstTensorView local_max,
                               tensor::ConstTensorView global_max,
                               tensor::TensorView local_sum) override;
  float do_vocab_ce_loss(tensor::ConstTensorView global_max, tensor::ConstTensorView global_sum,
                         tensor::ConstTensorView target_logit, tensor::TensorView losses) override;
  void do_vocab_ce_numerators(tensor::ConstTensorView logits_shard, tensor::ConstTensorView row_max,
                              tensor::TensorView numerators) override;
  void do_vocab_ce_input_grad(tensor::ConstTensorView shard_max, tensor::ConstTensorView global_max,
                              tensor::ConstTensorView global_sum, tensor::ConstTensorView weights,
                              tensor::ConstTensorView target_rows, float grad_scale,
                              tensor::TensorView dx) override;
  void do_vocab_ce_backward(tensor::ConstTensorView logits_shard,
                            std::span<const std::int32_t> targets, std::int64_t vocab_lo,
                            tensor::ConstTensorView global_max, tensor::ConstTensorView global_sum,
                            float grad_scale, tensor::TensorView dlogits_shard,
                            tensor::GradientWrite write) override;
  void do_moe_router_forward(tensor::ConstTensorView logits, std::int64_t top_k,
                             std::int64_t capacity, tensor::TensorView probs,
                             tensor::MoeRouting& routing) override;
  void do_moe_router_backward(tensor::ConstTensorView probs, tensor::ConstTensorView dprobs,
                              tensor::TensorView dlogits) override;
  float do_moe_aux_loss(tensor::ConstTensorView probs, const tensor::MoeRouting& routing) override;
  void do_moe_aux_loss_backward(const tensor::MoeRouting& routing, float grad_scale,
                                tensor::TensorView dprobs) override;
  void do_moe_dispatch(tensor::ConstTensorView x, const tensor::MoeRouting& routing,
                       tensor::TensorView expert_in) override;
  void do_moe_dispatch_backward(tensor::ConstTensorView dexpert_in,
                                const tensor::MoeRouting& routing, tensor::TensorView dx) override;
  void do_moe_combine(tensor::ConstTensorView expert_out, tensor::ConstTensorView probs,
                      const tensor::MoeRouting& routing, tensor::TensorView y) override;
  void do_moe_combine_backward(tensor::ConstTensorView dy, tensor::ConstTensorView expert_out,
                               tensor::ConstTensorView probs, const tensor::MoeRouting& routing,
                               tensor::TensorView dexpert_out, tensor::TensorView dprobs) override;
  void do_adamw_step(tensor::TensorView params, tensor::ConstTensorView grads, tensor::TensorView m,
                     tensor::TensorView v, const tensor::AdamWConfig& config,
                     std::int64_t step) override;
  double do_grad_sum_squares(tensor::ConstTensorView g) override;
  void do_adamw_step_segments(tensor::TensorView params, tensor::ConstTensorView grads,
                              tensor::TensorView m, tensor::TensorView v,
                              std::span<const tensor::AdamWSegment> segments,
                              const tensor::AdamWConfig& config, std::int64_t step,
                              float grad_scale) override;
  double do_grad_sum_squares_segments(tensor::ConstTensorView g,
                                      std::span<const tensor::FlatSegment> segments) override;

 private:
  // One GEMM in cuBLASLt's column-major terms: C (m, n) = alpha op(A) op(B) + beta C, with A and
  // B of `ab_type` (CUDA_R_32F or CUDA_R_16BF) and C fp32 (cuda_gemm.cpp).
  struct Gemm {
    bool trans_a = false, trans_b = false;
    std::int64_t m = 0, n = 0, k = 0;
    const void* a = nullptr;
    std::int64_t lda = 0;
    const void* b = nullptr;
    std::int64_t ldb = 0;
    float* c = nullptr;
    std::int64_t ldc = 0;
    float beta = 0.0f;
    cudaDataType_t ab_type = CUDA_R_32F;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // or _FAST_16BF (Bf16Operands::in_gemm)
    bool realigned = false;  // operands already copied to 256-byte-aligned scratch
    // Added to every column of C (length m, fp32), in cuBLASLt's epilogue where it has an
    // algorithm for it, else by a kernel after the product; needs ldc == m.
    const float* bias = nullptr;
    // GELU in the epilogue (both need ldc == m, and a beta of 0 for the gradient): with
    // gelu_pre_out, C = gelu(product + bias) and gelu_pre_out = product + bias (ld ldc); with
    // gelu_pre_in, C = gelu'(gelu_pre_in) * product. Where cuBLASLt will not fuse them, kernels
    // after the product do the same.
    float* gelu_pre_out = nullptr;
    const float* gelu_pre_in = nullptr;
    // The epilogue's aux matrix: gelu_pre_out, else gelu_pre_in (null without a GELU).
    const void* gelu_aux() const;
    // The cuBLASLt epilogue for the bias and GELU asked for (CUBLASLT_EPILOGUE_DEFAULT: neither).
    cublasLtEpilogue_t epilogue() const;
  };
  void matmul(const Gemm& g);
  // matmul with k == 0, an empty sum: C = beta C, plus the bias and GELU by kernels.
  void matmul_empty_sum(const Gemm& g);
  // cuBLASLt's algorithm for g with `epilogue` on matmul's descriptor and layouts, from the
  // heuristic the first time g's signature (GemmKey) is seen and from algos_ after; no value
  // where cuBLASLt has none.
  const std::optional<cublasLtMatmulAlgo_t>& gemm_algorithm(
      const Gemm& g, cublasLtEpilogue_t epilogue, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
      cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c);
  // The product alone, then kernels for the bias and GELU: where cuBLASLt will not fuse them.
  void matmul_unfused(const Gemm& g);
  // A row-major (rows, cols) operand as the GEMM reads it: the fp32 data itself (ld = cols), or
  // (bf16) a converted copy in bf16 scratch slot `slot` (0 or 1) whose rows are padded to 16
  // bytes (aligned_leading_dimension): with GPT-2's 50257-wide logits unpadded, the LM head's
  // weight gradient ran on cuBLASLt's pre-Hopper kernels (seen on an H200), padded on Hopper's.
  struct Operand {
    const void* data = nullptr;
    std::int64_t ld = 0;
  };
  // The Gemm of linear_forward (y = x w^T + b), of linear_backward_input (dx (+)= dy w) and of
  // linear_backward_weight's product (dw += dy^T x), from dy as gemm_operand gave it (slot 1).
  Gemm linear_forward_gemm(tensor::ConstTensorView x, tensor::ConstTensorView w,
                           tensor::ConstTensorView b, tensor::TensorView y);
  Gemm linear_backward_input_gemm(const Operand& dy, std::int64_t N, tensor::ConstTensorView w,
                                  tensor::TensorView dx, tensor::GradientWrite write);
  Gemm linear_backward_weight_gemm(const Operand& dy, std::int64_t N, tensor::ConstTensorView x,
                                   tensor::TensorView dw);
  // dpre = gelu'(pre) (dy w), written over: linear_gelu_backward_input from dy as converted.
  void gelu_gradient_gemm(const Operand& dy, std::int64_t N, tensor::ConstTensorView w,
                          tensor::ConstTensorView pre, tensor::TensorView dpre);
  // db += column sums of dy (N, OUT).
  void bias_gradient(tensor::ConstTensorView dy, tensor::TensorView db);
  // When cuBLASLt offers no algorithm for the operands' alignment (views can start anywhere in a
  // flat buffer), the GEMM runs on 256-byte-aligned copies of A, B and C, and C is copied back.
  void matmul_realigned(const Gemm& g);
  Operand gemm_operand(const float* data, std::int64_t rows, std::int64_t cols, int slot);
  cudaDataType_t gemm_type() const;
  cublasComputeType_t gemm_compute() const;
  bool bf16_copies() const {
    return options_.precision == Precision::bf16 && options_.bf16_operands == Bf16Operands::copies;
  }

  void activate();  // makes the backend's device current on the calling thread
  // Device scratch for one op's temporaries (sub-allocate with launch_shapes' scratch_bytes).
  void* scratch(std::size_t bytes) { return scratch_.reserve(bytes, stream_); }
  // Copies host bytes to device scratch for ids (stream-ordered, through pinned staging).
  void* upload(const void* host, std::size_t bytes);
  const std::int32_t* upload_ids(std::span<const std::int32_t> ids);
  // Copies device bytes to the host and waits for them.
  void download(void* host, const void* device, std::size_t bytes);
  void* staging(std::size_t bytes);  // pinned host staging, free for reuse when it returns

  // What each stream has to itself: the current stream's are the members below, the other's sit
  // here (use_second_stream swaps them).
  struct Lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t staging_done = nullptr;
    DeviceBuffer workspace, scratch, ids, bf16[2], realign;
    void* pinned = nullptr;
    std::size_t pinned_bytes = 0;
  };
  void swap_lanes() noexcept;

  Options options_;
  Lane idle_;
  bool on_second_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t staging_done_ = nullptr;  // recorded after each copy from staging
  cublasLtHandle_t lt_ = nullptr;
  DeviceBuffer workspace_;  // cuBLASLt workspace
  std::size_t workspace_bytes_ = 0;
  DeviceBuffer scratch_;  // per-op temporaries
  DeviceBuffer ids_;      // uploaded ids and routing tables
  DeviceBuffer bf16_[2];  // converted GEMM operands
  DeviceBuffer realign_;  // aligned copies of GEMM operands (matmul_realigned)
  void* pinned_ = nullptr;
  std::size_t pinned_bytes_ = 0;
  std::vector<std::int32_t> packed_;  // host side of packed uploads (embedding buckets, routing)
  std::vector<std::int32_t> counts_;  // embedding backward: positions per table row
  std::vector<float> host_floats_;    // router probabilities copied back
  // cuBLASLt heuristic choices by GEMM signature (trans, dims, leading dims, type, alignments).
  // The last int: the bias's alignment (0 without one). No value: cuBLASLt has no algorithm.
  using GemmKey =
      std::tuple<bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                 std::int64_t, int, int, int, int, int, bool, int, int, int>;
  std::map<GemmKey, std::optional<cublasLtMatmulAlgo_t>> algos_;
};

}  // namespace pipetune::cuda
