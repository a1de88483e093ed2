#include "engine/cuda/device_allocator_cuda.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_kernels.hpp"

#include <stdexcept>
#include <string>

namespace pipetune::cuda {

CudaDeviceAllocator::CudaDeviceAllocator(int device, cudaStream_t stream)
    : device_(device), stream_(stream), name_("cuda:" + std::to_string(device)) {}

void* CudaDeviceAllocator::do_allocate(std::size_t bytes) {
  PIPETUNE_CUDA_CHECK(cudaSetDevice(device_));
  void* block = nullptr;
  PIPETUNE_CUDA_CHECK(cudaMalloc(&block, bytes));
  return block;
}

void CudaDeviceAllocator::do_deallocate(void* block, std::size_t /*bytes*/) noexcept {
  // cudaFree waits for the device's work on the block; an error here (a lost device) cannot be
  // reported from a destructor path, and the next checked call will name it.
  cudaSetDevice(device_);
  cudaFree(block);
}

void CudaDeviceAllocator::copy_to_host(void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
  PIPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaDeviceAllocator::copy_from_host(void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
  PIPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host bytes may be reused after
}

void CudaDeviceAllocator::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaDeviceAllocator::fill_zero(void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  PIPETUNE_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
}

void CudaDeviceAllocator::synchronize() {
  PIPETUNE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

tensor::DeviceAllocator::Fence CudaDeviceAllocator::record_fence() {
  cudaEvent_t event = nullptr;
  PIPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  // Owned by the fence: destroyed when the last holder lets go (a pending event may be
  // destroyed: CUDA releases it once it completes).
  Fence fence(static_cast<const void*>(event), [](const void* e) {
    cudaEventDestroy(static_cast<cudaEvent_t>(const_cast<void*>(e)));
  });
  PIPETUNE_CUDA_CHECK(cudaEventRecord(event, stream_));
  return fence;
}

void CudaDeviceAllocator::wait_for(const Fence& fence) {
  if (!fence) return;
  auto event = static_cast<cudaEvent_t>(const_cast<void*>(fence.get()));
  PIPETUNE_CUDA_CHECK(cudaStreamWaitEvent(stream_, event, 0));
}

void CudaDeviceAllocator::copy_from_peer(void* dst, tensor::DeviceAllocator& peer, const void* src,
                                         std::size_t bytes) {
  if (!peer.on_device())
    throw std::logic_error("cuda storage cannot copy from '" + std::string(peer.name()) +
                           "' as a peer");
  if (bytes == 0 || dst == src) return;
  PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaDeviceAllocator::combine_from_peer(float* dst, tensor::DeviceAllocator& peer,
                                            const float* src, std::size_t count,
                                            comm::ReduceOp op) {
  if (!peer.on_device())
    throw std::logic_error("cuda storage cannot combine from '" + std::string(peer.name()) +
                           "' as a peer");
  if (count == 0) return;
  const auto n = static_cast<std::int64_t>(count);
  if (op == comm::ReduceOp::sum)
    kernels::accumulate(stream_, dst, src, n);
  else
    kernels::maximum(stream_, dst, src, n);
}

std::int64_t device_used_bytes(int device) {
  PIPETUNE_CUDA_CHECK(cudaSetDevice(device));
  std::size_t free_bytes = 0, total_bytes = 0;
  PIPETUNE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<std::int64_t>(total_bytes) - static_cast<std::int64_t>(free_bytes);
}

}  // namespace pipetune::cuda
