// Parameters of one rank: named tensors in one flat buffer (llm.c style), each knowing which part
// of the full model's tensor it holds (its shard layout), so that
//  - every rank initialises its shard to exactly the values the 1-rank model has there
//    (init_value() depends only on the seed, the name and the element's index in the full tensor);
//  - gradients and parameters of any plan can be gathered back into full-model layout and
//    compared with the 1-rank run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
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

// Entries that are reduced, and under ZeRO-2 and 3 sharded, together: one layer's ("h.3"), or
// one vocabulary or final-norm table's ("wte", "wpe", "lnf", "head"). What an op computes
// gradients for is a list of units, so every rank of a reduction group reduces the same units in
// the same order whatever its data.
struct ParamUnit {
  std::string name;
  int first_entry = 0, end_entry = 0;  // entries [first_entry, end_entry)
  std::int64_t offset = 0;             // into the flat parameters
  std::int64_t numel = 0;              // the entries' elements
  std::int64_t padded = 0;        // numel rounded up to a multiple of the sharding group's size
  std::int64_t owned_offset = 0;  // of this rank's shard (padded / size) in the owned gradients
  bool vocabulary = false;        // a vocabulary table ("wte", "wpe", "head")
  bool layer = false;             // a block's unit ("h.<layer>"), opened per layer and micro-batch
};

// Bytes of the full unit buffers a sharded ParameterSet holds (open units, and the closed layer
// units' buffers it keeps for reuse), split as the memory ledger splits them.
struct UnitBufferBytes {
  std::int64_t values = 0, vocabulary_values = 0;        // ZeRO-3
  std::int64_t gradients = 0, vocabulary_gradients = 0;  // ZeRO-2 and 3
  UnitBufferBytes& operator+=(const UnitBufferBytes& o) {
    values += o.values;
    vocabulary_values += o.vocabulary_values;
    gradients += o.gradients;
    vocabulary_gradients += o.vocabulary_gradients;
    return *this;
  }
};

// The unit an entry belongs to: "h.<layer>" for a block's entries, else the name up to its first
// '.' ("lnf.w" -> "lnf", "head.w" -> "head", "wte" -> "wte").
std::string unit_name(const std::string& entry_name);
std::string layer_unit_name(std::int64_t layer);  // "h.<layer>"
// A vocabulary layer's unit ("wte", "wpe", "head"): its memory counts as VocabularyLayers.
bool is_vocabulary_unit(std::string_view unit_name);

// ZeRO-2 and 3: the reduction group has `size` ranks and this rank is the `index`-th.
struct ShardingGroup {
  int size = 1;
  int index = 0;
};

// The part of an entry a rank keeps under ZeRO-2 (of its gradient) and 3 (and of its value):
// `count` elements from the entry's element `entry_begin`, at `owned_offset` of the owned
// gradients (and under ZeRO-3 of the flat parameters); count 0: none.
struct OwnedPart {
  std::int64_t entry_begin = 0;
  std::int64_t owned_offset = 0;
  std::int64_t count = 0;
};

// One rank's parameters of one reduction domain (dense parameters are reduced over DP, expert
// parameters over the expert-DP group). Flat buffers are padded to a multiple of `pad_multiple`
// so ZeRO-1 can split them into equal shards. Under ZeRO-2 (allocate_sharded) the rank keeps only
// its shard of each unit's gradient (owned_grads(), accumulated over the iteration); a unit's
// full gradient exists only while a layer computes it (open_gradient_unit, reduced into the
// shards and closed after it), and each unit is padded to a multiple of the group. Under ZeRO-3
// the parameters are sharded alike: the flat parameters hold the rank's shard of each unit (laid
// out as the owned gradients), and a unit's full values exist only while a layer uses them
// (open_parameter_unit, filled by an all-gather, closed after). The flat buffers live in the
// storage given to allocate() (host memory by default, the rank's device for a GPU rank): views
// point there, and host code reads or writes values through the buffers' explicit copies
// (FlatStorage).
class ParameterSet {
 public:
  // Returns the entry's index. Throws std::logic_error after allocate().
  int add(ParamEntry entry);
  // `storage`: where the flat buffers live; null for host memory.
  void allocate(std::int64_t pad_multiple = 1, tensor::DeviceAllocator* storage = nullptr);
  // ZeRO-2, and with `parameters` ZeRO-3 (see above). Throws std::logic_error after allocate()
  // or for a group of under 1.
  void allocate_sharded(ShardingGroup sharding, tensor::DeviceAllocator* storage = nullptr,
                        bool parameters = false);
  void initialize(std::uint64_t seed);  // values from init_value(); gradients zeroed

  int count() const { return static_cast<int>(entries_.size()); }
  const ParamEntry& entry(int i) const { return entries_[static_cast<std::size_t>(i)]; }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  int find(const std::string& name) const;  // -1 when absent

  // Under ZeRO-3 the entry's unit must be open for parameters (std::logic_error otherwise).
  tensor::TensorView param(int i);
  // Under ZeRO-2 and 3 the entry's unit must be open (std::logic_error otherwise): a gradient
  // written outside the layers that reduce it would be lost.
  tensor::TensorView grad(int i);
  tensor::ConstTensorView param(int i) const;
  tensor::ConstTensorView grad(int i) const;

  std::int64_t size() const { return size_; }  // unpadded elements
  // Elements of the full flat layout, padding included (under ZeRO-3 no rank holds them all).
  std::int64_t padded_size() const { return padded_size_; }
  // The parameters this rank keeps: all of them, or under ZeRO-3 its shards (owned layout).
  tensor::FlatStorage& flat_params() { return params_; }
  // All gradients (not under ZeRO-2 and 3: std::logic_error).
  tensor::FlatStorage& flat_grads();
  const tensor::FlatStorage& flat_grads() const;
  const tensor::FlatStorage& flat_params() const { return params_; }
  bool on_device() const { return params_.on_device(); }

  const std::vector<ParamUnit>& units() const { return units_; }
  int find_unit(std::string_view name) const;  // -1 when absent
  int unit_of(int entry) const { return unit_of_[static_cast<std::size_t>(entry)]; }

  // ZeRO-2 and 3.
  bool gradients_sharded() const { return sharded_; }
  bool parameters_sharded() const { return parameters_sharded_; }
  const ShardingGroup& sharding() const { return sharding_; }
  std::int64_t shard_size(int unit) const;  // a unit's padded / size
  std::int64_t owned_size() const { return static_cast<std::int64_t>(owned_grads_.size()); }
  tensor::FlatStorage& owned_grads() { return owned_grads_; }
  const tensor::FlatStorage& owned_grads() const { return owned_grads_; }
  OwnedPart owned_part(int entry) const;
  // Where flat_params() holds entry `entry`'s elements: all of them at its offset, or under
  // ZeRO-3 its owned part.
  OwnedPart kept_parameters(int entry) const;
  // A zeroed full gradient for the unit (nothing when it is open already).
  void open_gradient_unit(int unit);
  bool gradient_unit_open(int unit) const;
  const std::vector<int>& open_gradient_units() const { return open_units_; }  // opening order
  tensor::FlatStorage& unit_gradient(int unit);  // (padded) of an open unit
  void close_gradient_unit(int unit);
  // ZeRO-3: room for a unit's full values (the caller all-gathers them into it); nothing when
  // it is open already.
  void open_parameter_unit(int unit);
  bool parameter_unit_open(int unit) const;
  tensor::FlatStorage& unit_parameters(int unit);  // (padded) of an open unit
  void close_parameter_unit(int unit);
  // What the full unit buffers hold now: open units, and one closed layer unit's buffer of each
  // size (kept so that the next layer does not allocate; on a GPU an allocation per layer and
  // micro-batch would be a cudaMalloc and a cudaFree, which waits for the whole device). The
  // kept buffers are memory in use, so the memory ledger counts them.
  const UnitBufferBytes& unit_buffer_bytes() const { return unit_buffer_bytes_; }

 private:
  // Groups the entries into units (each contiguous in registration order) and lays them out in
  // the flat buffers, each unit padded to a multiple of `unit_multiple`.
  void lay_out_units(std::int64_t unit_multiple);
  // Entry i's view into the open full buffer of its unit (`buffers`: unit_grads_ or
  // unit_params_); std::logic_error naming `what` when the unit is not open.
  tensor::TensorView unit_view(std::vector<tensor::FlatStorage>& buffers, int i, const char* what);
  // An open unit's full buffer; std::logic_error naming `what` when it is not open.
  tensor::FlatStorage& open_buffer(std::vector<tensor::FlatStorage>& buffers, int unit,
                                   const char* what);

  std::vector<ParamEntry> entries_;
  tensor::FlatStorage params_;  // (padded_size) Parameters; under ZeRO-3 (owned_size)
  tensor::FlatStorage grads_;   // (padded_size) Gradients; empty under ZeRO-2 and 3
  std::int64_t size_ = 0;
  std::int64_t padded_size_ = 0;
  bool allocated_ = false;
  std::vector<ParamUnit> units_;
  std::map<std::string, int, std::less<>> unit_index_;  // by name
  std::vector<int> unit_of_;                            // by entry
  bool sharded_ = false;
  bool parameters_sharded_ = false;
  ShardingGroup sharding_;
  tensor::DeviceAllocator* storage_ = nullptr;
  tensor::FlatStorage owned_grads_;               // (sum of shard sizes) Gradients, ZeRO-2/3
  std::vector<tensor::FlatStorage> unit_grads_;   // (padded) per unit while open, ZeRO-2/3
  std::vector<tensor::FlatStorage> unit_params_;  // (padded) per unit while open, ZeRO-3
  // Closed layer units' buffers, at most one of each size and kind, for the next layer unit of
  // that size (the dense and the MoE layers' units differ).
  std::vector<tensor::FlatStorage> spare_grads_, spare_params_;
  UnitBufferBytes unit_buffer_bytes_;
  std::vector<int> open_units_;
};

// The initial value of element `full_index` of the full tensor `name` (independent of the plan).
float init_value(std::uint64_t seed, const std::string& name, Init init, float std,
                 std::int64_t full_index);

}  // namespace pipetune::model
