// ParameterSet's units and its ZeRO-2 and 3 shards (parameters.hpp).
#include <algorithm>
#include <stdexcept>

#include "engine/model/parameters.hpp"

namespace pipetune::model {

std::string unit_name(const std::string& entry_name) {
  const std::size_t dot = entry_name.find('.');
  if (dot == std::string::npos) return entry_name;
  if (entry_name.compare(0, dot, "h") == 0) {
    const std::size_t second = entry_name.find('.', dot + 1);
    return second == std::string::npos ? entry_name : entry_name.substr(0, second);
  }
  return entry_name.substr(0, dot);
}

std::string layer_unit_name(std::int64_t layer) {
  return "h." + std::to_string(layer);
}

bool is_vocabulary_unit(std::string_view unit_name) {
  return unit_name == "wte" || unit_name == "wpe" || unit_name == "head";
}

void ParameterSet::lay_out_units(std::int64_t unit_multiple) {
  units_.clear();
  unit_index_.clear();
  unit_of_.assign(entries_.size(), -1);
  std::int64_t at = 0, owned = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const std::string name = unit_name(entries_[i].name);
    if (units_.empty() || units_.back().name != name) {
      if (!unit_index_.emplace(name, static_cast<int>(units_.size())).second)
        throw std::logic_error("ParameterSet: the entries of unit '" + name +
                               "' are not registered together");
      ParamUnit u;
      u.name = name;
      u.vocabulary = is_vocabulary_unit(name);
      u.layer = name.starts_with("h.");
      u.first_entry = static_cast<int>(i);
      units_.push_back(std::move(u));
    }
    ParamUnit& u = units_.back();
    u.end_entry = static_cast<int>(i) + 1;
    u.numel += entries_[i].numel();
    unit_of_[i] = static_cast<int>(units_.size()) - 1;
  }
  for (ParamUnit& u : units_) {
    u.offset = at;
    u.padded = (u.numel + unit_multiple - 1) / unit_multiple * unit_multiple;
    u.owned_offset = owned;
    std::int64_t in_unit = 0;
    for (int e = u.first_entry; e < u.end_entry; ++e) {
      entries_[static_cast<std::size_t>(e)].offset = static_cast<std::size_t>(at + in_unit);
      in_unit += entries_[static_cast<std::size_t>(e)].numel();
    }
    at += u.padded;
    owned += u.padded / unit_multiple;
  }
}

void ParameterSet::allocate_sharded(ShardingGroup sharding, tensor::DeviceAllocator* storage,
                                    bool parameters) {
  if (allocated_) throw std::logic_error("ParameterSet::allocate_sharded: allocated already");
  if (sharding.size < 1 || sharding.index < 0 || sharding.index >= sharding.size)
    throw std::logic_error("ParameterSet::allocate_sharded: rank " +
                           std::to_string(sharding.index) + " of a group of " +
                           std::to_string(sharding.size));
  lay_out_units(sharding.size);
  std::int64_t padded = 0, owned = 0;
  for (const ParamUnit& u : units_) padded += u.padded, owned += u.padded / sharding.size;
  params_ = tensor::FlatStorage(static_cast<std::size_t>(parameters ? owned : padded),
                                profiler::MemoryCategory::Parameters, storage);
  owned_grads_ = tensor::FlatStorage(static_cast<std::size_t>(owned),
                                     profiler::MemoryCategory::Gradients, storage);
  padded_size_ = padded;
  unit_grads_.resize(units_.size());
  unit_params_.resize(units_.size());
  sharded_ = true;
  parameters_sharded_ = parameters;
  sharding_ = sharding;
  storage_ = storage;
  allocated_ = true;
}

int ParameterSet::find_unit(std::string_view name) const {
  const auto it = unit_index_.find(name);
  return it == unit_index_.end() ? -1 : it->second;
}

tensor::TensorView ParameterSet::unit_view(std::vector<tensor::FlatStorage>& buffers, int i,
                                           const char* what) {
  const ParamEntry& e = entry(i);
  const ParamUnit& u = units_[static_cast<std::size_t>(unit_of(i))];
  tensor::FlatStorage& full = buffers[static_cast<std::size_t>(unit_of(i))];
  if (full.empty())
    throw std::logic_error("ParameterSet: '" + e.name + "' (unit '" + u.name +
                           "') is used outside " + what);
  return {full.data() + (static_cast<std::int64_t>(e.offset) - u.offset), e.shape};
}

tensor::FlatStorage& ParameterSet::open_buffer(std::vector<tensor::FlatStorage>& buffers, int unit,
                                               const char* what) {
  tensor::FlatStorage& full = buffers[static_cast<std::size_t>(unit)];
  if (full.empty())
    throw std::logic_error("ParameterSet: the " + std::string(what) + " of unit '" +
                           units_[static_cast<std::size_t>(unit)].name + "' are not open");
  return full;
}

std::int64_t ParameterSet::shard_size(int unit) const {
  return units_[static_cast<std::size_t>(unit)].padded / sharding_.size;
}

OwnedPart ParameterSet::owned_part(int entry) const {
  if (!sharded_) return {0, static_cast<std::int64_t>(this->entry(entry).offset), 0};
  const ParamEntry& e = this->entry(entry);
  const ParamUnit& u = units_[static_cast<std::size_t>(unit_of(entry))];
  const std::int64_t shard = u.padded / sharding_.size;
  // In unit coordinates: the entry's elements and this rank's shard.
  const std::int64_t e_lo = static_cast<std::int64_t>(e.offset) - u.offset, e_hi = e_lo + e.numel();
  const std::int64_t s_lo = shard * sharding_.index, s_hi = s_lo + shard;
  const std::int64_t lo = std::max(e_lo, s_lo), hi = std::min(e_hi, s_hi);
  if (lo >= hi) return {};
  return {lo - e_lo, u.owned_offset + (lo - s_lo), hi - lo};
}

OwnedPart ParameterSet::kept_parameters(int entry) const {
  if (parameters_sharded_) return owned_part(entry);
  return {0, static_cast<std::int64_t>(this->entry(entry).offset), this->entry(entry).numel()};
}

bool ParameterSet::gradient_unit_open(int unit) const {
  return sharded_ && !unit_grads_[static_cast<std::size_t>(unit)].empty();
}

namespace {

constexpr std::int64_t kFloatBytes = static_cast<std::int64_t>(sizeof(float));

// A unit's full buffer: for a layer unit the kept one of its size if there is one, else a new
// one (added to `held`, the bytes of its kind). Only layer units take kept buffers, so a kept
// buffer's bytes stay in their ledger category.
tensor::FlatStorage take_unit_storage(std::vector<tensor::FlatStorage>& spares, const ParamUnit& u,
                                      profiler::MemoryCategory category,
                                      tensor::DeviceAllocator* storage, bool zeroed,
                                      std::int64_t& held) {
  const auto elements = static_cast<std::size_t>(u.padded);
  if (u.layer)
    for (auto it = spares.begin(); it != spares.end(); ++it)
      if (it->size() == elements) {
        tensor::FlatStorage s = std::move(*it);
        spares.erase(it);
        if (zeroed) s.zero();
        return s;
      }
  held += u.padded * kFloatBytes;
  return tensor::FlatStorage(elements, category, storage);  // zeroed
}

// The counter of `held` a unit's buffer of values (or gradients) is held in.
std::int64_t& held_by(UnitBufferBytes& held, const ParamUnit& u, bool values) {
  if (values) return u.vocabulary ? held.vocabulary_values : held.values;
  return u.vocabulary ? held.vocabulary_gradients : held.gradients;
}

// A closed layer unit's buffer is kept when none of its size is; any other buffer is freed.
void return_unit_storage(std::vector<tensor::FlatStorage>& spares, const ParamUnit& u,
                         tensor::FlatStorage& closed, std::int64_t& held) {
  if (closed.empty()) return;
  const bool have_one = std::any_of(spares.begin(), spares.end(),
                                    [&](const auto& s) { return s.size() == closed.size(); });
  if (u.layer && !have_one)
    spares.push_back(std::move(closed));
  else
    held -= static_cast<std::int64_t>(closed.size()) * kFloatBytes;
  closed = tensor::FlatStorage();
}

}  // namespace

void ParameterSet::open_gradient_unit(int unit) {
  if (!sharded_) throw std::logic_error("ParameterSet::open_gradient_unit: not under ZeRO-2");
  if (gradient_unit_open(unit)) return;
  const ParamUnit& u = units_[static_cast<std::size_t>(unit)];
  unit_grads_[static_cast<std::size_t>(unit)] =
      take_unit_storage(spare_grads_, u, profiler::MemoryCategory::Gradients, storage_, true,
                        held_by(unit_buffer_bytes_, u, false));
  open_units_.push_back(unit);
}

tensor::FlatStorage& ParameterSet::unit_gradient(int unit) {
  return open_buffer(unit_grads_, unit, "full gradients");
}

void ParameterSet::close_gradient_unit(int unit) {
  const ParamUnit& u = units_[static_cast<std::size_t>(unit)];
  return_unit_storage(spare_grads_, u, unit_grads_[static_cast<std::size_t>(unit)],
                      held_by(unit_buffer_bytes_, u, false));
  std::erase(open_units_, unit);
}

bool ParameterSet::parameter_unit_open(int unit) const {
  return parameters_sharded_ && !unit_params_[static_cast<std::size_t>(unit)].empty();
}

void ParameterSet::open_parameter_unit(int unit) {
  if (!parameters_sharded_)
    throw std::logic_error("ParameterSet::open_parameter_unit: not under ZeRO-3");
  if (parameter_unit_open(unit)) return;
  const ParamUnit& u = units_[static_cast<std::size_t>(unit)];
  unit_params_[static_cast<std::size_t>(unit)] =  // not zeroed: gathered into
      take_unit_storage(spare_params_, u, profiler::MemoryCategory::Parameters, storage_, false,
                        held_by(unit_buffer_bytes_, u, true));
}

tensor::FlatStorage& ParameterSet::unit_parameters(int unit) {
  return open_buffer(unit_params_, unit, "full values");
}

void ParameterSet::close_parameter_unit(int unit) {
  const ParamUnit& u = units_[static_cast<std::size_t>(unit)];
  return_unit_storage(spare_params_, u, unit_params_[static_cast<std::size_t>(unit)],
                      held_by(unit_buffer_bytes_, u, true));
}

}  // namespace pipetune::model
