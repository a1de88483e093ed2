// StagedCudaBackend: the CUDA backend behind the Backend interface on HOST tensors, so that the
// op tests (tests/engine/tensor/*_op_test.cpp) run it beside the CPU backend, on the same inputs
// and with the same checks (backend_test_support.hpp lists it in CUDA builds).
//
// CudaBackend computes in device memory. Each op here copies the host views it is given into
// fresh device buffers, runs the CUDA backend's own public op on the copies, waits for it and
// copies every output view back. Views whose host memory overlaps share one device buffer, so
// ops called in place (gelu_backward_input with dx == dy, vocab_ce_backward over the logits,
// layernorm_backward_input with residual == dx) stay in place on the device. Token ids,
// targets, segments and MoeRouting are host data for every backend (backend.hpp) and pass
// through as they are. A cudaMalloc and two copies per op: a test harness, not a way to train.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/tensor/backend.hpp"

namespace pipetune::cuda::testing {

// One op's device copies of its host views: stage() uploads them, copy_outputs_back() returns
// the TensorViews' device values to the host; the buffers are freed with the object.
class DeviceStaging {
 public:
  explicit DeviceStaging(const CudaBackend& cuda) : stream_(cuda.stream()) {
    PIPETUNE_CUDA_CHECK(cudaSetDevice(cuda.options().device));
  }
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;
  ~DeviceStaging() {
    cudaStreamSynchronize(stream_);  // an op that threw may have left kernels reading the buffers
    for (const Region& r : regions_) cudaFree(r.device);
  }

  // Device views of `views`, in order and of the same kinds (an empty view stays empty: absent).
  template <typename... Views>
  std::tuple<Views...> stage(Views... views) {
    (note(views), ...);
    upload();
    return {on_device(views)...};
  }

  // Copies every staged TensorView back into its host memory and waits for the copies.
  void copy_outputs_back() {
    for (const HostRange& out : ranges_) {
      if (!out.output || out.bytes == 0) continue;
      PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(out.address),
                                          device_address(out.address, out.bytes), out.bytes,
                                          cudaMemcpyDeviceToHost, stream_));
    }
    PIPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  // Host memory as addresses (ranges of unrelated arrays are compared and merged).
  struct HostRange {
    std::uintptr_t address = 0;
    std::size_t bytes = 0;
    bool output = false;
  };
  // Overlapping or touching host ranges merged: one device buffer each.
  struct Region {
    std::uintptr_t address = 0;
    std::size_t bytes = 0;
    void* device = nullptr;
  };

  static std::size_t bytes_of(tensor::ConstTensorView v) {
    return static_cast<std::size_t>(v.numel()) * sizeof(float);
  }
  void note(tensor::ConstTensorView v, bool output = false) {
    if (v.empty()) return;
    ranges_.push_back({reinterpret_cast<std::uintptr_t>(v.data), bytes_of(v), output});
  }
  void note(tensor::TensorView v) { note(tensor::ConstTensorView(v), true); }

  void upload() {
    std::vector<HostRange> sorted = ranges_;
    std::sort(sorted.begin(), sorted.end(),
              [](const HostRange& a, const HostRange& b) { return a.address < b.address; });
    for (const HostRange& r : sorted) {
      if (!regions_.empty() && r.address <= regions_.back().address + regions_.back().bytes) {
        Region& last = regions_.back();
        last.bytes = std::max(last.bytes, r.address - last.address + r.bytes);
      } else {
        regions_.push_back({r.address, r.bytes, nullptr});
      }
    }
    for (Region& r : regions_) {
      // At least one float: a view of no elements still has an address (it is not "absent").
      PIPETUNE_CUDA_CHECK(cudaMalloc(&r.device, std::max(r.bytes, sizeof(float))));
      if (r.bytes > 0) {
        PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(r.device, reinterpret_cast<const void*>(r.address),
                                            r.bytes, cudaMemcpyHostToDevice, stream_));
      }
    }
  }

  char* device_address(std::uintptr_t address, std::size_t bytes) const {
    for (const Region& r : regions_) {
      if (address >= r.address && address + bytes <= r.address + r.bytes) {
        return static_cast<char*>(r.device) + (address - r.address);
      }
    }
    throw CudaError("DeviceStaging: a view that was not staged");
  }
  tensor::ConstTensorView on_device(tensor::ConstTensorView v) const {
    if (v.empty()) return v;
    const auto address = reinterpret_cast<std::uintptr_t>(v.data);
    return {reinterpret_cast<float*>(device_address(address, bytes_of(v))), v.shape};
  }
  tensor::TensorView on_device(tensor::TensorView v) const {
    if (v.empty()) return v;
    const auto address = reinterpret_cast<std::uintptr_t>(v.data);
    return {reinterpret_cast<float*>(device_address(address, bytes_of(v))), v.shape};
  }

  cudaStream_t stream_ = nullptr;
  std::vector<HostRange> ranges_;
  std::vector<Region> regions_;
};

class StagedCudaBackend final : public tensor::Backend {
 public:
  explicit StagedCudaBackend(CudaBackend::Options options = {}) : cuda_(options) {}
  std::string_view name() const override { return cuda_.name(); }

 protected:
  using ConstTensorView = tensor::ConstTensorView;
  using TensorView = tensor::TensorView;
  using GradientWrite = tensor::GradientWrite;
  using Ids = std::span<const std::int32_t>;

  void do_zero(TensorView t) override {
    DeviceStaging staging(cuda_);
    const auto [t_dev] = staging.stage(t);
    cuda_.zero(t_dev);
    staging.copy_outputs_back();
  }
  void do_scale(TensorView t, float s) override {
    DeviceStaging staging(cuda_);
    const auto [t_dev] = staging.stage(t);
    cuda_.scale(t_dev, s);
    staging.copy_outputs_back();
  }
  void do_add(ConstTensorView a, ConstTensorView b, TensorView out) override {
    DeviceStaging staging(cuda_);
    const auto [a_dev, b_dev, out_dev] = staging.stage(a, b, out);
    cuda_.add(a_dev, b_dev, out_dev);
    staging.copy_outputs_back();
  }
  void do_accumulate(TensorView dst, ConstTensorView src) override {
    DeviceStaging staging(cuda_);
    const auto [dst_dev, src_dev] = staging.stage(dst, src);
    cuda_.accumulate(dst_dev, src_dev);
    staging.copy_outputs_back();
  }
  void do_fill_columns(TensorView t, std::int64_t col_lo, float value) override {
    DeviceStaging staging(cuda_);
    const auto [t_dev] = staging.stage(t);
    cuda_.fill_columns(t_dev, col_lo, value);
    staging.copy_outputs_back();
  }

  void do_linear_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                         TensorView y) override {
    DeviceStaging staging(cuda_);
    const auto [x_dev, w_dev, b_dev, y_dev] = staging.stage(x, w, b, y);
    cuda_.linear_forward(x_dev, w_dev, b_dev, y_dev);
    staging.copy_outputs_back();
  }
  void do_linear_backward_input(ConstTensorView dy, ConstTensorView w, TensorView dx,
                                GradientWrite write) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, w_dev, dx_dev] = staging.stage(dy, w, dx);
    cuda_.linear_backward_input(dy_dev, w_dev, dx_dev, write);
    staging.copy_outputs_back();
  }
  void do_linear_backward_weight(ConstTensorView dy, ConstTensorView x, TensorView dw,
                                 TensorView db) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, x_dev, dw_dev, db_dev] = staging.stage(dy, x, dw, db);
    cuda_.linear_backward_weight(dy_dev, x_dev, dw_dev, db_dev);
    staging.copy_outputs_back();
  }
  void do_linear_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w, TensorView dx,
                          GradientWrite write, TensorView dw, TensorView db) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, x_dev, w_dev, dx_dev, dw_dev, db_dev] = staging.stage(dy, x, w, dx, dw, db);
    cuda_.linear_backward(dy_dev, x_dev, w_dev, dx_dev, write, dw_dev, db_dev);
    staging.copy_outputs_back();
  }
  void do_linear_gelu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                              TensorView pre, TensorView y) override {
    DeviceStaging staging(cuda_);
    const auto [x_dev, w_dev, b_dev, pre_dev, y_dev] = staging.stage(x, w, b, pre, y);
    cuda_.linear_gelu_forward(x_dev, w_dev, b_dev, pre_dev, y_dev);
    staging.copy_outputs_back();
  }
  void do_linear_gelu_backward_input(ConstTensorView dy, ConstTensorView w, ConstTensorView pre,
                                     TensorView dpre) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, w_dev, pre_dev, dpre_dev] = staging.stage(dy, w, pre, dpre);
    cuda_.linear_gelu_backward_input(dy_dev, w_dev, pre_dev, dpre_dev);
    staging.copy_outputs_back();
  }
  void do_linear_gelu_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                               ConstTensorView pre, TensorView dpre, TensorView dw,
                               TensorView db) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, x_dev, w_dev, pre_dev, dpre_dev, dw_dev, db_dev] =
        staging.stage(dy, x, w, pre, dpre, dw, db);
    cuda_.linear_gelu_backward(dy_dev, x_dev, w_dev, pre_dev, dpre_dev, dw_dev, db_dev);
    staging.copy_outputs_back();
  }

  // The public ops pass the vocabulary size only to their checks, not to do_*: any size that
  // covers the shard and the ids (already checked against the caller's) gives the same op.
  static std::int64_t covering_vocab_size(Ids tokens, std::int64_t vocab_lo, std::int64_t rows) {
    std::int64_t size = vocab_lo + rows;
    for (const std::int32_t t : tokens) size = std::max<std::int64_t>(size, std::int64_t{t} + 1);
    return size;
  }
  void do_embedding_forward(Ids tokens, ConstTensorView wte, std::int64_t vocab_lo,
                            ConstTensorView wpe, TensorView out) override {
    DeviceStaging staging(cuda_);
    const auto [wte_dev, wpe_dev, out_dev] = staging.stage(wte, wpe, out);
    cuda_.embedding_shard_forward(tokens, wte_dev, vocab_lo,
                                  covering_vocab_size(tokens, vocab_lo, wte.shape[0]), wpe_dev,
                                  out_dev);
    staging.copy_outputs_back();
  }
  void do_embedding_backward_weight(Ids tokens, ConstTensorView dout, std::int64_t vocab_lo,
                                    TensorView dwte, TensorView dwpe) override {
    DeviceStaging staging(cuda_);
    const auto [dout_dev, dwte_dev, dwpe_dev] = staging.stage(dout, dwte, dwpe);
    cuda_.embedding_shard_backward_weight(tokens, dout_dev, vocab_lo,
                                          covering_vocab_size(tokens, vocab_lo, dwte.shape[0]),
                                          dwte_dev, dwpe_dev);
    staging.copy_outputs_back();
  }

  void do_layernorm_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b, TensorView y,
                            TensorView mean, TensorView rstd) override {
    DeviceStaging staging(cuda_);
    const auto [x_dev, w_dev, b_dev, y_dev, mean_dev, rstd_dev] =
        staging.stage(x, w, b, y, mean, rstd);
    cuda_.layernorm_forward(x_dev, w_dev, b_dev, y_dev, mean_dev, rstd_dev);
    staging.copy_outputs_back();
  }
  void do_layernorm_backward_input(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                   ConstTensorView mean, ConstTensorView rstd,
                                   ConstTensorView residual, TensorView dx) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, x_dev, w_dev, mean_dev, rstd_dev, residual_dev, dx_dev] =
        staging.stage(dy, x, w, mean, rstd, residual, dx);
    cuda_.layernorm_backward_input(dy_dev, x_dev, w_dev, mean_dev, rstd_dev, dx_dev, residual_dev);
    staging.copy_outputs_back();
  }
  void do_layernorm_backward_weight(ConstTensorView dy, ConstTensorView x, ConstTensorView mean,
                                    ConstTensorView rstd, TensorView dw, TensorView db) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, x_dev, mean_dev, rstd_dev, dw_dev, db_dev] =
        staging.stage(dy, x, mean, rstd, dw, db);
    cuda_.layernorm_backward_weight(dy_dev, x_dev, mean_dev, rstd_dev, dw_dev, db_dev);
    staging.copy_outputs_back();
  }

  void do_gelu_forward(ConstTensorView x, TensorView y) override {
    DeviceStaging staging(cuda_);
    const auto [x_dev, y_dev] = staging.stage(x, y);
    cuda_.gelu_forward(x_dev, y_dev);
    staging.copy_outputs_back();
  }
  void do_gelu_backward_input(ConstTensorView dy, ConstTensorView x, TensorView dx,
                              GradientWrite write) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, x_dev, dx_dev] = staging.stage(dy, x, dx);
    cuda_.gelu_backward_input(dy_dev, x_dev, dx_dev, write);
    staging.copy_outputs_back();
  }

  void do_attention_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                            TensorView att) override {
    DeviceStaging staging(cuda_);
    const auto [qkv_dev, out_dev, att_dev] = staging.stage(qkv, out, att);
    cuda_.attention_forward(qkv_dev, num_heads, out_dev, att_dev);
    staging.copy_outputs_back();
  }
  void do_attention_backward_input(ConstTensorView dout, ConstTensorView qkv, ConstTensorView att,
                                   std::int64_t num_heads, TensorView dqkv) override {
    DeviceStaging staging(cuda_);
    const auto [dout_dev, qkv_dev, att_dev, dqkv_dev] = staging.stage(dout, qkv, att, dqkv);
    cuda_.attention_backward_input(dout_dev, qkv_dev, att_dev, num_heads, dqkv_dev);
    staging.copy_outputs_back();
  }
  void do_attention_flash_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                                  TensorView lse) override {
    DeviceStaging staging(cuda_);
    const auto [qkv_dev, out_dev, lse_dev] = staging.stage(qkv, out, lse);
    cuda_.attention_flash_forward(qkv_dev, num_heads, out_dev, lse_dev);
    staging.copy_outputs_back();
  }
  void do_attention_flash_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                         ConstTensorView out, ConstTensorView lse,
                                         std::int64_t num_heads, TensorView dqkv,
                                         GradientWrite write) override {
    DeviceStaging staging(cuda_);
    const auto [dout_dev, qkv_dev, out_dev, lse_dev, dqkv_dev] =
        staging.stage(dout, qkv, out, lse, dqkv);
    cuda_.attention_flash_backward_input(dout_dev, qkv_dev, out_dev, lse_dev, num_heads, dqkv_dev,
                                         write);
    staging.copy_outputs_back();
  }
  void do_attention_flash_forward_rows(ConstTensorView qkv, std::int64_t q_begin,
                                       std::int64_t num_heads, TensorView out,
                                       TensorView lse) override {
    DeviceStaging staging(cuda_);
    const auto [qkv_dev, out_dev, lse_dev] = staging.stage(qkv, out, lse);
    cuda_.attention_flash_forward_rows(qkv_dev, q_begin, num_heads, out_dev, lse_dev);
    staging.copy_outputs_back();
  }
  void do_attention_flash_backward_input_rows(ConstTensorView dout, ConstTensorView qkv,
                                              ConstTensorView out, ConstTensorView lse,
                                              std::int64_t q_begin, std::int64_t num_heads,
                                              TensorView dqkv) override {
    DeviceStaging staging(cuda_);
    const auto [dout_dev, qkv_dev, out_dev, lse_dev, dqkv_dev] =
        staging.stage(dout, qkv, out, lse, dqkv);
    cuda_.attention_flash_backward_input_rows(dout_dev, qkv_dev, out_dev, lse_dev, q_begin,
                                              num_heads, dqkv_dev);
    staging.copy_outputs_back();
  }

  float do_cross_entropy_forward(ConstTensorView logits, Ids targets, TensorView losses) override {
    DeviceStaging staging(cuda_);
    const auto [logits_dev, losses_dev] = staging.stage(logits, losses);
    const float mean = cuda_.cross_entropy_forward(logits_dev, targets, losses_dev);
    staging.copy_outputs_back();
    return mean;
  }
  void do_cross_entropy_backward(ConstTensorView logits, Ids targets, float grad_scale,
                                 TensorView dlogits) override {
    DeviceStaging staging(cuda_);
    const auto [logits_dev, dlogits_dev] = staging.stage(logits, dlogits);
    cuda_.cross_entropy_backward(logits_dev, targets, grad_scale, dlogits_dev);
    staging.copy_outputs_back();
  }
  void do_vocab_ce_local_stats(ConstTensorView logits_shard, Ids targets, std::int64_t vocab_lo,
                               TensorView local_max, TensorView local_sum,
                               TensorView target_logit) override {
    DeviceStaging staging(cuda_);
    const auto [logits_dev, max_dev, sum_dev, target_dev] =
        staging.stage(logits_shard, local_max, local_sum, target_logit);
    cuda_.vocab_ce_local_stats(logits_dev, targets, vocab_lo, max_dev, sum_dev, target_dev);
    staging.copy_outputs_back();
  }
  void do_vocab_ce_rescale_sum(ConstTensorView local_max, ConstTensorView global_max,
                               TensorView local_sum) override {
    DeviceStaging staging(cuda_);
    const auto [local_max_dev, global_max_dev, local_sum_dev] =
        staging.stage(local_max, global_max, local_sum);
    cuda_.vocab_ce_rescale_sum(local_max_dev, global_max_dev, local_sum_dev);
    staging.copy_outputs_back();
  }
  float do_vocab_ce_loss(ConstTensorView global_max, ConstTensorView global_sum,
                         ConstTensorView target_logit, TensorView losses) override {
    DeviceStaging staging(cuda_);
    const auto [max_dev, sum_dev, target_dev, losses_dev] =
        staging.stage(global_max, global_sum, target_logit, losses);
    const float mean = cuda_.vocab_ce_loss(max_dev, sum_dev, target_dev, losses_dev);
    staging.copy_outputs_back();
    return mean;
  }
  void do_vocab_ce_numerators(ConstTensorView logits_shard, ConstTensorView row_max,
                              TensorView numerators) override {
    DeviceStaging staging(cuda_);
    const auto [logits_dev, row_max_dev, numerators_dev] =
        staging.stage(logits_shard, row_max, numerators);
    cuda_.vocab_ce_numerators(logits_dev, row_max_dev, numerators_dev);
    staging.copy_outputs_back();
  }
  void do_vocab_ce_input_grad(ConstTensorView shard_max, ConstTensorView global_max,
                              ConstTensorView global_sum, ConstTensorView weights,
                              ConstTensorView target_rows, float grad_scale,
                              TensorView dx) override {
    DeviceStaging staging(cuda_);
    const auto [shard_max_dev, global_max_dev, global_sum_dev, weights_dev, target_rows_dev,
                dx_dev] =
        staging.stage(shard_max, global_max, global_sum, weights, target_rows, dx);
    cuda_.vocab_ce_input_grad(shard_max_dev, global_max_dev, global_sum_dev, weights_dev,
                              target_rows_dev, grad_scale, dx_dev);
    staging.copy_outputs_back();
  }
  void do_vocab_ce_backward(ConstTensorView logits_shard, Ids targets, std::int64_t vocab_lo,
                            ConstTensorView global_max, ConstTensorView global_sum,
                            float grad_scale, TensorView dlogits_shard,
                            GradientWrite write) override {
    DeviceStaging staging(cuda_);
    const auto [logits_dev, max_dev, sum_dev, dlogits_dev] =
        staging.stage(logits_shard, global_max, global_sum, dlogits_shard);
    cuda_.vocab_ce_backward(logits_dev, targets, vocab_lo, max_dev, sum_dev, grad_scale,
                            dlogits_dev, write);
    staging.copy_outputs_back();
  }

  void do_moe_router_forward(ConstTensorView logits, std::int64_t top_k, std::int64_t capacity,
                             TensorView probs, tensor::MoeRouting& routing) override {
    DeviceStaging staging(cuda_);
    const auto [logits_dev, probs_dev] = staging.stage(logits, probs);
    cuda_.moe_router_forward(logits_dev, top_k, capacity, probs_dev, routing);
    staging.copy_outputs_back();
  }
  void do_moe_router_backward(ConstTensorView probs, ConstTensorView dprobs,
                              TensorView dlogits) override {
    DeviceStaging staging(cuda_);
    const auto [probs_dev, dprobs_dev, dlogits_dev] = staging.stage(probs, dprobs, dlogits);
    cuda_.moe_router_backward(probs_dev, dprobs_dev, dlogits_dev);
    staging.copy_outputs_back();
  }
  float do_moe_aux_loss(ConstTensorView probs, const tensor::MoeRouting& routing) override {
    DeviceStaging staging(cuda_);
    const auto [probs_dev] = staging.stage(probs);
    return cuda_.moe_aux_loss(probs_dev, routing);  // returned to the host: nothing to copy back
  }
  void do_moe_aux_loss_backward(const tensor::MoeRouting& routing, float grad_scale,
                                TensorView dprobs) override {
    DeviceStaging staging(cuda_);
    const auto [dprobs_dev] = staging.stage(dprobs);
    cuda_.moe_aux_loss_backward(routing, grad_scale, dprobs_dev);
    staging.copy_outputs_back();
  }
  void do_moe_dispatch(ConstTensorView x, const tensor::MoeRouting& routing,
                       TensorView expert_in) override {
    DeviceStaging staging(cuda_);
    const auto [x_dev, expert_in_dev] = staging.stage(x, expert_in);
    cuda_.moe_dispatch(x_dev, routing, expert_in_dev);
    staging.copy_outputs_back();
  }
  void do_moe_dispatch_backward(ConstTensorView dexpert_in, const tensor::MoeRouting& routing,
                                TensorView dx) override {
    DeviceStaging staging(cuda_);
    const auto [dexpert_in_dev, dx_dev] = staging.stage(dexpert_in, dx);
    cuda_.moe_dispatch_backward(dexpert_in_dev, routing, dx_dev);
    staging.copy_outputs_back();
  }
  void do_moe_combine(ConstTensorView expert_out, ConstTensorView probs,
                      const tensor::MoeRouting& routing, TensorView y) override {
    DeviceStaging staging(cuda_);
    const auto [expert_out_dev, probs_dev, y_dev] = staging.stage(expert_out, probs, y);
    cuda_.moe_combine(expert_out_dev, probs_dev, routing, y_dev);
    staging.copy_outputs_back();
  }
  void do_moe_combine_backward(ConstTensorView dy, ConstTensorView expert_out,
                               ConstTensorView probs, const tensor::MoeRouting& routing,
                               TensorView dexpert_out, TensorView dprobs) override {
    DeviceStaging staging(cuda_);
    const auto [dy_dev, expert_out_dev, probs_dev, dexpert_out_dev, dprobs_dev] =
        staging.stage(dy, expert_out, probs, dexpert_out, dprobs);
    cuda_.moe_combine_backward(dy_dev, expert_out_dev, probs_dev, routing, dexpert_out_dev,
                               dprobs_dev);
    staging.copy_outputs_back();
  }

  void do_adamw_step(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                     const tensor::AdamWConfig& config, std::int64_t step) override {
    DeviceStaging staging(cuda_);
    const auto [params_dev, grads_dev, m_dev, v_dev] = staging.stage(params, grads, m, v);
    cuda_.adamw_step(params_dev, grads_dev, m_dev, v_dev, config, step);
    staging.copy_outputs_back();
  }
  double do_grad_sum_squares(ConstTensorView g) override {
    DeviceStaging staging(cuda_);
    const auto [g_dev] = staging.stage(g);
    return cuda_.grad_sum_squares(g_dev);
  }
  void do_adamw_step_segments(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                              std::span<const tensor::AdamWSegment> segments,
                              const tensor::AdamWConfig& config, std::int64_t step,
                              float grad_scale) override {
    DeviceStaging staging(cuda_);
    const auto [params_dev, grads_dev, m_dev, v_dev] = staging.stage(params, grads, m, v);
    cuda_.adamw_step_segments(params_dev, grads_dev, m_dev, v_dev, segments, config, step,
                              grad_scale);
    staging.copy_outputs_back();
  }
  double do_grad_sum_squares_segments(ConstTensorView g,
                                      std::span<const tensor::FlatSegment> segments) override {
    DeviceStaging staging(cuda_);
    const auto [g_dev] = staging.stage(g);
    return cuda_.grad_sum_squares_segments(g_dev, segments);
  }

 private:
  CudaBackend cuda_;
};

}  // namespace pipetune::cuda::testing
