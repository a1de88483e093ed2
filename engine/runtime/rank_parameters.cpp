#include "engine/runtime/rank_parameters.hpp"

#include <algorithm>
#include <span>
#include <vector>

#include "engine/errors.hpp"

namespace pipetune::runtime {

namespace {

// The full-model tensor of `e` in `out`, made (zeroed) when it is not there yet.
tensor::Tensor& full_tensor(std::map<std::string, tensor::Tensor>& out,
                            const model::ParamEntry& e) {
  auto it = out.find(e.name);
  if (it == out.end()) {
    const tensor::Shape shape = e.layout.full_cols == 1
                                    ? tensor::Shape{e.layout.full_rows}
                                    : tensor::Shape{e.layout.full_rows, e.layout.full_cols};
    it = out.emplace(e.name, tensor::Tensor(shape)).first;
  }
  return it->second;
}

// Writes the elements `storage` holds of each entry (part_of(i): which, and where) into
// full-model tensors (a device storage is copied to the host first).
template <class PartOf>
void export_parts(const model::ParameterSet& set, const tensor::FlatStorage& storage,
                  PartOf&& part_of, std::map<std::string, tensor::Tensor>& out, std::mutex& mutex) {
  std::vector<float> staged;
  if (storage.on_device()) staged = storage.to_host();
  const std::span<const float> flat = storage.on_device() ? staged : storage.host_span();
  std::lock_guard lock(mutex);
  for (int i = 0; i < set.count(); ++i) {
    const model::ParamEntry& e = set.entry(i);
    const model::OwnedPart part = part_of(i);
    if (part.count == 0) continue;
    tensor::Tensor& full = full_tensor(out, e);
    for (std::int64_t k = 0; k < part.count; ++k)
      full[e.layout.full_index(part.entry_begin + k)] =
          flat[static_cast<std::size_t>(part.owned_offset + k)];
  }
}

// All the set's bytes: every unit's, the flat buffers' padding counted with the rest.
ParameterBytes parameter_bytes(const model::ParameterSet& set) {
  ParameterBytes b;
  for (const model::ParamUnit& u : set.units())
    (u.vocabulary ? b.vocabulary : b.other) += u.numel * static_cast<std::int64_t>(sizeof(float));
  b.other += (set.padded_size() - set.size()) * static_cast<std::int64_t>(sizeof(float));
  return b;
}

// The bytes of its shard of each unit (ZeRO-2 and 3).
ParameterBytes shard_bytes(const model::ParameterSet& set) {
  ParameterBytes b;
  for (std::size_t u = 0; u < set.units().size(); ++u)
    (set.units()[u].vocabulary ? b.vocabulary : b.other) +=
        set.shard_size(static_cast<int>(u)) * static_cast<std::int64_t>(sizeof(float));
  return b;
}

}  // namespace

void export_gradients(const model::ParameterSet& set, std::int64_t lo, std::int64_t hi,
                      std::map<std::string, tensor::Tensor>& out, std::mutex& mutex) {
  if (set.gradients_sharded()) {
    export_parts(
        set, set.owned_grads(), [&](int i) { return set.owned_part(i); }, out, mutex);
    return;
  }
  export_parts(
      set, set.flat_grads(),
      [&](int i) {
        const auto off = static_cast<std::int64_t>(set.entry(i).offset);
        const std::int64_t a = std::max(lo, off), b = std::min(hi, off + set.entry(i).numel());
        return a < b ? model::OwnedPart{a - off, a, b - a} : model::OwnedPart{};
      },
      out, mutex);
}

void export_parameters(const model::ParameterSet& set, std::map<std::string, tensor::Tensor>& out,
                       std::mutex& mutex) {
  export_parts(
      set, set.flat_params(), [&](int i) { return set.kept_parameters(i); }, out, mutex);
}

void import_full(model::ParameterSet& set, const std::map<std::string, tensor::Tensor>& full) {
  tensor::FlatStorage& storage = set.flat_params();
  std::vector<float> staged;
  if (storage.on_device()) staged = storage.to_host();
  float* base = storage.on_device() ? staged.data() : storage.host_span().data();
  for (int i = 0; i < set.count(); ++i) {
    const model::ParamEntry& e = set.entry(i);
    auto it = full.find(e.name);
    if (it == full.end()) continue;
    if (it->second.numel() != e.layout.full_numel())
      throw InputError("initial parameter '" + e.name + "' has " +
                       std::to_string(it->second.numel()) + " elements, the model " +
                       std::to_string(e.layout.full_numel()));
    const model::OwnedPart kept = set.kept_parameters(i);
    float* p = base + kept.owned_offset;
    for (std::int64_t k = 0; k < kept.count; ++k)
      p[k] = it->second[e.layout.full_index(kept.entry_begin + k)];
  }
  if (storage.on_device()) storage.upload(staged);
}

ParameterBytes kept_gradient_bytes(const model::ParameterSet& set) {
  return set.gradients_sharded() ? shard_bytes(set) : parameter_bytes(set);
}
ParameterBytes kept_parameter_bytes(const model::ParameterSet& set) {
  return set.parameters_sharded() ? shard_bytes(set) : parameter_bytes(set);
}

}  // namespace pipetune::runtime
