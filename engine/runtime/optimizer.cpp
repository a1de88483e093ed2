#include "engine/runtime/optimizer.hpp"

#include <algorithm>

#include "engine/model/buffers.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::runtime {

using tensor::Shape;

DataParallelOptimizer::DataParallelOptimizer(model::ParameterSet& params, comm::Communicator& comm,
                                             comm::ProcessGroup group, int tp_rank, int zero_stage,
                                             tensor::Backend& backend, bool host_update)
    : params_(&params),
      comm_(&comm),
      group_(std::move(group)),
      tp_rank_(tp_rank),
      zero1_(zero_stage >= 1 && group_.size() > 1),
      sharded_gradients_(params.gradients_sharded()),
      backend_(&backend) {
  if (sharded_gradients_ && (params.sharding().size != group_.size() ||
                             params.sharding().index != group_.index_of(comm.rank())))
    throw std::logic_error("DataParallelOptimizer: the gradients are sharded over another group");
  const std::int64_t total = params.padded_size();
  if (sharded_gradients_) {
    lo_ = 0;
    hi_ = params.owned_size();
  } else if (zero1_) {
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
  if (host_update) {
    host_backend_ = std::make_unique<tensor::CpuBackend>(1);
    storage = &tensor::host_allocator();
  }
  m_ = tensor::FlatStorage(static_cast<std::size_t>(hi_ - lo_),
                           profiler::MemoryCategory::OptimizerState, storage);
  v_ = tensor::FlatStorage(static_cast<std::size_t>(hi_ - lo_),
                           profiler::MemoryCategory::OptimizerState, storage);
}

DataParallelOptimizer::~DataParallelOptimizer() = default;
DataParallelOptimizer::DataParallelOptimizer(DataParallelOptimizer&&) noexcept = default;
DataParallelOptimizer& DataParallelOptimizer::operator=(DataParallelOptimizer&&) noexcept = default;

void DataParallelOptimizer::update(float* params, const float* grads, std::int64_t count,
                                   const tensor::AdamWConfig& config, std::int64_t step,
                                   float clip_coef) {
  const Shape shape{count};
  // The clipping coefficient scales each gradient as AdamW reads it (no pass over them).
  const float clip = std::min(clip_coef, 1.0f);
  if (host_backend_ == nullptr) {
    backend_->adamw_step_segments({params, shape}, {grads, shape}, {m_.data(), shape},
                                  {v_.data(), shape}, adamw_segments_, config, step, clip);
    return;
  }
  tensor::DeviceAllocator& storage = params_->flat_params().allocator();
  tensor::HostAccess p(storage, tensor::TensorView{params, shape},
                       tensor::HostAccess::Mode::read_write);
  const tensor::HostAccess g(storage, tensor::ConstTensorView{grads, shape});
  host_backend_->adamw_step_segments({p.data(), shape}, {g.data(), shape}, {m_.data(), shape},
                                     {v_.data(), shape}, adamw_segments_, config, step, clip);
  p.commit();
}

void DataParallelOptimizer::set_sparse_unit(int unit, std::int64_t width) {
  const model::ParamUnit& u = params_->units().at(static_cast<std::size_t>(unit));
  if (width <= 0 || u.numel % width != 0)
    throw std::logic_error("set_sparse_unit: unit '" + u.name + "' is no table of rows " +
                           std::to_string(width) + " wide");
  sparse_unit_ = unit;
  sparse_width_ = width;
}

void DataParallelOptimizer::reduce_sparse_unit(std::span<const std::int32_t> touched) {
  const model::ParamUnit& u = params_->units()[static_cast<std::size_t>(sparse_unit_)];
  tensor::FlatStorage& g = params_->flat_grads();
  last_sparse_ = all_reduce_touched_rows(*comm_, group_, g.allocator(), g.data() + u.offset,
                                         u.numel / sparse_width_, sparse_width_, touched);
}

bool DataParallelOptimizer::sparse_unit_open() const {
  if (sparse_unit_ < 0 || !sharded_gradients_) return false;
  const std::vector<int>& open = params_->open_gradient_units();
  return std::find(open.begin(), open.end(), sparse_unit_) != open.end();
}

// ZeRO-1 with a sparse table at [a, b) of the flat buffer. The rest of each member's owned range
// is reduced by the buffer's reduce-scatter without the table: one uneven reduce-scatter on each
// side of it (a range meeting the table holds less of that side, one past it none), in place.
// The table's part of each range is reduced by its touched rows (EmbRace's AlltoAll).
void DataParallelOptimizer::reduce_scatter_around_sparse_unit(
    std::span<const std::int32_t> touched) {
  const model::ParamUnit& u = params_->units()[static_cast<std::size_t>(sparse_unit_)];
  tensor::FlatStorage& g = params_->flat_grads();
  const auto members = static_cast<std::size_t>(group_.size());
  const auto me = static_cast<std::size_t>(group_.index_of(comm_->rank()));
  const auto n = static_cast<std::int64_t>(g.size());
  const std::int64_t a = u.offset, b = u.offset + u.numel, shard = n / group_.size();
  std::vector<TableRange> owned(members);
  for (std::size_t j = 0; j < members; ++j) {
    const std::int64_t lo = static_cast<std::int64_t>(j) * shard;
    owned[j] = {std::clamp<std::int64_t>(lo - a, 0, u.numel),
                std::clamp<std::int64_t>(lo + shard - a, 0, u.numel)};
  }
  const auto reduce_side = [&](std::int64_t from, std::int64_t to) {  // the buffer's [from, to)
    std::vector<std::size_t> counts(members);
    for (std::size_t j = 0; j < members; ++j) {
      const std::int64_t lo = static_cast<std::int64_t>(j) * shard;
      counts[j] = static_cast<std::size_t>(
          std::max<std::int64_t>(0, std::min(lo + shard, to) - std::max(lo, from)));
    }
    comm_->reduce_scatter_v(group_, {g.data() + from, static_cast<std::size_t>(to - from)}, counts,
                            {g.data() + std::clamp(lo_, from, to), counts[me]});
  };
  if (a > 0) reduce_side(0, a);
  if (b < n) reduce_side(b, n);
  last_sparse_ = reduce_scatter_touched_rows(*comm_, group_, g.allocator(), g.data() + a,
                                             u.numel / sparse_width_, sparse_width_, touched, owned,
                                             g.data() + a + owned[me].lo, RowsWrite::set);
}

void DataParallelOptimizer::reduce_gradients(std::span<const std::int32_t> touched) {
  if (sharded_gradients_) {
    if (!params_->open_gradient_units().empty())
      throw std::logic_error(
          "reduce_gradients: unit '" +
          params_->units()[static_cast<std::size_t>(params_->open_gradient_units().front())].name +
          "' still holds a full gradient at the iteration's end");
    last_sparse_ = iteration_sparse_;
    iteration_sparse_ = {};
    unit_reduced_.clear();
    return;
  }
  if (!unit_reduced_.empty()) {  // layered reduction: the units no R op reduced
    std::vector<int> rest;
    bool sparse = false;
    for (std::size_t u = 0; u < unit_reduced_.size(); ++u) {
      if (unit_reduced_[u]) continue;
      if (static_cast<int>(u) == sparse_unit_)
        sparse = true;
      else
        rest.push_back(static_cast<int>(u));
    }
    reduce_units(rest);
    if (sparse) reduce_sparse_unit(touched);
    unit_reduced_.clear();
    return;
  }
  if (group_.size() <= 1 || params_->padded_size() == 0) return;
  tensor::FlatStorage& g = params_->flat_grads();
  if (!zero1_ && sparse_unit_ >= 0) {  // the buffer around the table, then the table's rows
    const model::ParamUnit& u = params_->units()[static_cast<std::size_t>(sparse_unit_)];
    const auto before = static_cast<std::size_t>(u.offset),
               after = static_cast<std::size_t>(u.offset + u.numel);
    if (before > 0) comm_->all_reduce(group_, {g.data(), before});
    if (after < g.size()) comm_->all_reduce(group_, {g.data() + after, g.size() - after});
    reduce_sparse_unit(touched);
    return;
  }
  if (!zero1_) {
    comm_->all_reduce(group_, {g.data(), g.size()});
    return;
  }
  if (sparse_unit_ >= 0) {
    reduce_scatter_around_sparse_unit(touched);
    return;
  }
  // In place (NCCL's form): the owned range is this member's chunk of the padded buffer.
  comm_->reduce_scatter(group_, {g.data(), g.size()},
                        {g.data() + lo_, static_cast<std::size_t>(hi_ - lo_)});
}

void DataParallelOptimizer::reduce_units(const std::vector<int>& units) {
  if (zero1_ || sharded_gradients_)
    throw std::logic_error("reduce_units: the in-place layered reduction runs without ZeRO");
  for (const UnitReduction& r : take_units(units)) comm_->all_reduce(group_, r.gradients);
}

void DataParallelOptimizer::hold_units(const std::vector<int>& units) {
  if (!sharded_gradients_)
    throw std::logic_error("hold_units: held gradient units are for ZeRO-2 and 3");
  unit_held_.resize(params_->units().size(), 0);
  for (int u : units) unit_held_.at(static_cast<std::size_t>(u)) = 1;
}

void DataParallelOptimizer::release_reduced_units() {
  for (int u : reduced_held_) params_->close_gradient_unit(u);
  reduced_held_.clear();
}

std::vector<DataParallelOptimizer::UnitReduction> DataParallelOptimizer::take_units(
    const std::vector<int>& units) {
  if (zero1_ && !sharded_gradients_)
    throw std::logic_error("reduce_units: layered gradient reduction runs without ZeRO-1");
  const std::vector<model::ParamUnit>& all = params_->units();
  unit_reduced_.resize(all.size(), 0);
  for (int u : units) {
    char& done = unit_reduced_.at(static_cast<std::size_t>(u));
    if (done)
      throw std::logic_error("reduce_units: unit '" + all[static_cast<std::size_t>(u)].name +
                             "' reduced twice in one iteration");
    done = 1;
  }
  std::vector<UnitReduction> runs;
  if (sharded_gradients_) {
    // A held unit no op of the iteration opened (a chunk no micro-batch visits) has nothing to
    // add to its shard, which zero_grad left at zero.
    tensor::FlatStorage& owned = params_->owned_grads();
    for (int u : units) {
      if (static_cast<std::size_t>(u) >= unit_held_.size() ||
          !unit_held_[static_cast<std::size_t>(u)])
        throw std::logic_error("take_units: unit '" + all[static_cast<std::size_t>(u)].name +
                               "' is not held for its R op");
      if (!params_->gradient_unit_open(u)) continue;
      tensor::FlatStorage& full = params_->unit_gradient(u);
      runs.push_back({{full.data(), full.size()},
                      {owned.data() + all[static_cast<std::size_t>(u)].owned_offset,
                       static_cast<std::size_t>(params_->shard_size(u))}});
      reduced_held_.push_back(u);
    }
    return runs;
  }
  if (group_.size() <= 1) return runs;
  tensor::FlatStorage& g = params_->flat_grads();
  // Units lie back to back in the flat buffer, in their order: a run of adjacent ones is one
  // all-reduce. The padding after the last unit (none without ZeRO) is nobody's gradient.
  std::size_t i = 0;
  while (i < units.size()) {
    const model::ParamUnit& first = all[static_cast<std::size_t>(units[i])];
    std::int64_t end = first.offset + first.numel;
    std::size_t j = i + 1;
    while (j < units.size() && all[static_cast<std::size_t>(units[j])].offset == end) {
      end += all[static_cast<std::size_t>(units[j])].numel;
      ++j;
    }
    if (end > first.offset)
      runs.push_back({{g.data() + first.offset, static_cast<std::size_t>(end - first.offset)}, {}});
    i = j;
  }
  return runs;
}

void DataParallelOptimizer::reduce_open_units(std::span<const std::int32_t> touched) {
  if (!sharded_gradients_) return;
  const std::vector<int> open = params_->open_gradient_units();
  tensor::FlatStorage& owned = params_->owned_grads();
  for (int u : open) {
    // Held until its R op (layered reduction), or handed to it and not yet closed.
    if (static_cast<std::size_t>(u) < unit_held_.size() && unit_held_[static_cast<std::size_t>(u)])
      continue;
    tensor::FlatStorage& full = params_->unit_gradient(u);
    const std::int64_t shard = params_->shard_size(u);
    if (u == sparse_unit_) {  // the op's touched rows to the members owning them
      const model::ParamUnit& unit = params_->units()[static_cast<std::size_t>(u)];
      std::vector<TableRange> ranges(static_cast<std::size_t>(group_.size()));
      for (std::size_t j = 0; j < ranges.size(); ++j)
        ranges[j] = {std::min(static_cast<std::int64_t>(j) * shard, unit.numel),
                     std::min(static_cast<std::int64_t>(j + 1) * shard, unit.numel)};
      iteration_sparse_ += reduce_scatter_touched_rows(
          *comm_, group_, full.allocator(), full.data(), unit.numel / sparse_width_, sparse_width_,
          touched, ranges, owned.data() + unit.owned_offset, RowsWrite::add);
      params_->close_gradient_unit(u);
      continue;
    }
    // From the rank's buffer cache: a new device block per layer would be a cudaMalloc.
    model::Buffer mine;
    const tensor::TensorView part = model::sized(mine, Shape{shard});
    comm_->reduce_scatter(group_, {full.data(), full.size()},
                          {part.data, static_cast<std::size_t>(shard)});
    backend_->accumulate(
        {owned.data() + params_->units()[static_cast<std::size_t>(u)].owned_offset, Shape{shard}},
        part);
    params_->close_gradient_unit(u);
  }
}

void DataParallelOptimizer::gather_parameter_units(const std::vector<int>& units) {
  tensor::FlatStorage& shards = params_->flat_params();
  for (int u : units) {
    const model::ParamUnit& unit = params_->units()[static_cast<std::size_t>(u)];
    tensor::FlatStorage& full = params_->unit_parameters(u);
    comm_->all_gather(
        group_,
        {shards.data() + unit.owned_offset, static_cast<std::size_t>(params_->shard_size(u))},
        {full.data(), full.size()});
  }
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
    std::int64_t begin = 0, end = 0;
    if (sharded_gradients_) {  // in the owned gradients' coordinates
      const model::OwnedPart part =
          params_->owned_part(static_cast<int>(e - params_->entries().data()));
      begin = part.owned_offset;
      end = begin + part.count;
    } else {
      begin = std::max<std::int64_t>(lo_, static_cast<std::int64_t>(e->offset)) - lo_;
      end = std::min<std::int64_t>(hi_, static_cast<std::int64_t>(e->offset) + e->numel()) - lo_;
    }
    if (begin >= end) continue;
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
  const tensor::FlatStorage& g =
      sharded_gradients_ ? params_->owned_grads() : params_->flat_grads();
  return backend_->grad_sum_squares_segments({g.data() + lo_, Shape{hi_ - lo_}}, norm_segments_);
}

void DataParallelOptimizer::step(const tensor::AdamWConfig& config, std::int64_t step,
                                 float clip_coef) {
  if (sharded_gradients_) {
    step_sharded(config, step, clip_coef);
    return;
  }
  tensor::FlatStorage& p = params_->flat_params();
  tensor::FlatStorage& g = params_->flat_grads();
  if (hi_ > lo_) update(p.data() + lo_, g.data() + lo_, hi_ - lo_, config, step, clip_coef);
  if (zero1_ && hi_ > lo_) {
    tensor::FlatStorage mine(static_cast<std::size_t>(hi_ - lo_),
                             profiler::MemoryCategory::Temporaries, &p.allocator());
    p.allocator().copy(mine.data(), p.data() + lo_, mine.size() * sizeof(float));
    comm_->all_gather(group_, {mine.data(), mine.size()}, {p.data(), p.size()});
  }
}

// ZeRO-2: this rank's shard of each unit's parameters, back to back as the owned gradients are,
// is updated there and all-gathered unit by unit into the flat parameters.
void DataParallelOptimizer::step_sharded(const tensor::AdamWConfig& config, std::int64_t step,
                                         float clip_coef) {
  if (hi_ <= lo_) return;
  tensor::FlatStorage& p = params_->flat_params();
  if (params_->parameters_sharded()) {  // ZeRO-3: the shards are the parameters
    update(p.data(), params_->owned_grads().data(), hi_, config, step, clip_coef);
    return;
  }
  const model::ShardingGroup& sh = params_->sharding();
  tensor::FlatStorage mine(static_cast<std::size_t>(hi_), profiler::MemoryCategory::Temporaries,
                           &p.allocator());
  for (const model::ParamUnit& u : params_->units()) {
    const std::int64_t shard = u.padded / sh.size;
    p.allocator().copy(mine.data() + u.owned_offset, p.data() + u.offset + shard * sh.index,
                       static_cast<std::size_t>(shard) * sizeof(float));
  }
  update(mine.data(), params_->owned_grads().data(), hi_, config, step, clip_coef);
  for (const model::ParamUnit& u : params_->units())
    comm_->all_gather(group_,
                      {mine.data() + u.owned_offset, static_cast<std::size_t>(u.padded / sh.size)},
                      {p.data() + u.offset, static_cast<std::size_t>(u.padded)});
}

void DataParallelOptimizer::zero_grad() {
  if (sharded_gradients_)
    params_->owned_grads().zero();
  else
    params_->flat_grads().zero();
}

}  // namespace pipetune::runtime
