#include "engine/model/parameters.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "engine/data/random.hpp"

namespace pipetune::model {

ShardLayout ShardLayout::whole(std::int64_t rows, std::int64_t cols) {
  ShardLayout l;
  l.full_rows = rows;
  l.full_cols = cols;
  l.rows = {{0, rows}};
  l.col_lo = 0;
  l.col_hi = cols;
  return l;
}

ShardLayout ShardLayout::row_blocks(std::int64_t full_rows, std::int64_t full_cols, int parts,
                                    std::int64_t lo, std::int64_t hi) {
  ShardLayout l = whole(full_rows, full_cols);
  const std::int64_t block = full_rows / parts;
  l.rows.clear();
  for (int p = 0; p < parts; ++p) l.rows.push_back({p * block + lo, p * block + hi});
  return l;
}

ShardLayout ShardLayout::columns(std::int64_t full_rows, std::int64_t full_cols, std::int64_t lo,
                                 std::int64_t hi) {
  ShardLayout l = whole(full_rows, full_cols);
  l.col_lo = lo;
  l.col_hi = hi;
  return l;
}

std::int64_t ShardLayout::local_rows() const {
  std::int64_t n = 0;
  for (const RowRange& r : rows) n += r.hi - r.lo;
  return n;
}

std::int64_t ShardLayout::full_index(std::int64_t local) const {
  const std::int64_t cols = local_cols();
  std::int64_t row = local / cols;
  const std::int64_t col = col_lo + local % cols;
  for (const RowRange& r : rows) {
    if (row < r.hi - r.lo) return (r.lo + row) * full_cols + col;
    row -= r.hi - r.lo;
  }
  throw std::logic_error("ShardLayout::full_index: local index out of range");
}

int ParameterSet::add(ParamEntry entry) {
  if (allocated_) throw std::logic_error("ParameterSet::add after allocate: " + entry.name);
  if (entry.layout.local_rows() * entry.layout.local_cols() != entry.shape.numel())
    throw std::logic_error("ParameterSet::add: layout does not match shape for " + entry.name);
  entry.offset = static_cast<std::size_t>(size_);
  size_ += entry.numel();
  entries_.push_back(std::move(entry));
  return static_cast<int>(entries_.size()) - 1;
}

void ParameterSet::allocate(std::int64_t pad_multiple, tensor::DeviceAllocator* storage) {
  if (allocated_) throw std::logic_error("ParameterSet::allocate: allocated already");
  lay_out_units(1);
  const std::int64_t m = pad_multiple < 1 ? 1 : pad_multiple;
  const auto padded = static_cast<std::size_t>((size_ + m - 1) / m * m);
  params_ = tensor::FlatStorage(padded, profiler::MemoryCategory::Parameters, storage);
  grads_ = tensor::FlatStorage(padded, profiler::MemoryCategory::Gradients, storage);
  padded_size_ = static_cast<std::int64_t>(padded);
  storage_ = storage;
  allocated_ = true;
}

void ParameterSet::initialize(std::uint64_t seed) {
  // On a device the values are made in a host copy and uploaded once.
  std::vector<float> staged;
  if (params_.on_device()) staged.assign(params_.size(), 0.0f);
  float* base = params_.on_device() ? staged.data() : params_.host_span().data();
  for (int k = 0; k < count(); ++k) {
    const ParamEntry& e = entry(k);
    const OwnedPart kept = kept_parameters(k);
    float* p = base + kept.owned_offset;
    for (std::int64_t i = 0; i < kept.count; ++i) {
      const std::int64_t full = e.layout.full_index(kept.entry_begin + i);
      const bool padding = e.zero_rows_from >= 0 && full / e.layout.full_cols >= e.zero_rows_from;
      p[i] = padding ? 0.0f : init_value(seed, e.name, e.init, e.init_std, full);
    }
  }
  if (params_.on_device()) params_.upload(staged);
  if (sharded_)
    owned_grads_.zero();
  else
    grads_.zero();
}

int ParameterSet::find(const std::string& name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return static_cast<int>(i);
  return -1;
}

tensor::TensorView ParameterSet::param(int i) {
  if (parameters_sharded_) return unit_view(unit_params_, i, "its values gathered (ZeRO-3)");
  const ParamEntry& e = entry(i);
  return {params_.data() + e.offset, e.shape};
}
tensor::TensorView ParameterSet::grad(int i) {
  if (sharded_) return unit_view(unit_grads_, i, "a layer reducing its gradient (ZeRO-2 and 3)");
  const ParamEntry& e = entry(i);
  return {grads_.data() + e.offset, e.shape};
}
tensor::ConstTensorView ParameterSet::param(int i) const {
  return const_cast<ParameterSet*>(this)->param(i);
}
tensor::ConstTensorView ParameterSet::grad(int i) const {
  return const_cast<ParameterSet*>(this)->grad(i);
}

tensor::FlatStorage& ParameterSet::flat_grads() {
  if (sharded_)
    throw std::logic_error("ParameterSet::flat_grads: under ZeRO-2 a rank keeps shards only");
  return grads_;
}

const tensor::FlatStorage& ParameterSet::flat_grads() const {
  return const_cast<ParameterSet*>(this)->flat_grads();
}

namespace {
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}
}  // namespace

float init_value(std::uint64_t seed, const std::string& name, Init init, float std,
                 std::int64_t full_index) {
  switch (init) {
    case Init::Zeros:
      return 0.0f;
    case Init::Ones:
      return 1.0f;
    case Init::Normal:
      break;
  }
  // Box-Muller on two 24-bit uniforms from one stateless hash: the same value for the same
  // (seed, name, index) whatever the plan, rank or order of initialisation.
  const std::uint64_t bits =
      data::hash64(seed, fnv1a(name), static_cast<std::uint64_t>(full_index));
  const double u1 = (static_cast<double>(bits >> 40) + 0.5) / 16777216.0;
  const double u2 = (static_cast<double>(bits & 0xFFFFFFULL) + 0.5) / 16777216.0;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return static_cast<float>(z * std);
}

}  // namespace pipetune::model
