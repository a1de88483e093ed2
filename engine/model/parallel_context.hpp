// What a model piece needs to run on one rank: its backend and the collectives of its tensor- and
// expert-parallel groups. TP ranks of one stage run the same op list in lockstep, and so do the
// EP ranks of one stage, so these collectives are blocking calls that never wait on a pipeline
// dependency of their own group.
#pragma once

#include <span>

#include "engine/comm/collective_stream.hpp"
#include "engine/comm/communicator.hpp"
#include "engine/comm/process_group.hpp"
#include "engine/tensor/backend.hpp"
#include "profiler/recorder/rank_recorder.hpp"

namespace pipetune::model {

struct ParallelContext {
  tensor::Backend* backend = nullptr;
  comm::Communicator* comm = nullptr;
  comm::ProcessGroup tp_group;
  comm::ProcessGroup ep_group;
  // A two-phase all-to-all (ParallelPlan::moe_a2a_node_ranks): the EP ranks of this rank's
  // node, and those at its place on every node; both empty for one flat all-to-all.
  comm::ProcessGroup ep_node_group;
  comm::ProcessGroup ep_cross_group;
  int tp_rank = 0;
  int tp_size = 1;
  int ep_rank = 0;
  int ep_size = 1;
  // Megatron's sequence parallelism (tp > 1): outside attention and the MLP, a block's rows
  // (LayerNorms, residuals, what stages send each other) are split over the TP group, each rank
  // holding a contiguous 1/tp of the micro-batch's B*T rows. All-gathers bring the rows together
  // before the column-parallel layers; reduce-scatters replace the all-reduces after the
  // row-parallel ones.
  bool sequence_parallel = false;
  profiler::RankRecorder* recorder = nullptr;  // spans of the collectives; may be null
  // The rank's collective stream (collective_stream.hpp), when it has one: the chunked MoE
  // all-to-all runs there, beside the experts' GEMMs. Null: every collective in place.
  comm::CollectiveStream* stream = nullptr;
  profiler::NameId all_to_all_name = 0;  // interned "all_to_all" on the recorder
  profiler::NameId recompute_name = 0;   // interned "recompute"

  tensor::Backend& be() const { return *backend; }
  // Sum over the TP group (Megatron's g/f operators); nothing to do without TP.
  void tp_all_reduce(tensor::TensorView t, comm::ReduceOp op = comm::ReduceOp::sum) const {
    if (tp_size <= 1) return;
    profiler::ScopedSpan span(recorder, profiler::SpanKind::AllReduce, profiler::Stream::Comm);
    comm->all_reduce(tp_group, std::span<float>(t.data, static_cast<std::size_t>(t.numel())), op);
  }
  // The rows this rank holds of a micro-batch's `rows`.
  std::int64_t local_rows(std::int64_t rows) const {
    return sequence_parallel ? rows / tp_size : rows;
  }
  // full (tp * n) <- every TP rank's local (n), in TP-rank order.
  void tp_all_gather(tensor::ConstTensorView local, tensor::TensorView full) const {
    profiler::ScopedSpan span(recorder, profiler::SpanKind::AllGather, profiler::Stream::Comm);
    comm->all_gather(tp_group,
                     std::span<const float>(local.data, static_cast<std::size_t>(local.numel())),
                     std::span<float>(full.data, static_cast<std::size_t>(full.numel())));
  }
  // local (n) <- this TP rank's chunk of the sum of every rank's partial (tp * n).
  void tp_reduce_scatter(tensor::ConstTensorView partial, tensor::TensorView local) const {
    profiler::ScopedSpan span(recorder, profiler::SpanKind::ReduceScatter, profiler::Stream::Comm);
    comm->reduce_scatter(
        tp_group, std::span<const float>(partial.data, static_cast<std::size_t>(partial.numel())),
        std::span<float>(local.data, static_cast<std::size_t>(local.numel())));
  }
  bool ep_two_phase() const { return !ep_node_group.ranks.empty(); }
  // The flat all-to-all of the EP group (moe_exchange.cpp runs the two-phase one).
  void ep_all_to_all(std::span<const float> input, std::span<float> output) const {
    profiler::ScopedSpan span(recorder, profiler::SpanKind::AllToAll, profiler::Stream::Comm, -1,
                              -1, -1, all_to_all_name);
    comm->all_to_all(ep_group, input, output);
  }
};

}  // namespace pipetune::model
