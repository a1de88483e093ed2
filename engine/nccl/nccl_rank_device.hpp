// GPU ranks as processes (mpirun / srun, one rank per process): each process trains its rank on
// its own GPU (nccl::process_device: its rank among the node's processes), with a CudaBackend on
// its own stream, a device allocator on that stream, and the NCCL communicator (unique ids over
// the MPI bootstrap) for its transfers and collectives, ordered after the rank's stream. NCCL
// takes device spans only, so the few host spans of a step (its loss totals) are staged through
// the rank's storage (runtime::StagingCommunicator, Side::device). GPU activity is captured with
// CUPTI like single-GPU mode's, every record the process's one rank's (NCCL's kernels run on its
// streams).
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/device_allocator_cuda.hpp"
#include "engine/cuda/gpu_activity_hub.hpp"
#include "engine/nccl/nccl_communicator.hpp"
#include "engine/runtime/staging_communicator.hpp"
#include "engine/runtime/trainer.hpp"

namespace pipetune::nccl {

struct NcclRankOptions {
  std::vector<comm::ProcessGroup> groups;  // every group of the plan's topology
  cuda::Precision precision = cuda::Precision::fp32;
  double watchdog_seconds = 300.0;                                // NcclOptions::timeout_seconds
  cuda::FlashVariant flash = cuda::FlashVariant::tiles;           // CudaBackend::Options::flash
  cuda::Bf16Operands bf16_operands = cuda::Bf16Operands::copies;  // CudaBackend::Options
  bool gelu_epilogues = false;                                    // CudaBackend::Options
  mpi::MpiFailureNotice* failure_notice = nullptr;                // NcclOptions::failure_notice
};

class NcclRankDevice final : public runtime::RankDevice {
 public:
  // Collective over MPI_COMM_WORLD (every process makes its one device at the same point).
  // Throws cuda::CudaError when no device fits, NcclError when NCCL fails.
  explicit NcclRankDevice(const NcclRankOptions& options);
  ~NcclRankDevice() override;

  tensor::Backend& backend() override { return backend_; }
  tensor::DeviceAllocator* storage() override { return &storage_; }
  comm::Communicator& communicator() override { return *spans_; }
  bool start_gpu_capture(std::chrono::steady_clock::time_point epoch) override;
  GpuActivity take_gpu_activity() override;
  int device() const { return device_; }

 private:
  int device_;
  cuda::CudaBackend backend_;          // owns the stream
  cuda::CudaDeviceAllocator storage_;  // on the backend's stream
  std::optional<NcclCommunicator> nccl_;
  std::optional<runtime::StagingCommunicator> spans_;  // over nccl_
  cuda::GpuActivityHub activity_{/*one_rank_per_process=*/true};
  bool joined_ = false;
};

// The trainer's factory for ranks as processes on GPUs: the process's one rank on its GPU. The
// communicator the trainer passes (MPI, used for start-up and gathers) must be that rank's.
runtime::RankDeviceFactory nccl_rank_devices(NcclRankOptions options);

}  // namespace pipetune::nccl
