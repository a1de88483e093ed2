// CudaBackend's MoE ops. The routing is host data (MoeRouting): the router's softmax runs on the
// device, the probabilities are copied back, and route_top_k (engine/tensor/moe_routing.hpp) -
// the CPU backend's own top-k-with-capacity routing - fills the routing on the host. Dispatch,
// combine and their backwards upload the routing's slot tables (expert and slot per (token,
// choice), token per (expert, slot)) on each call: they are small, and a routing may be used for
// several layers and micro-batches, so nothing is cached on the device between calls.
#include <cstring>
#include <vector>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/launch_shapes.hpp"

namespace pipetune::cuda {

using tensor::ConstTensorView;
using tensor::MoeRouting;
using tensor::TensorView;

namespace {

// packed = [expert (N*K)] [slot (N*K)]
void pack_choices(const MoeRouting& r, std::vector<std::int32_t>& packed) {
  packed.clear();
  packed.insert(packed.end(), r.expert.begin(), r.expert.end());
  packed.insert(packed.end(), r.slot.begin(), r.slot.end());
}

}  // namespace

void CudaBackend::do_moe_router_forward(ConstTensorView logits, std::int64_t top_k,
                                        std::int64_t capacity, TensorView probs,
                                        MoeRouting& routing) {
  activate();
  const std::int64_t N = logits.shape[0], E = logits.shape[1];
  kernels::softmax_rows(stream_, logits.data, probs.data, N, E);
  host_floats_.resize(static_cast<std::size_t>(N * E));
  download(host_floats_.data(), probs.data, host_floats_.size() * sizeof(float));
  tensor::route_top_k(host_floats_.data(), N, E, top_k, capacity, routing);
}

void CudaBackend::do_moe_router_backward(ConstTensorView probs, ConstTensorView dprobs,
                                         TensorView dlogits) {
  activate();
  kernels::softmax_backward_rows(stream_, probs.data, dprobs.data, dlogits.data, probs.shape[0],
                                 probs.shape[1]);
}

// E * sum_e f_e P_e, with P_e = mean_n probs[n, e] summed on the device in double, rows in order
// (as the CPU backend), and f_e from the host routing.
float CudaBackend::do_moe_aux_loss(ConstTensorView probs, const MoeRouting& r) {
  activate();
  const std::int64_t N = r.tokens, E = r.experts;
  if (N == 0) return 0.0f;
  auto* column = static_cast<double*>(scratch(static_cast<std::size_t>(E) * sizeof(double)));
  kernels::column_sums_double(stream_, probs.data, N, E, column);
  std::vector<double> P(static_cast<std::size_t>(E));
  download(P.data(), column, P.size() * sizeof(double));
  double loss = 0.0;
  for (std::int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(r.assigned[static_cast<std::size_t>(e)]) /
                     static_cast<double>(N * r.top_k);
    loss += f * P[static_cast<std::size_t>(e)] / static_cast<double>(N);
  }
  return static_cast<float>(static_cast<double>(E) * loss);
}

void CudaBackend::do_moe_aux_loss_backward(const MoeRouting& r, float grad_scale,
                                           TensorView dprobs) {
  activate();
  const std::int64_t N = r.tokens, E = r.experts;
  if (N == 0) return;
  std::vector<float> g(static_cast<std::size_t>(E));
  for (std::int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(r.assigned[static_cast<std::size_t>(e)]) /
                     static_cast<double>(N * r.top_k);
    g[static_cast<std::size_t>(e)] =
        static_cast<float>(grad_scale * static_cast<double>(E) * f / static_cast<double>(N));
  }
  const auto* dev = static_cast<const float*>(upload(g.data(), g.size() * sizeof(float)));
  kernels::add_row_vector(stream_, dprobs.data, dev, N, E);
}

void CudaBackend::do_moe_dispatch(ConstTensorView x, const MoeRouting& r, TensorView expert_in) {
  activate();
  const std::int32_t* slot_token = upload_ids(r.slot_token);
  kernels::moe_dispatch(stream_, x.data, slot_token, expert_in.data, r.experts * r.capacity,
                        x.shape[1]);
}

void CudaBackend::do_moe_dispatch_backward(ConstTensorView dexpert_in, const MoeRouting& r,
                                           TensorView dx) {
  activate();
  pack_choices(r, packed_);
  const std::int32_t* dev = upload_ids(packed_);
  const std::int64_t NK = r.tokens * r.top_k;
  kernels::moe_dispatch_backward(stream_, dexpert_in.data, dev, dev + NK, r.capacity, dx.data,
                                 r.tokens, r.top_k, dx.shape[1]);
}

void CudaBackend::do_moe_combine(ConstTensorView expert_out, ConstTensorView probs,
                                 const MoeRouting& r, TensorView y) {
  activate();
  pack_choices(r, packed_);
  const std::int32_t* dev = upload_ids(packed_);
  const std::int64_t NK = r.tokens * r.top_k;
  kernels::moe_combine(stream_, expert_out.data, probs.data, dev, dev + NK, r.capacity, y.data,
                       r.tokens, r.experts, r.top_k, y.shape[1]);
}

void CudaBackend::do_moe_combine_backward(ConstTensorView dy, ConstTensorView expert_out,
                                          ConstTensorView probs, const MoeRouting& r,
                                          TensorView dexpert_out, TensorView dprobs) {
  activate();
  pack_choices(r, packed_);
  const std::int32_t* dev = upload_ids(packed_);
  const std::int64_t NK = r.tokens * r.top_k;
  kernels::moe_combine_backward(stream_, dy.data, expert_out.data, probs.data, dev, dev + NK,
                                r.capacity, dexpert_out.data, dprobs.data, r.tokens, r.experts,
                                r.top_k, dy.shape[1]);
}

}  // namespace pipetune::cuda
