#include "engine/cuda/device_allocator_cuda.hpp"

#include "engine/cuda/cuda_check.hpp"

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

std::int64_t device_used_bytes(int device) {
  PIPETUNE_CUDA_CHECK(cudaSetDevice(device));
  std::size_t free_bytes = 0, total_bytes = 0;
  PIPETUNE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<std::int64_t>(total_bytes) - static_cast<std::int64_t>(free_bytes);
}

}  // namespace pipetune::cuda
