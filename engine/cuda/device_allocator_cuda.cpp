#include "engine/cuda/device_allocator_cuda.hpp"

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_kernels.hpp"

#include <stdexcept>
#include <string>

namespace pipetune::cuda {

CudaDeviceAllocator::CudaDeviceAllocator(int device, cudaStream_t stream)
    : device_(device), stream_(stream), name_("cuda:" + std::to_string(device)) {}

CudaDeviceAllocator::~CudaDeviceAllocator() {
  // Errors cannot be reported from here; a lost device shows at the next checked call.
  cudaSetDevice(device_);
  for (cudaStream_t s : {offload_stream_, reload_stream_})
    if (s != nullptr) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
}

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

namespace {

// An event recorded on `stream`, owned by the fence (released once it completes).
tensor::DeviceAllocator::Fence event_fence(cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  PIPETUNE_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  tensor::DeviceAllocator::Fence fence(static_cast<const void*>(event), [](const void* e) {
    cudaEventDestroy(static_cast<cudaEvent_t>(const_cast<void*>(e)));
  });
  PIPETUNE_CUDA_CHECK(cudaEventRecord(event, stream));
  return fence;
}

cudaEvent_t event_of(const tensor::DeviceAllocator::Fence& fence) {
  return static_cast<cudaEvent_t>(const_cast<void*>(fence.get()));
}

}  // namespace

tensor::DeviceAllocator::Fence CudaDeviceAllocator::record_fence() {
  return event_fence(stream_);
}

void CudaDeviceAllocator::wait_for(const Fence& fence) {
  if (fence) PIPETUNE_CUDA_CHECK(cudaStreamWaitEvent(stream_, event_of(fence), 0));
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

void* CudaDeviceAllocator::allocate_host_tier(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  PIPETUNE_CUDA_CHECK(cudaSetDevice(device_));
  void* block = nullptr;
  PIPETUNE_CUDA_CHECK(cudaHostAlloc(&block, bytes, cudaHostAllocDefault));
  return block;
}

void CudaDeviceAllocator::free_host_tier(void* block, std::size_t /*bytes*/) noexcept {
  if (block != nullptr) cudaFreeHost(block);
}

tensor::DeviceAllocator::Fence CudaDeviceAllocator::copy_beside(cudaStream_t& copy_stream,
                                                                void* dst, const void* src,
                                                                std::size_t bytes,
                                                                cudaMemcpyKind kind) {
  PIPETUNE_CUDA_CHECK(cudaSetDevice(device_));
  if (copy_stream == nullptr)
    PIPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
  // After the rank's stream's work so far: the kernels that wrote an offload's source, and the
  // last uses of a reload's (recycled) destination block.
  const Fence issued = event_fence(stream_);
  PIPETUNE_CUDA_CHECK(cudaStreamWaitEvent(copy_stream, event_of(issued), 0));
  if (bytes > 0) PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream));
  return event_fence(copy_stream);
}

tensor::DeviceAllocator::Fence CudaDeviceAllocator::offload_to_host(void* host, const void* device,
                                                                    std::size_t bytes) {
  return copy_beside(offload_stream_, host, device, bytes, cudaMemcpyDeviceToHost);
}

tensor::DeviceAllocator::Fence CudaDeviceAllocator::reload_from_host(void* device, const void* host,
                                                                     std::size_t bytes) {
  return copy_beside(reload_stream_, device, host, bytes, cudaMemcpyHostToDevice);
}

bool CudaDeviceAllocator::fence_done(const Fence& fence) {
  if (!fence) return true;
  const cudaError_t state = cudaEventQuery(event_of(fence));
  if (state == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it so the next checked call does not see it
    return false;
  }
  PIPETUNE_CUDA_CHECK(state);
  return true;
}

void CudaDeviceAllocator::wait_host(const Fence& fence) {
  if (fence) PIPETUNE_CUDA_CHECK(cudaEventSynchronize(event_of(fence)));
}

std::int64_t device_used_bytes(int device) {
  PIPETUNE_CUDA_CHECK(cudaSetDevice(device));
  std::size_t free_bytes = 0, total_bytes = 0;
  PIPETUNE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<std::int64_t>(total_bytes) - static_cast<std::int64_t>(free_bytes);
}

}  // namespace pipetune::cuda
