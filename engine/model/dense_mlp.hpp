// The GELU MLP of a block with Megatron tensor parallelism: fc is column-parallel (each TP rank
// holds F/tp rows), proj is row-parallel (F/tp columns), its partial outputs summed over TP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/buffer_cache.hpp"
#include "engine/model/model_config.hpp"
#include "engine/model/parallel_context.hpp"
#include "engine/model/parameters.hpp"

namespace pipetune::model {

struct DenseMlpActivations {
  Buffer fc;    // (N, F/tp) pre-activation
  Buffer gelu;  // (N, F/tp)
  Buffer dout;  // (N, C)      output gradient, kept for W
  Buffer dfc;   // (N, F/tp)   kept for W
  template <class Fn>
  void for_each_buffer(Fn&& fn) {
    for (Buffer* b : {&fc, &gelu, &dout, &dfc}) fn(*b);
  }
  std::size_t bytes() const;
  void clear();
};

class DenseMlp {
 public:
  // Registers "<prefix>fc.w" ... in `params`. tp divides ffn (checked by the caller).
  DenseMlp(const ModelConfig& config, const std::string& prefix, int tp_size, int tp_rank,
           ParameterSet& params);

  // x (N, C) -> out (N, C), complete (summed over TP), or with `reduce` false this rank's part of
  // the sum (the caller reduce-scatters it under sequence parallelism).
  void forward(const ParallelContext& ctx, tensor::ConstTensorView x, tensor::TensorView out,
               DenseMlpActivations& a, bool reduce = true);
  // dx (N, C) = input gradient (complete, summed over TP; with `reduce` false this rank's part),
  // written over (dx's old values are not read). Frees what W does not need.
  void backward_input(const ParallelContext& ctx, tensor::ConstTensorView dout,
                      tensor::TensorView dx, DenseMlpActivations& a, bool reduce = true);
  void backward_weight(const ParallelContext& ctx, tensor::ConstTensorView x,
                       DenseMlpActivations& a);
  // backward_input and backward_weight at once (a backward not split into B and W): the same
  // gradients, each weight's from its output gradient as soon as that exists, so dout needs no
  // copy kept for W, and each layer's two GEMMs share one bf16 copy of it on CUDA.
  void backward(const ParallelContext& ctx, tensor::ConstTensorView x, tensor::ConstTensorView dout,
                tensor::TensorView dx, DenseMlpActivations& a, bool reduce = true);

 private:
  ParameterSet* params_;
  std::int64_t hidden_, ffn_local_;
  int tp_rank_;
  int fc_w_, fc_b_, proj_w_, proj_b_;
};

}  // namespace pipetune::model
