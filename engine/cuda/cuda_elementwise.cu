// Elementwise kernels: scale, add, accumulate, column fill, row-vector add, GELU (tanh
// approximation), AdamW and the fp32 -> bf16 conversion of GEMM inputs. Grid-stride loops over the
// flat range (elementwise_shape); each element is computed by one thread exactly as the CPU backend
// does, with expf instead of the CPU's exp_approx (agreement within a few ulp, not bit-identity).
#include <cuda_bf16.h>

#include "engine/cuda/bf16_pack.cuh"
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

namespace {

using device::global_thread;
using device::grid_threads;

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__global__ void scale_kernel(float* t, float factor, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) t[i] *= factor;
}

__global__ void add_kernel(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(float* dst, const float* src, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] += src[i];
}

__global__ void maximum_kernel(float* dst, const float* src, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float a = dst[i], b = src[i];
    if ((b > a || b != b) && a == a) dst[i] = b;  // x != x: x is NaN (no fast math here)
  }
}

// n = rows * width elements of the columns [col_lo, cols).
__global__ void fill_columns_kernel(float* t, std::int64_t n, std::int64_t width, std::int64_t cols,
                                    std::int64_t col_lo, float value) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    t[(i / width) * cols + col_lo + i % width] = value;
}

__global__ void add_row_vector_kernel(float* y, const float* v, std::int64_t n, std::int64_t cols) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) y[i] += v[i % cols];
}

// gelu(x) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), as the CPU backend.
__global__ void gelu_forward_kernel(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    y[i] = v / (1.0f + expf(-2.0f * u));
  }
}

// dx (+)= gelu'(x) dy; with overwrite, dx is not read.
__global__ void gelu_backward_kernel(const float* dy, const float* x, float* dx, std::int64_t n,
                                     bool overwrite) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    const float s = 1.0f / (1.0f + expf(-2.0f * u));
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    const float grad = s + 2.0f * v * s * (1.0f - s) * du;
    dx[i] = overwrite ? grad * dy[i] : dx[i] + grad * dy[i];
  }
}

// One element's AdamW update, g the gradient as the update reads it.
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, float beta1,
                                              float beta2, float lr, float eps, float weight_decay,
                                              float bc1, float bc2) {
  const float mi = beta1 * m + (1.0f - beta1) * g;
  const float vi = beta2 * v + (1.0f - beta2) * g * g;
  m = mi;
  v = vi;
  const float m_hat = mi / bc1;
  const float v_hat = vi / bc2;
  p -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
}

// The threads stride over [begin[0], end[count - 1]); an element between segments is skipped.
// Its segment: the last one beginning at or before it (binary search over at most 64).
__global__ void adamw_segments_kernel(float* params, const float* grads, float* m, float* v,
                                      AdamWSegmentTable table, float grad_scale, float beta1,
                                      float beta2, float lr, float eps, float weight_decay,
                                      float bc1, float bc2) {
  const std::int64_t lo = table.begin[0], hi = table.end[table.count - 1];
  for (std::int64_t i = lo + global_thread(); i < hi; i += grid_threads()) {
    int a = 0, b = table.count - 1;
    while (a < b) {
      const int mid = (a + b + 1) / 2;
      if (table.begin[mid] <= i)
        a = mid;
      else
        b = mid - 1;
    }
    if (i >= table.end[a]) continue;
    const float decay = (table.decay_bits >> a) & 1u ? weight_decay : 0.0f;
    adamw_element(params[i], grads[i] * grad_scale, m[i], v[i], beta1, beta2, lr, eps, decay, bc1,
                  bc2);
  }
}

__global__ void to_bf16_kernel(const float* src, __nv_bfloat16* dst, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    dst[i] = __float2bfloat16(src[i]);
}

// Four values a thread and step (bf16_pack.cuh). Why: the scalar kernel made the GEMM inputs'
// conversion 12% of a bf16 GPT-2 step on an H200, every operand of every GEMM being converted.
__global__ void to_bf16_x4_kernel(const Floats4* src, Bf16Bits4* dst, std::int64_t n4) {
  for (std::int64_t i = global_thread(); i < n4; i += grid_threads()) {
    dst[i] = bf16_x4(src[i], 1.0f);
  }
}

// dst (rows, dst_ld) = src (rows, cols), row-major; the columns past cols are left as they are.
__global__ void to_bf16_rows_kernel(const float* src, __nv_bfloat16* dst, std::int64_t rows,
                                    std::int64_t cols, std::int64_t dst_ld) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    dst[(i / cols) * dst_ld + i % cols] = __float2bfloat16(src[i]);
}

}  // namespace

void scale(cudaStream_t s, float* t, float factor, std::int64_t n) {
  PIPETUNE_LAUNCH(scale_kernel, elementwise_shape(n), s, t, factor, n);
}

void add(cudaStream_t s, const float* a, const float* b, float* out, std::int64_t n) {
  PIPETUNE_LAUNCH(add_kernel, elementwise_shape(n), s, a, b, out, n);
}

void accumulate(cudaStream_t s, float* dst, const float* src, std::int64_t n) {
  PIPETUNE_LAUNCH(accumulate_kernel, elementwise_shape(n), s, dst, src, n);
}

void maximum(cudaStream_t s, float* dst, const float* src, std::int64_t n) {
  PIPETUNE_LAUNCH(maximum_kernel, elementwise_shape(n), s, dst, src, n);
}

void fill_columns(cudaStream_t s, float* t, std::int64_t rows, std::int64_t cols,
                  std::int64_t col_lo, float value) {
  const std::int64_t width = cols - col_lo;
  if (width <= 0 || rows == 0) return;
  PIPETUNE_LAUNCH(fill_columns_kernel, elementwise_shape(rows * width), s, t, rows * width, width,
                  cols, col_lo, value);
}

void add_row_vector(cudaStream_t s, float* y, const float* v, std::int64_t rows,
                    std::int64_t cols) {
  if (cols == 0) return;
  PIPETUNE_LAUNCH(add_row_vector_kernel, elementwise_shape(rows * cols), s, y, v, rows * cols,
                  cols);
}

void gelu_forward(cudaStream_t s, const float* x, float* y, std::int64_t n) {
  PIPETUNE_LAUNCH(gelu_forward_kernel, elementwise_shape(n), s, x, y, n);
}

void gelu_backward(cudaStream_t s, const float* dy, const float* x, float* dx, std::int64_t n,
                   bool overwrite) {
  PIPETUNE_LAUNCH(gelu_backward_kernel, elementwise_shape(n), s, dy, x, dx, n, overwrite);
}

void adamw_segments(cudaStream_t s, float* params, const float* grads, float* m, float* v,
                    const AdamWSegmentTable& table, float grad_scale, float beta1, float beta2,
                    float lr, float eps, float weight_decay, float bc1, float bc2) {
  if (table.count <= 0) return;
  PIPETUNE_LAUNCH(adamw_segments_kernel,
                  elementwise_shape(table.end[table.count - 1] - table.begin[0]), s, params, grads,
                  m, v, table, grad_scale, beta1, beta2, lr, eps, weight_decay, bc1, bc2);
}

void to_bf16_rows(cudaStream_t s, const float* src, std::int64_t rows, std::int64_t cols, void* dst,
                  std::int64_t dst_ld) {
  PIPETUNE_LAUNCH(to_bf16_rows_kernel, elementwise_shape(rows * cols), s, src,
                  static_cast<__nv_bfloat16*>(dst), rows, cols, dst_ld);
}

void to_bf16(cudaStream_t s, const float* src, void* dst, std::int64_t n) {
  auto* out = static_cast<__nv_bfloat16*>(dst);
  const bool aligned =
      floats4_aligned(src) && reinterpret_cast<std::uintptr_t>(dst) % alignof(Bf16Bits4) == 0;
  const std::int64_t n4 = aligned ? n / 4 : 0;
  if (n4 > 0)
    PIPETUNE_LAUNCH(to_bf16_x4_kernel, elementwise_shape(n4), s,
                    reinterpret_cast<const Floats4*>(src), reinterpret_cast<Bf16Bits4*>(dst), n4);
  if (const std::int64_t rest = n - 4 * n4; rest > 0)
    PIPETUNE_LAUNCH(to_bf16_kernel, elementwise_shape(rest), s, src + 4 * n4, out + 4 * n4, rest);
}

}  // namespace pipetune::cuda::kernels
