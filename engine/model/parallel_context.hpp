// What a model piece needs to run on one rank: its backend and the collectives of its tensor- and
// expert-parallel groups. TP ranks of one stage run the same op list in lockstep, and so do the
// EP ranks of one stage, so these collectives are blocking calls that never wait on a pipeline
// dependency of their own group.
#pragma once

#include <span>

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
  int tp_rank = 0;
  int tp_size = 1;
  int ep_rank = 0;
  int ep_size = 1;
  profiler::RankRecorder* recorder = nullptr;  // spans of the collectives; may be null
  profiler::NameId all_to_all_name = 0;        // interned "all_to_all" on the recorder

  tensor::Backend& be() const { return *backend; }
  // Sum over the TP group (Megatron's g/f operators); nothing to do without TP.
  void tp_all_reduce(tensor::TensorView t, comm::ReduceOp op = comm::ReduceOp::sum) const {
    if (tp_size <= 1) return;
    profiler::ScopedSpan span(recorder, profiler::SpanKind::AllReduce, profiler::Stream::Comm);
    comm->all_reduce(tp_group, std::span<float>(t.data, static_cast<std::size_t>(t.numel())), op);
  }
  void ep_all_to_all(std::span<const float> input, std::span<float> output) const {
    profiler::ScopedSpan span(recorder, profiler::SpanKind::AllToAll, profiler::Stream::Comm, -1,
                              -1, -1, all_to_all_name);
    comm->all_to_all(ep_group, input, output);
  }
};

}  // namespace pipetune::model
