// The device storage of a GPU rank (tensor::DeviceAllocator on CUDA): blocks from cudaMalloc on
// the rank's device, copies and fills on the rank's stream (the CudaBackend's), so each copy is
// ordered after the kernels that wrote its source. copy_to_host and copy_from_host wait for the
// stream (the host bytes are ready / reusable when they return); copy and fill_zero do not.
// Every allocation is accounted by category (DeviceAllocator), so the rank's memory ledger and
// this allocator count real device bytes; device_used_bytes() gives cudaMemGetInfo's view of the
// whole device for a cross-check. Every call is checked (cuda_check.hpp: CudaError naming the
// call, file and line).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "engine/tensor/device_allocator.hpp"

namespace pipetune::cuda {

class CudaDeviceAllocator final : public tensor::DeviceAllocator {
 public:
  // `stream` belongs to the caller (the rank's backend) and must outlive the allocator's use.
  CudaDeviceAllocator(int device, cudaStream_t stream);
  ~CudaDeviceAllocator() override;

  tensor::StorageKind kind() const override { return tensor::StorageKind::device; }
  std::string_view name() const override { return name_; }
  std::size_t alignment() const override { return 256; }  // cudaMalloc's guarantee
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // The stream later copies, fills and fences go on: the backend's current one (CudaRankDevice
  // moves both to the second stream for the second op of an overlapped pair).
  void set_stream(cudaStream_t stream) { stream_ = stream; }

  void copy_to_host(void* host, const void* device, std::size_t bytes) override;
  void copy_from_host(void* device, const void* host, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void fill_zero(void* dst, std::size_t bytes) override;
  void synchronize() override;
  // A CUDA event recorded on the rank's stream; wait_for makes the stream wait for another
  // rank's event (cudaStreamWaitEvent: the host does not block). copy_from_peer copies device to
  // device on this rank's stream (any block of the device: one address space).
  Fence record_fence() override;
  void wait_for(const Fence& fence) override;
  void copy_from_peer(void* dst, tensor::DeviceAllocator& peer, const void* src,
                      std::size_t bytes) override;
  // A kernel on this rank's stream (kernels::accumulate, kernels::maximum).
  void combine_from_peer(float* dst, tensor::DeviceAllocator& peer, const float* src,
                         std::size_t count, comm::ReduceOp op) override;
  // The offload tier: pinned host blocks (cudaHostAlloc), and copies on two copy streams of the
  // device, one each way (a device has a copy engine per direction), made on first use. Each
  // copy first waits for an event of the rank's stream, so it sees every kernel issued before
  // it; its fence is an event of its copy stream.
  void* allocate_host_tier(std::size_t bytes) override;
  void free_host_tier(void* block, std::size_t bytes) noexcept override;
  Fence offload_to_host(void* host, const void* device, std::size_t bytes) override;
  Fence reload_from_host(void* device, const void* host, std::size_t bytes) override;
  bool fence_done(const Fence& fence) override;
  void wait_host(const Fence& fence) override;

 protected:
  void* do_allocate(std::size_t bytes) override;
  void do_deallocate(void* block, std::size_t bytes) noexcept override;

 private:
  // A copy on `copy_stream` (made on first use) after the rank's stream's work so far.
  Fence copy_beside(cudaStream_t& copy_stream, void* dst, const void* src, std::size_t bytes,
                    cudaMemcpyKind kind);

  int device_;
  cudaStream_t stream_;
  cudaStream_t offload_stream_ = nullptr, reload_stream_ = nullptr;
  std::string name_;
};

// Bytes in use on `device` as cudaMemGetInfo reports them (total - free): every context's
// allocations, the CUDA context itself, cuBLASLt workspaces. Throws CudaError.
std::int64_t device_used_bytes(int device);

}  // namespace pipetune::cuda
