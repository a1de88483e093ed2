// Parameters of one rank: named tensors in one flat buffer (llm.c style), each knowing which part
// of the full model's tensor it holds (its shard layout), so that
//  - every rank initialises its shard to exactly the values the 1-rank model has there
//    (init_value() depends only on the seed, the name and the element's index in the full tensor);
//  - gradients and parameters of any plan can be gathered back into full-model layout and
//    compared with the 1-rank run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor/device_allocator.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::model {

struct RowRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;  // exclusive
};

// A local tensor (rows, cols) is the full tensor's rows `rows` (concatenated in order) and columns
// [col_lo, col_hi). Vectors are (n, 1) matrices.
struct ShardLayout {
  std::int64_t full_rows = 0;
  std::int64_t full_cols = 1;
  std::vector<RowRange> rows;
  std::int64_t col_lo = 0;
  std::int64_t col_hi = 1;

  static ShardLayout whole(std::int64_t rows, std::int64_t cols = 1);
  // Rows [lo, hi) of every one of `parts` equal blocks of `block` rows each (packed QKV: parts=3).
  static ShardLayout row_blocks(std::int64_t full_rows, std::int64_t full_cols, int parts,
                                std::int64_t lo, std::int64_t hi);
  static ShardLayout columns(std::int64_t full_rows, std::int64_t full_cols, std::int64_t lo,
                             std::int64_t hi);

  std::int64_t local_rows() const;
  std::int64_t local_cols() const { return col_hi - col_lo; }
  std::int64_t full_numel() const { return full_rows * full_cols; }
  // Row-major index in the full tensor of the local element `local` (row-major, local shape).
  std::int64_t full_index(std::int64_t local) const;
};

enum class Init : std::uint8_t { Normal, Zeros, Ones };

struct ParamEntry {
  std::string name;     // "h.3.attn.qkv.w"
  tensor::Shape shape;  // local shape
  ShardLayout layout;
  bool tp_replicated = false;  // the same values on every TP rank (norms, row-parallel biases)
  bool decay = false;          // AdamW weight decay applies (matrices and embeddings)
  Init init = Init::Normal;
  float init_std = 0.02f;
  std::size_t offset = 0;  // into the flat buffers
  // Rows of the full tensor from here on are padding (a padded vocabulary): initialised to zero
  // whatever `init` says. -1: none.
  std::int64_t zero_rows_from = -1;
  // Used on the rows of the sequence a rank holds (the LayerNorms): under sequence parallelism
  // each TP rank's gradient covers its rows only, and the TP group sums them before the DP
  // reduction (Megatron's sequence_parallel attribute).
  bool sequence_parallel = false;

  std::int64_t numel() const { return shape.numel(); }
};

// One rank's parameters of one reduction domain (dense parameters are reduced over DP, expert
// parameters over the expert-DP group). Flat buffers are padded to a multiple of `pad_multiple`
// so ZeRO-1 can split them into equal shards. The flat buffers live in the storage given to
// allocate() (host memory by default, the rank's device for a GPU rank): views point there, and
// host code reads or writes values through the buffers' explicit copies (FlatStorage).
class ParameterSet {
 public:
  // Returns the entry's index. Throws std::logic_error after allocate().
  int add(ParamEntry entry);
  // `storage`: where the flat buffers live; null for host memory.
  void allocate(std::int64_t pad_multiple = 1, tensor::DeviceAllocator* storage = nullptr);
  void initialize(std::uint64_t seed);  // values from init_value(); gradients zeroed

  int count() const { return static_cast<int>(entries_.size()); }
  const ParamEntry& entry(int i) const { return entries_[static_cast<std::size_t>(i)]; }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  int find(const std::string& name) const;  // -1 when absent

  tensor::TensorView param(int i);
  tensor::TensorView grad(int i);
  tensor::ConstTensorView param(int i) const;
  tensor::ConstTensorView grad(int i) const;

  std::int64_t size() const { return size_; }  // unpadded elements
  std::int64_t padded_size() const { return static_cast<std::int64_t>(params_.size()); }
  tensor::FlatStorage& flat_params() { return params_; }
  tensor::FlatStorage& flat_grads() { return grads_; }
  const tensor::FlatStorage& flat_params() const { return params_; }
  const tensor::FlatStorage& flat_grads() const { return grads_; }
  bool on_device() const { return params_.on_device(); }

 private:
  std::vector<ParamEntry> entries_;
  tensor::FlatStorage params_;  // (padded_size) Parameters
  tensor::FlatStorage grads_;   // (padded_size) Gradients
  std::int64_t size_ = 0;
  bool allocated_ = false;
};

// The initial value of element `full_index` of the full tensor `name` (independent of the plan).
float init_value(std::uint64_t seed, const std::string& name, Init init, float std,
                 std::int64_t full_index);

}  // namespace pipetune::model
