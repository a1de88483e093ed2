// What one rank holds of the model's parameters and gradients, seen from outside the flat
// buffers: copied out to and in from full-model tensors by name (a run's captured gradients and
// parameters, its initial parameters), and counted in bytes for the memory ledger and the rank's
// summary. Internal to engine/runtime; rank_training.cpp uses it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/model/parameters.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::runtime {

// The gradients this rank holds: its range [lo, hi) of the flat gradients, or under ZeRO-2 and
// 3 its shards, written into full-model tensors in `out` (made, zeroed, where not there yet)
// under `mutex`.
void export_gradients(const model::ParameterSet& set, std::int64_t lo, std::int64_t hi,
                      std::map<std::string, tensor::Tensor>& out, std::mutex& mutex);

// The parameters this rank holds: all, or under ZeRO-3 its shards (into `out` as above).
void export_parameters(const model::ParameterSet& set, std::map<std::string, tensor::Tensor>& out,
                       std::mutex& mutex);

// Overwrites what this rank holds of the parameters with the elements of the given full-model
// tensors (on a device: in a host copy, uploaded at the end).
void import_full(model::ParameterSet& set, const std::map<std::string, tensor::Tensor>& full);

// Parameter and gradient bytes of the vocabulary layers (embedding, position embedding, output
// layer) and of everything else.
struct ParameterBytes {
  std::int64_t vocabulary = 0;
  std::int64_t other = 0;
  ParameterBytes operator+(const ParameterBytes& o) const {
    return {vocabulary + o.vocabulary, other + o.other};
  }
};

// What a rank keeps through the iteration: all the parameters and gradients, or under ZeRO-2 its
// shard of each unit's gradient and under ZeRO-3 of its values too (a unit's full gradient or
// values are on the ledger only while a layer computes or uses them).
ParameterBytes kept_gradient_bytes(const model::ParameterSet& set);
ParameterBytes kept_parameter_bytes(const model::ParameterSet& set);

}  // namespace pipetune::runtime
