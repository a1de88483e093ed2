// Name rules shared by the importers: pipeline phases, NCCL kernels, memcpy kinds, rank names.
// Expected values come from the formats' sources: PiPPy's visualizer (F_{stage},{mb}),
// torch.distributed.pipelining (_get_profiler_function_name: "PP:" + str(action), actions F, I,
// B, W), Megatron-LM (nvtx_range_push default "<module>.<function>.<suffix>"), NCCL kernel names
// (ncclKernel_* before NCCL 2.19, ncclDevKernel_* after) and the nsys copyKind codes.
#include <gtest/gtest.h>

#include "db/import/pipeline_phase_names.hpp"
#include "db/import/rank_names.hpp"
#include "profiler/gpu/gpu_activity_names.hpp"

namespace pipetune::db {
namespace {

using profiler::SpanKind;

struct PhaseCase {
  const char* name;
  SpanKind kind;
  int microbatch;
  int stage;
};

TEST(PipelinePhaseNames, Recognised) {
  const PhaseCase cases[] = {
      {"F_0,3", SpanKind::F, 3, 0},
      {"B_2,1", SpanKind::BW, 1, 2},
      {"S_3,0", SpanKind::Barrier, 0, 3},
      {"F_12,105", SpanKind::F, 105, 12},
      {"PP:1F3", SpanKind::F, 3, 1},
      {"PP:0I2", SpanKind::B, 2, 0},
      {"PP:0W2", SpanKind::W, 2, 0},
      {"PP:3B0", SpanKind::BW, 0, 3},
      {"forward", SpanKind::F, -1, -1},
      {"Forward", SpanKind::F, -1, -1},
      {"backward", SpanKind::BW, -1, -1},
      {"forward-compute", SpanKind::F, -1, -1},
      {"backward-compute mb=2", SpanKind::BW, 2, -1},
      {"forward_step", SpanKind::F, -1, -1},
      {"forward_3", SpanKind::F, 3, -1},
      {"Forward pass 3", SpanKind::F, 3, -1},
      {"backward microbatch 7", SpanKind::BW, 7, -1},
      {"fwd 1", SpanKind::F, 1, -1},
      {"bwd_mb_4", SpanKind::BW, 4, -1},
      {"megatron.core.pipeline_parallel.schedules.forward_step", SpanKind::F, -1, -1},
      {"megatron.core.pipeline_parallel.schedules.backward_step", SpanKind::BW, -1, -1},
      {"my.module.forward_2", SpanKind::F, 2, -1},
  };
  for (const auto& c : cases) {
    const auto p = match_pipeline_phase(c.name);
    ASSERT_TRUE(p.has_value()) << c.name;
    EXPECT_EQ(p->kind, c.kind) << c.name;
    EXPECT_EQ(p->microbatch, c.microbatch) << c.name;
    EXPECT_EQ(p->stage, c.stage) << c.name;
  }
}

TEST(PipelinePhaseNames, NotPhases) {
  for (const char* name :
       {"megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_"
        "interleaving.warmup",
        "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_"
        "interleaving.steady",
        "forward-backward",
        "FSDP::post_forward (blocks.2._checkpoint_wrapped_module)",
        "flash_attn::_flash_attn_forward",
        "model.layers.3.mlp.forward",
        "forwards",
        "forward mb",
        "F_0",
        "F_0,",
        "F_a,1",
        "X_0,1",
        "PP:1F",
        "PP:1UNSHARD",
        "PP:F3",
        "aten::addmm",
        "saxpy",
        "ProfilerStep#551",
        "",
        "forward_3x"}) {
    EXPECT_FALSE(match_pipeline_phase(name).has_value()) << "'" << name << "'";
  }
}

// DeepSpeed's pipeline engine, as PyTorch's profiler records its Python calls (with_stack).
TEST(PipelinePhaseNames, DeepSpeedPipelineEnginePasses) {
  auto p = match_python_function_phase("deepspeed/runtime/pipe/engine.py(712): _exec_forward_pass");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->kind, profiler::SpanKind::F);
  EXPECT_EQ(p->microbatch, -1);
  p = match_python_function_phase("PipelineEngine._exec_backward_pass");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->kind, profiler::SpanKind::BW);
  for (const char* name : {"torch/nn/modules/module.py(1501): _call_impl", "model.py(40): forward",
                           "_exec_forward_pass_helper"})
    EXPECT_FALSE(match_python_function_phase(name).has_value()) << name;
}

TEST(NcclKernelNames, Collectives) {
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_SendRecv"),
            profiler::NcclKernel::SendRecv);
  EXPECT_EQ(
      profiler::classify_nccl_kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)"),
      profiler::NcclKernel::SendRecv);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"),
            profiler::NcclKernel::SendRecv);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            profiler::NcclKernel::AllReduce);
  EXPECT_EQ(
      profiler::classify_nccl_kernel("void ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)"),
      profiler::NcclKernel::AllGather);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"),
            profiler::NcclKernel::ReduceScatter);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_Reduce_Sum_f32_RING_LL"),
            profiler::NcclKernel::Reduce);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_Broadcast_RING_LL"),
            profiler::NcclKernel::Broadcast);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclKernel_AllToAll_RING"),
            profiler::NcclKernel::AllToAll);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_Send_RING"), profiler::NcclKernel::Send);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_Recv_RING"), profiler::NcclKernel::Recv);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_Generic_4"),
            profiler::NcclKernel::Unknown);
  EXPECT_EQ(profiler::classify_nccl_kernel("ncclDevKernel_SendRecvX"),
            profiler::NcclKernel::Unknown);
  EXPECT_FALSE(profiler::classify_nccl_kernel("flash_fwd_kernel").has_value());
  EXPECT_FALSE(profiler::classify_nccl_kernel("nccl:all_to_all").has_value());
  EXPECT_FALSE(profiler::classify_nccl_kernel("my_ncclKernel_AllReduce").has_value());
}

TEST(MemcpyKinds, CodesAndEnumNames) {
  EXPECT_EQ(profiler::memcpy_kind_label(0), "unknown");
  EXPECT_EQ(profiler::memcpy_kind_label(1), "HtoD");
  EXPECT_EQ(profiler::memcpy_kind_label(2), "DtoH");
  EXPECT_EQ(profiler::memcpy_kind_label(8), "DtoD");
  EXPECT_EQ(profiler::memcpy_kind_label(10), "PtoP");
  EXPECT_EQ(profiler::memcpy_kind_label(13), "UVM DtoD");
  EXPECT_EQ(profiler::memcpy_kind_label(14), "unknown");
  EXPECT_EQ(profiler::memcpy_kind_label(-1), "unknown");
  EXPECT_EQ(profiler::memcpy_kind_label_from_enum_name("CUDA_MEMCPY_KIND_DTOD"), "DtoD");
  EXPECT_EQ(profiler::memcpy_kind_label_from_enum_name("CUDA_MEMCPY_KIND_UVM_HTOD"), "UVM HtoD");
  EXPECT_EQ(profiler::memcpy_kind_label_from_enum_name("CUDA_MEMCPY_KIND_UNKNOWN"), "unknown");
  EXPECT_EQ(profiler::memcpy_kind_label_from_enum_name("CUDA_MEMCPY_KIND_SIDEWAYS"), "");
  EXPECT_EQ(profiler::memcpy_kind_label_from_enum_name("DTOD"), "");
}

TEST(RankNames, FromThreadAndProcessNames) {
  EXPECT_EQ(rank_from_name("MPI Rank 0"), 0);
  EXPECT_EQ(rank_from_name("MPI Rank 17"), 17);
  EXPECT_EQ(rank_from_name("rank 3"), 3);
  EXPECT_EQ(rank_from_name("rank_12 worker"), 12);
  EXPECT_EQ(rank_from_name("Rank#4"), 4);
  EXPECT_EQ(rank_from_name("RANK=5"), 5);
  EXPECT_FALSE(rank_from_name("cranky 3").has_value());
  EXPECT_FALSE(rank_from_name("rank").has_value());
  EXPECT_FALSE(rank_from_name("rank x").has_value());
  EXPECT_FALSE(rank_from_name("rank 3rd").has_value());
  EXPECT_FALSE(rank_from_name("rank 99999999999").has_value());
  EXPECT_FALSE(rank_from_name("python3").has_value());
}

}  // namespace
}  // namespace pipetune::db
