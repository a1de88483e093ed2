// GPU ranks for the trainer (runtime::RankDevice): single-GPU mode runs every rank of a run as a
// thread of this process on one device ("ranks as streams of one device"), each with its own
// CudaBackend (its own non-blocking stream, cuBLASLt handle and scratch), its own device
// allocator on that stream, and a PeerCopyCommunicator over the rank's thread communicator:
// transfers and collectives of device spans are copies and reduction kernels between the ranks'
// streams, ordered by CUDA events (runtime/peer_copy_communicator.hpp); host spans and
// all-to-all go through a StagingCommunicator (device -> host -> thread communicator -> host ->
// device). Kernels of different ranks overlap on the device as their streams allow.
#pragma once

#include <memory>
#include <optional>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/device_allocator_cuda.hpp"
#include "engine/cuda/gpu_activity_hub.hpp"
#include "engine/runtime/peer_copy_communicator.hpp"
#include "engine/runtime/staging_communicator.hpp"
#include "engine/runtime/trainer.hpp"

namespace pipetune::cuda {

struct SingleGpuOptions {
  int device = 0;
  Precision precision = Precision::fp32;
  FlashVariant flash = FlashVariant::tiles;           // CudaBackend::Options::flash
  Bf16Operands bf16_operands = Bf16Operands::copies;  // CudaBackend::Options::bf16_operands
  bool gelu_epilogues = false;                        // CudaBackend::Options::gelu_epilogues
};

class CudaRankDevice final : public runtime::RankDevice {
 public:
  // Throws CudaError when the device is not usable. `activity`: the process's CUPTI capture the
  // run's ranks share (null: no capture). `peers`: the exchange of the run's ranks on this
  // device, whose point-to-point transfers then go device to device (null: staged through the
  // host).
  CudaRankDevice(comm::Communicator& comm, const SingleGpuOptions& options,
                 std::shared_ptr<GpuActivityHub> activity = nullptr,
                 runtime::PeerExchange* peers = nullptr);
  ~CudaRankDevice() override;

  tensor::Backend& backend() override { return backend_; }
  tensor::DeviceAllocator* storage() override { return &storage_; }
  comm::Communicator& communicator() override {
    return peers_ ? static_cast<comm::Communicator&>(*peers_) : comm_;
  }
  // Joins the process's CUPTI capture with this rank's stream; false (the run goes on with NVTX
  // ranges only, and says so on stderr once) when CUPTI cannot start.
  bool start_gpu_capture(std::chrono::steady_clock::time_point epoch) override;
  GpuActivity take_gpu_activity() override;
  // An overlapped pair's second op on the backend's second stream: it waits for an event of the
  // first stream recorded before the pair (so it runs beside the first op, after what came
  // before), and the first stream waits for the second's event after the pair, so what follows
  // comes after both. The storage's copies and fences move with it (the op's transfers).
  bool overlaps_pairs() const override { return true; }
  void begin_pair() override;
  void second_of_pair() override;
  void end_pair() override;
  CudaBackend& cuda_backend() { return backend_; }
  const CudaDeviceAllocator& allocator() const { return storage_; }
  const runtime::StagingCommunicator& staging() const { return comm_; }

 private:
  CudaBackend backend_;          // owns the stream
  CudaDeviceAllocator storage_;  // on the backend's stream
  runtime::StagingCommunicator comm_;
  std::optional<runtime::PeerCopyCommunicator> peers_;  // over comm_; goes before storage_
  std::shared_ptr<GpuActivityHub> activity_;
  bool joined_ = false;
  cudaEvent_t pair_fork_ = nullptr;  // on the first stream, before the pair
  cudaEvent_t pair_join_ = nullptr;  // on the second stream, after the pair's second op
};

// The trainer's factory for single-GPU mode: every rank on `options.device`, sharing one CUPTI
// capture (used when the run asks for GPU activity: TrainOptions::capture_gpu_activity) and one
// exchange for device-to-device transfers (engine/runtime/peer_copy_communicator.hpp).
runtime::RankDeviceFactory single_gpu_rank_devices(SingleGpuOptions options = {});

}  // namespace pipetune::cuda
