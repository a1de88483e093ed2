#include "engine/runtime/optimizer.hpp"

#include <algorithm>

namespace pipetune::runtime {

using tensor::Shape;

DataParallelOptimizer::DataParallelOptimizer(model::ParameterSet& params, comm::Communicator& comm,
                                             comm::ProcessGroup group, int tp_rank, bool zero1,
                                             tensor::Backend& backend)
    : params_(&params),
      comm_(&comm),
      group_(std::move(group)),
      tp_rank_(tp_rank),
      zero1_(zero1 && group_.size() > 1),
      backend_(&backend) {
  const std::int64_t total = params.padded_size();
  if (zero1_) {
    const std::int64_t shard = total / group_.size();  // padded to a multiple of the group
    const std::int64_t me = group_.index_of(comm.rank());
    lo_ = me * shard;
    hi_ = lo_ + shard;
  } else {
    lo_ = 0;
    hi_ = total;
  }
  tensor::DeviceAllocator* storage = &params.flat_params().allocator();
  m_ = tensor::FlatStorage(static_cast<std::size_t>(hi_ - lo_),
                           profiler::MemoryCategory::OptimizerState, storage);
  v_ = tensor::FlatStorage(static_cast<std::size_t>(hi_ - lo_),
                           profiler::MemoryCategory::OptimizerState, storage);
}

void DataParallelOptimizer::reduce_gradients() {
  if (group_.size() <= 1 || params_->padded_size() == 0) return;
  tensor::FlatStorage& g = params_->flat_grads();
  if (!zero1_) {
    comm_->all_reduce(group_, {g.data(), g.size()});
    return;
  }
  tensor::FlatStorage mine(static_cast<std::size_t>(hi_ - lo_),
                           profiler::MemoryCategory::Temporaries, &g.allocator());
  comm_->reduce_scatter(group_, {g.data(), g.size()}, {mine.data(), mine.size()});
  g.allocator().copy(g.data() + lo_, mine.data(), mine.size() * sizeof(float));
}

double DataParallelOptimizer::owned_sum_squares() const {
  // Without ZeRO every replica holds all reduced gradients: group rank 0 counts them.
  if (!zero1_ && group_.index_of(comm_->rank()) != 0) return 0.0;
  double sum = 0.0;
  const tensor::FlatStorage& g = params_->flat_grads();
  for (const model::ParamEntry& e : params_->entries()) {
    if (e.tp_replicated && tp_rank_ != 0) continue;
    const std::int64_t a = std::max<std::int64_t>(lo_, static_cast<std::int64_t>(e.offset));
    const std::int64_t b =
        std::min<std::int64_t>(hi_, static_cast<std::int64_t>(e.offset) + e.numel());
    if (a >= b) continue;
    sum += backend_->grad_sum_squares({g.data() + a, Shape{b - a}});
  }
  return sum;
}

void DataParallelOptimizer::step(const tensor::AdamWConfig& config, std::int64_t step,
                                 float clip_coef) {
  tensor::FlatStorage& p = params_->flat_params();
  tensor::FlatStorage& g = params_->flat_grads();
  tensor::AdamWConfig no_decay = config;
  no_decay.weight_decay = 0.0f;
  for (const model::ParamEntry& e : params_->entries()) {
    const std::int64_t a = std::max<std::int64_t>(lo_, static_cast<std::int64_t>(e.offset));
    const std::int64_t b =
        std::min<std::int64_t>(hi_, static_cast<std::int64_t>(e.offset) + e.numel());
    if (a >= b) continue;
    const Shape shape{b - a};
    tensor::TensorView grad{g.data() + a, shape};
    if (clip_coef < 1.0f) backend_->scale(grad, clip_coef);
    backend_->adamw_step({p.data() + a, shape}, grad, {m_.data() + (a - lo_), shape},
                         {v_.data() + (a - lo_), shape}, e.decay ? config : no_decay, step);
  }
  if (zero1_ && hi_ > lo_) {
    tensor::FlatStorage mine(static_cast<std::size_t>(hi_ - lo_),
                             profiler::MemoryCategory::Temporaries, &p.allocator());
    p.allocator().copy(mine.data(), p.data() + lo_, mine.size() * sizeof(float));
    comm_->all_gather(group_, {mine.data(), mine.size()}, {p.data(), p.size()});
  }
}

void DataParallelOptimizer::zero_grad() {
  params_->flat_grads().zero();
}

}  // namespace pipetune::runtime
