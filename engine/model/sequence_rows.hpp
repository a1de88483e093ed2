// A micro-batch's rows under sequence parallelism (ParallelContext::sequence_parallel): each TP
// rank holds rows [tp_rank * n, (tp_rank + 1) * n) of the N = B*T rows, n = N / tp. Without it
// every rank holds all N, and these helpers are what the code did before: no copy, an
// all-reduce in place.
#pragma once

#include "engine/model/buffers.hpp"
#include "engine/model/parallel_context.hpp"

namespace pipetune::model {

// Every TP rank's `local` (n, C) as one (N, C) view, gathered into `full`; without sequence
// parallelism `local` itself (it holds every row).
inline tensor::ConstTensorView gathered_rows(const ParallelContext& ctx,
                                             tensor::ConstTensorView local, Buffer& full) {
  if (!ctx.sequence_parallel) return local;
  tensor::TensorView v =
      sized(full, tensor::Shape{local.shape.rows() * ctx.tp_size, local.shape.last()});  // (N, C)
  ctx.tp_all_gather(local, v);
  return v;
}

// `partial` (N, C), one TP rank's part of a sum, summed over TP: in place (an all-reduce; `out`
// is `partial`) without sequence parallelism, into this rank's rows `out` (n, C) with it (a
// reduce-scatter).
inline void reduce_rows(const ParallelContext& ctx, tensor::TensorView partial,
                        tensor::TensorView out) {
  if (ctx.sequence_parallel)
    ctx.tp_reduce_scatter(partial, out);
  else
    ctx.tp_all_reduce(partial);
}

// out (n, C) <- this TP rank's rows of `full` (N, C), which every TP rank holds whole.
inline void copy_own_rows(const ParallelContext& ctx, tensor::ConstTensorView full,
                          tensor::TensorView out) {
  const std::int64_t n = out.numel();
  copy_values({full.data + ctx.tp_rank * n, tensor::Shape{n}}, {out.data, tensor::Shape{n}});
}

}  // namespace pipetune::model
