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
  build_segments();
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

// The owned stretch of each entry, relative to lo; adjacent stretches merge when they are
// counted alike (the norm: every counted entry; AdamW: the same weight decay), so a model's
// entries become a few segments and the backend a few launches.
void DataParallelOptimizer::build_segments() {
  std::vector<const model::ParamEntry*> entries;
  for (const model::ParamEntry& e : params_->entries()) entries.push_back(&e);
  std::sort(entries.begin(), entries.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (const model::ParamEntry* e : entries) {
    const std::int64_t a = std::max<std::int64_t>(lo_, static_cast<std::int64_t>(e->offset));
    const std::int64_t b =
        std::min<std::int64_t>(hi_, static_cast<std::int64_t>(e->offset) + e->numel());
    if (a >= b) continue;
    const std::int64_t begin = a - lo_, end = b - lo_;
    if (!adamw_segments_.empty() && adamw_segments_.back().end == begin &&
        adamw_segments_.back().decay == e->decay)
      adamw_segments_.back().end = end;
    else
      adamw_segments_.push_back({begin, end, e->decay});
    if (e->tp_replicated && tp_rank_ != 0) continue;  // TP rank 0 counts the replicas
    if (!norm_segments_.empty() && norm_segments_.back().end == begin)
      norm_segments_.back().end = end;
    else
      norm_segments_.push_back({begin, end});
  }
}

double DataParallelOptimizer::owned_sum_squares() const {
  // Without ZeRO every replica holds all reduced gradients: group rank 0 counts them.
  if (!zero1_ && group_.index_of(comm_->rank()) != 0) return 0.0;
  if (hi_ <= lo_) return 0.0;
  const tensor::FlatStorage& g = params_->flat_grads();
  return backend_->grad_sum_squares_segments({g.data() + lo_, Shape{hi_ - lo_}}, norm_segments_);
}

void DataParallelOptimizer::step(const tensor::AdamWConfig& config, std::int64_t step,
                                 float clip_coef) {
  tensor::FlatStorage& p = params_->flat_params();
  tensor::FlatStorage& g = params_->flat_grads();
  if (hi_ > lo_) {
    const Shape shape{hi_ - lo_};
    // The clipping coefficient scales each gradient as AdamW reads it (no pass over them).
    backend_->adamw_step_segments({p.data() + lo_, shape}, {g.data() + lo_, shape},
                                  {m_.data(), shape}, {v_.data(), shape}, adamw_segments_, config,
                                  step, std::min(clip_coef, 1.0f));
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
