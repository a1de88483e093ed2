// Data-parallel gradient reduction and AdamW for one ParameterSet of one rank.
//
// Without ZeRO the gradients are all-reduced over the reduction group (DP for dense parameters,
// expert-DP for experts) and every rank updates all its parameters. With ZeRO-1 the flat
// gradient buffer is reduce-scattered, each rank keeps AdamW moments for and updates only its
// 1/g shard, and the updated parameters are all-gathered: the same numbers, 1/g of the optimizer
// state. With ZeRO-2 (parameters allocated with allocate_sharded) the gradients are sharded too:
// after each op that computes some, reduce_open_units() reduce-scatters each unit it opened into
// this rank's shards (accumulated over the iteration) and frees the unit's full gradient; the
// step updates the shards and all-gathers each unit's parameters: 1/g of the gradients as well.
// With ZeRO-3 the parameters are the shards alone: the runtime gathers a unit's values for each
// layer that uses them (gather_parameter_units) and the step updates the shards in place.
//
// The moments live in the parameters' storage (the rank's device for a GPU rank); the reductions
// pass device spans to the communicator, which stages them when it must. With optimizer offload
// (ZeRO-Offload style, ParallelPlan::offload_optimizer) they live in host memory instead and the
// update runs on the host: the owned parameters and gradients go down, the host's AdamW updates
// them (the engine's CPU kernels, so the numbers are the CPU backend's), the parameters go back.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/model/parameters.hpp"
#include "engine/runtime/sparse_rows_reduction.hpp"
#include "engine/tensor/backend.hpp"

namespace pipetune::runtime {

class DataParallelOptimizer {
 public:
  // `group`: the ranks holding replicas of these parameters (this rank included).
  DataParallelOptimizer(model::ParameterSet& params, comm::Communicator& comm,
                        comm::ProcessGroup group, int tp_rank, int zero_stage,
                        tensor::Backend& backend, bool host_update = false);
  ~DataParallelOptimizer();
  DataParallelOptimizer(DataParallelOptimizer&&) noexcept;
  DataParallelOptimizer& operator=(DataParallelOptimizer&&) noexcept;

  // At the iteration's end: the DP reduction (ZeRO 0 and 1; under ZeRO-2 the ops have done it).
  // Under layered reduction, of the units reduce_units() has not reduced this iteration. With a
  // sparse unit, `touched` names the rows of it this rank added to (none otherwise).
  void reduce_gradients(std::span<const std::int32_t> touched = {});
  // EmbRace (ParallelPlan::sparse_embedding_gradient): `unit`, one table of rows `width` wide,
  // is left out of the dense reduction; its touched rows are exchanged instead
  // (sparse_rows_reduction.hpp). Without ZeRO reduce_gradients all-gathers them; under ZeRO-1 it
  // sends each row to the members owning it (an all-to-all), the rest of the buffer reduce-
  // scattered around the table; under ZeRO-2 and 3 reduce_open_units does so for each op's rows.
  void set_sparse_unit(int unit, std::int64_t width);
  // Whether the sparse unit holds a full gradient of an op (ZeRO-2 and 3): reduce_open_units
  // then wants the op's touched rows.
  bool sparse_unit_open() const;
  // What the last iteration's sparse reduction moved (zeros before the first, or without a
  // sparse unit); under ZeRO-2 and 3 the sum over its ops, complete after reduce_gradients.
  const SparseRowsExchange& last_sparse_exchange() const { return last_sparse_; }
  // Layered gradient reduction (the schedule's R op), ZeRO 0: all-reduces the gradients of
  // `units` (complete: no later op of the iteration adds to them) now, in runs of adjacent units,
  // and leaves them out of reduce_gradients(). Every rank of the group runs the same schedule, so
  // they reduce the same units in the same order. logic_error under ZeRO, or for a unit reduced
  // twice in one iteration.
  void reduce_units(const std::vector<int>& units);
  // ZeRO-2 and 3 under layered reduction (group_holds.hpp): `units` (a chunk's layers) keep their
  // full gradients open across ops, accumulating over the micro-batches, until take_units hands
  // them to their R op: reduce_open_units leaves them alone.
  void hold_units(const std::vector<int>& units);
  // One collective of an R op: a run of adjacent units' gradients all-reduced in place (ZeRO 0,
  // `shard` empty), or one held unit's full gradient reduce-scattered into the rank's shard of it
  // (ZeRO-2 and 3; the shard holds nothing else of the iteration, so it is written, not added).
  struct UnitReduction {
    std::span<float> gradients;
    std::span<float> shard;
  };
  // reduce_units in two halves, for a reduction on another thread (reduction_worker.hpp): marks
  // `units` reduced, as reduce_units does, and returns the collectives for the caller to run over
  // group() (none for a group of one under ZeRO 0). Under ZeRO-2 and 3, the held units' full
  // buffers stay open until release_reduced_units(), called once those collectives have ended.
  std::vector<UnitReduction> take_units(const std::vector<int>& units);
  // Closes the held units take_units handed out (their reductions have ended).
  void release_reduced_units();
  const comm::ProcessGroup& group() const { return group_; }
  // ZeRO-2: reduce-scatters the units the op opened, in their opening order, into this rank's
  // shards and closes them. Every rank of the group runs the same ops, so they open the same
  // units in the same order. The sparse unit's rows named by `touched` go to their owners.
  void reduce_open_units(std::span<const std::int32_t> touched = {});
  // ZeRO-3: all-gathers the values of `units` (opened for them) from the group's shards.
  void gather_parameter_units(const std::vector<int>& units);
  // Sum of squares of the gradient elements this rank is responsible for, so that summing it over
  // the world counts every distinct element once (TP replicas on TP rank 0, DP replicas on the
  // owner of their shard).
  double owned_sum_squares() const;
  // AdamW step `step` (from 1) on the owned elements after scaling their gradients by
  // `clip_coef`; all-gathers under ZeRO-1 and 2 (ZeRO-3 keeps the shards). Weight decay only on
  // entries marked `decay`.
  void step(const tensor::AdamWConfig& config, std::int64_t step, float clip_coef);
  void zero_grad();

  // Owned range of the flat buffers, [lo, hi) (under ZeRO-2: of the owned gradients).
  std::int64_t owned_lo() const { return lo_; }
  std::int64_t owned_hi() const { return hi_; }
  tensor::FlatStorage& moment1() { return m_; }
  tensor::FlatStorage& moment2() { return v_; }
  // True when the moments are in host memory and the update runs there.
  bool host_update() const { return host_backend_ != nullptr; }

 private:
  void build_segments();
  void step_sharded(const tensor::AdamWConfig& config, std::int64_t step, float clip_coef);
  // AdamW over `count` owned elements: params and grads in the parameters' storage, the moments
  // from their start; on the host (through copies) under optimizer offload.
  void update(float* params, const float* grads, std::int64_t count,
              const tensor::AdamWConfig& config, std::int64_t step, float clip_coef);

  model::ParameterSet* params_;
  comm::Communicator* comm_;
  comm::ProcessGroup group_;
  int tp_rank_;
  bool zero1_;                      // the optimizer state is sharded (ZeRO 1 and 2)
  bool sharded_gradients_;          // ZeRO-2
  std::vector<char> unit_reduced_;  // layered reduction: per unit, reduced this iteration
  std::vector<char> unit_held_;     // ZeRO-2 and 3 under layered reduction: per unit, held
  std::vector<int> reduced_held_;   // held units handed to an R op and not yet closed
  int sparse_unit_ = -1;            // EmbRace: the table reduced by its touched rows
  std::int64_t sparse_width_ = 0;
  SparseRowsExchange last_sparse_;
  SparseRowsExchange iteration_sparse_;  // ZeRO-2 and 3: this iteration's ops so far
  void reduce_sparse_unit(std::span<const std::int32_t> touched);
  void reduce_scatter_around_sparse_unit(std::span<const std::int32_t> touched);
  tensor::Backend* backend_;
  std::unique_ptr<tensor::Backend> host_backend_;  // optimizer offload: the host's AdamW
  std::int64_t lo_ = 0, hi_ = 0;
  tensor::FlatStorage m_, v_;  // (hi - lo) OptimizerState
  // Of the owned range, relative to lo: what AdamW updates (by weight decay) and what the norm
  // counts (TP replicas on TP rank 0 only), each in as few segments as the layout allows.
  std::vector<tensor::AdamWSegment> adamw_segments_;
  std::vector<tensor::FlatSegment> norm_segments_;
};

}  // namespace pipetune::runtime
