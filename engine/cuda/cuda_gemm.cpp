// The linear layers on cuBLASLt: y = x W^T + b, dx += dy W, dW += dy^T x (Megatron layout W (out,
// in), row-major tensors).
//
// cuBLASLt is column-major; a row-major (r, c) matrix is the column-major (c, r) matrix with
// leading dimension c, so each product is issued transposed (as llm.c does):
//   forward   y^T (OUT, N)  = op(w) x^T : A = w  (IN, OUT) transposed, B = x  (IN, N)
//   dx        dx^T (IN, N) += w dy^T    : A = w  (IN, OUT),            B = dy (OUT, N)
//             (or = with GradientWrite::overwrite: beta 0, so the old dx is never read)
//   dW        dw^T (IN, OUT) += x^T dy  : A = x  (IN, N),              B = dy (OUT, N) transposed
// Compute type CUBLAS_COMPUTE_32F (no TF32). With Precision::bf16 the A and B operands are bf16
// copies converted in scratch (round to nearest even), their rows padded to 16 bytes, or with
// Bf16Operands::in_gemm the fp32 operands themselves under CUBLAS_COMPUTE_32F_FAST_16BF (cuBLASLt
// rounds them to bf16); C stays
// fp32, so the accumulation, the outputs and the weights the optimizer updates are fp32. The bias
// is added in cuBLASLt's epilogue (CUBLASLT_EPILOGUE_BIAS; by a kernel after the product where
// the heuristic has no such algorithm), its gradient is a deterministic column sum
// (cuda_reduce.cu). The MLP's GELU joins the GEMMs the same way (GELU_AUX(_BIAS) forward, DGELU
// for the input gradient), with the element-wise kernels as the fallback.
//
// cuBLASLt's heuristic is asked once per GEMM signature (dims, leading dims, types, the operands'
// pointer alignment) and its choice cached; the workspace is the backend's. When it has no
// algorithm for the pointers' alignment, the GEMM runs on aligned copies (matmul_realigned).
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/cuda/cublaslt_library.hpp"
#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/launch_shapes.hpp"

namespace pipetune::cuda {

using tensor::ConstTensorView;
using tensor::TensorView;

namespace {

// RAII for the cuBLASLt descriptors of one call.
struct OpDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~OpDesc() {
    if (d != nullptr) cublaslt().MatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  ~Layout() {
    if (d != nullptr) cublaslt().MatrixLayoutDestroy(d);
  }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() {
    if (d != nullptr) cublaslt().MatmulPreferenceDestroy(d);
  }
};

int alignment(const void* p) {
  return pointer_alignment_bytes(reinterpret_cast<std::uintptr_t>(p));
}

// Sets `epilogue` on the descriptor with its inputs: the bias (fp32) where not null, the GELU
// input/output matrix `aux` (fp32, leading dimension ld) where not null. False where cuBLASLt
// refuses an attribute.
bool set_epilogue(cublasLtMatmulDesc_t d, cublasLtEpilogue_t epilogue, const float* bias,
                  const void* aux, std::int64_t ld) {
  const auto set = [&](cublasLtMatmulDescAttributes_t attribute, const void* value,
                       std::size_t bytes) {
    return cublaslt().MatmulDescSetAttribute(d, attribute, value, bytes) == CUBLAS_STATUS_SUCCESS;
  };
  const cudaDataType_t fp32 = CUDA_R_32F;
  bool ok = set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
  if (bias != nullptr)
    ok = ok && set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) &&
         set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &fp32, sizeof fp32);
  if (aux != nullptr)
    ok = ok && set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) &&
         set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld) &&
         set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &fp32, sizeof fp32);
  return ok;
}

}  // namespace

cudaDataType_t CudaBackend::gemm_type() const {
  return bf16_copies() ? CUDA_R_16BF : CUDA_R_32F;
}

cublasComputeType_t CudaBackend::gemm_compute() const {
  return options_.precision == Precision::bf16 && !bf16_copies() ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                                 : CUBLAS_COMPUTE_32F;
}

CudaBackend::Operand CudaBackend::gemm_operand(const float* data, std::int64_t rows,
                                               std::int64_t cols, int slot) {
  if (!bf16_copies()) return {data, cols};
  const std::int64_t ld = aligned_leading_dimension(cols, 2);
  void* copy = bf16_[slot].reserve(static_cast<std::size_t>(scratch_bytes(rows * ld * 2)), stream_);
  if (ld == cols)
    kernels::to_bf16(stream_, data, copy, rows * cols);
  else
    kernels::to_bf16_rows(stream_, data, rows, cols, copy, ld);
  return {copy, ld};
}

const void* CudaBackend::Gemm::gelu_aux() const {
  return gelu_pre_out != nullptr ? static_cast<const void*>(gelu_pre_out)
                                 : static_cast<const void*>(gelu_pre_in);
}

// D = op(A) op(B) + bias, the bias broadcast over D's columns (y^T's columns are tokens);
// GELU_AUX(_BIAS): D = gelu(that), aux = that; DGELU: D = gelu'(aux) * op(A) op(B).
cublasLtEpilogue_t CudaBackend::Gemm::epilogue() const {
  return gelu_pre_out != nullptr
             ? (bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
         : gelu_pre_in != nullptr ? CUBLASLT_EPILOGUE_DGELU
         : bias != nullptr        ? CUBLASLT_EPILOGUE_BIAS
                                  : CUBLASLT_EPILOGUE_DEFAULT;
}

void CudaBackend::matmul(const Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  const void* gelu_aux = g.gelu_aux();
  if ((g.bias != nullptr || gelu_aux != nullptr) && g.ldc != g.m)
    throw std::logic_error("CudaBackend::matmul: a bias or GELU needs ldc == m");
  if (g.gelu_pre_in != nullptr && g.beta != 0.0f)
    throw std::logic_error("CudaBackend::matmul: the GELU gradient needs beta 0");
  if (g.k == 0) {  // an empty sum: C = beta C (+ bias, GELU by kernels)
    matmul_empty_sum(g);
    return;
  }
  OpDesc op;
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatmulDescCreate(&op.d, g.compute, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  PIPETUNE_CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  PIPETUNE_CUBLAS_CHECK(
      cublaslt().MatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  // A cuBLASLt that refuses the epilogue's attributes gets the product and kernels instead.
  const cublasLtEpilogue_t epilogue = g.epilogue();
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      !set_epilogue(op.d, epilogue, g.bias, gelu_aux, g.ldc)) {
    matmul_unfused(g);
    return;
  }
  // Layouts of the stored matrices, before op(): A is (k, m) when transposed, else (m, k).
  Layout a, b, c;
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(
      &a.d, g.ab_type, static_cast<std::uint64_t>(g.trans_a ? g.k : g.m),
      static_cast<std::uint64_t>(g.trans_a ? g.m : g.k), g.lda));
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(
      &b.d, g.ab_type, static_cast<std::uint64_t>(g.trans_b ? g.n : g.k),
      static_cast<std::uint64_t>(g.trans_b ? g.k : g.n), g.ldb));
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(
      &c.d, CUDA_R_32F, static_cast<std::uint64_t>(g.m), static_cast<std::uint64_t>(g.n), g.ldc));

  const std::optional<cublasLtMatmulAlgo_t>& algo =
      gemm_algorithm(g, epilogue, op.d, a.d, b.d, c.d);
  if (!algo) {
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {  // no algorithm with that epilogue
      matmul_unfused(g);
      return;
    }
    if (!g.realigned) {
      matmul_realigned(g);  // no algorithm for these alignments: run on aligned copies
      return;
    }
    throw CudaError("cuBLASLt has no algorithm for the GEMM m=" + std::to_string(g.m) +
                    " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                    (g.ab_type == CUDA_R_16BF                    ? " (bf16 inputs)"
                     : g.compute == CUBLAS_COMPUTE_32F_FAST_16BF ? " (fp32 inputs, bf16 products)"
                                                                 : " (fp32)"));
  }
  const float alpha = 1.0f;
  PIPETUNE_CUBLAS_CHECK(cublaslt().Matmul(lt_, op.d, &alpha, g.a, a.d, g.b, b.d, &g.beta, g.c, c.d,
                                          g.c, c.d, &*algo, workspace_.get(), workspace_bytes_,
                                          stream_));
}

void CudaBackend::matmul_empty_sum(const Gemm& g) {
  if (g.bias != nullptr || g.gelu_aux() != nullptr) {
    matmul_unfused(g);
    return;
  }
  if (g.beta == 0.0f) {
    PIPETUNE_CUDA_CHECK(cudaMemset2DAsync(g.c, static_cast<std::size_t>(g.ldc) * sizeof(float), 0,
                                          static_cast<std::size_t>(g.m) * sizeof(float),
                                          static_cast<std::size_t>(g.n), stream_));
  }
}

const std::optional<cublasLtMatmulAlgo_t>& CudaBackend::gemm_algorithm(
    const Gemm& g, cublasLtEpilogue_t epilogue, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c) {
  const void* gelu_aux = g.gelu_aux();
  const int align_a = alignment(g.a), align_b = alignment(g.b), align_c = alignment(g.c);
  const GemmKey key{g.trans_a,
                    g.trans_b,
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldc,
                    static_cast<int>(g.ab_type),
                    static_cast<int>(g.compute),
                    align_a,
                    align_b,
                    align_c,
                    g.beta != 0.0f,
                    g.bias != nullptr ? alignment(g.bias) : 0,
                    static_cast<int>(epilogue),
                    gelu_aux != nullptr ? alignment(gelu_aux) : 0};
  auto found = algos_.find(key);
  if (found != algos_.end()) return found->second;
  Preference pref;
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&pref.d));
  const std::uint64_t ws = workspace_bytes_;
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  // Views into flat buffers can start anywhere: tell the heuristic what the pointers allow.
  const std::uint32_t aa = static_cast<std::uint32_t>(align_a);
  const std::uint32_t ab = static_cast<std::uint32_t>(align_b);
  const std::uint32_t ac = static_cast<std::uint32_t>(align_c);
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac));
  PIPETUNE_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(
      pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac));
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof result);
  int count = 0;
  PIPETUNE_CUBLAS_CHECK(
      cublaslt().MatmulAlgoGetHeuristic(lt_, op, a, b, c, c, pref.d, 1, &result, &count));
  return algos_.emplace(key, count > 0 ? std::optional(result.algo) : std::nullopt).first->second;
}

void CudaBackend::matmul_unfused(const Gemm& g) {
  Gemm plain = g;
  plain.bias = nullptr;
  plain.gelu_pre_out = nullptr;
  plain.gelu_pre_in = nullptr;
  const std::int64_t n = g.m * g.n;  // ldc == m: C is contiguous
  if (g.gelu_pre_out != nullptr) {   // the product and bias into pre (bias fused where it can be)
    plain.c = g.gelu_pre_out;
    plain.bias = g.bias;
    matmul(plain);
    kernels::gelu_forward(stream_, g.gelu_pre_out, g.c, n);
    return;
  }
  matmul(plain);
  if (g.bias != nullptr) kernels::add_row_vector(stream_, g.c, g.bias, g.n, g.m);
  if (g.gelu_pre_in != nullptr) kernels::gelu_backward(stream_, g.c, g.gelu_pre_in, g.c, n, true);
}

void CudaBackend::matmul_realigned(const Gemm& g) {
  const std::int64_t elem = g.ab_type == CUDA_R_16BF ? 2 : 4;
  // Bytes a column-major (rows, cols) matrix with leading dimension ld spans.
  auto span = [](std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t size) {
    return (ld * (cols - 1) + rows) * size;
  };
  const std::int64_t a_bytes = span(g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, elem);
  const std::int64_t b_bytes = span(g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, elem);
  const std::int64_t c_bytes = span(g.m, g.n, g.ldc, 4);
  auto* base = static_cast<char*>(
      realign_.reserve(static_cast<std::size_t>(scratch_bytes(a_bytes) + scratch_bytes(b_bytes) +
                                                scratch_bytes(c_bytes)),
                       stream_));
  char* a = base;
  char* b = a + scratch_bytes(a_bytes);
  char* c = b + scratch_bytes(b_bytes);
  const auto copy = [&](void* dst, const void* src, std::int64_t bytes) {
    PIPETUNE_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes),
                                        cudaMemcpyDeviceToDevice, stream_));
  };
  copy(a, g.a, a_bytes);
  copy(b, g.b, b_bytes);
  copy(c, g.c, c_bytes);  // always: beta may be 1, and the gaps between columns must survive
  Gemm h = g;
  h.a = a;
  h.b = b;
  h.c = reinterpret_cast<float*>(c);
  h.realigned = true;
  matmul(h);
  copy(g.c, c, c_bytes);
}

CudaBackend::Gemm CudaBackend::linear_forward_gemm(ConstTensorView x, ConstTensorView w,
                                                   ConstTensorView b, TensorView y) {
  const std::int64_t N = x.shape.rows(), IN = w.shape[1], OUT = w.shape[0];
  Gemm g;
  g.trans_a = true;  // y^T (OUT, N) = w^T' x^T
  g.m = OUT;
  g.n = N;
  g.k = IN;
  const Operand wa = gemm_operand(w.data, OUT, IN, 0), xb = gemm_operand(x.data, N, IN, 1);
  g.a = wa.data;
  g.lda = wa.ld;
  g.b = xb.data;
  g.ldb = xb.ld;
  g.c = y.data;
  g.ldc = OUT;
  g.beta = 0.0f;
  g.ab_type = gemm_type();
  g.compute = gemm_compute();
  g.bias = b.empty() ? nullptr : b.data;  // in the GEMM's epilogue: y is written once, not twice
  // An output whose rows are not 16-byte aligned (GPT-2's logits) is written in place: padded
  // scratch, computed 256 MiB at a time and copied out, kept cuBLASLt on the same pre-Hopper
  // kernels on an H200 and cost about 20 ms more a GPT-2 step at batch 64 (the odd M = 50257,
  // not the row stride, decides there).
  return g;
}

CudaBackend::Gemm CudaBackend::linear_backward_input_gemm(const Operand& dy, std::int64_t N,
                                                          ConstTensorView w, TensorView dx,
                                                          tensor::GradientWrite write) {
  const std::int64_t IN = w.shape[1], OUT = w.shape[0];
  Gemm g;  // dx^T (IN, N) += w (IN, OUT) dy^T (OUT, N)
  g.m = IN;
  g.n = N;
  g.k = OUT;
  const Operand wa = gemm_operand(w.data, OUT, IN, 0);
  g.a = wa.data;
  g.lda = wa.ld;
  g.b = dy.data;
  g.ldb = dy.ld;
  g.c = dx.data;
  g.ldc = IN;
  g.beta = write == tensor::GradientWrite::overwrite ? 0.0f : 1.0f;  // beta 0: C is not read
  g.ab_type = gemm_type();
  g.compute = gemm_compute();
  return g;
}

CudaBackend::Gemm CudaBackend::linear_backward_weight_gemm(const Operand& dy, std::int64_t N,
                                                           ConstTensorView x, TensorView dw) {
  const std::int64_t IN = dw.shape[1], OUT = dw.shape[0];
  Gemm g;  // dw^T (IN, OUT) += x^T (IN, N) dy (N, OUT)
  g.trans_b = true;
  g.m = IN;
  g.n = OUT;
  g.k = N;
  const Operand xa = gemm_operand(x.data, N, IN, 0);
  g.a = xa.data;
  g.lda = xa.ld;
  g.b = dy.data;
  g.ldb = dy.ld;
  g.c = dw.data;
  g.ldc = IN;
  g.beta = 1.0f;
  g.ab_type = gemm_type();
  g.compute = gemm_compute();
  return g;
}

void CudaBackend::bias_gradient(ConstTensorView dy, TensorView db) {
  const std::int64_t N = dy.shape.rows(), OUT = db.shape[0];
  const ColumnReduction r = column_reduction_shape(N, OUT);
  auto* partial =
      static_cast<float*>(scratch(static_cast<std::size_t>(r.scratch_floats) * sizeof(float)));
  kernels::column_sums(stream_, dy.data, N, OUT, partial, db.data);
}

void CudaBackend::do_linear_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                    TensorView y) {
  activate();
  matmul(linear_forward_gemm(x, w, b, y));
}

void CudaBackend::do_linear_backward_input(ConstTensorView dy, ConstTensorView w, TensorView dx,
                                           tensor::GradientWrite write) {
  activate();
  const std::int64_t N = dy.shape.rows(), OUT = w.shape[0];
  matmul(linear_backward_input_gemm(gemm_operand(dy.data, N, OUT, 1), N, w, dx, write));
}

// The MLP's first layer: y = gelu(x w^T + b) with pre = x w^T + b, one GEMM where cuBLASLt has
// the GELU_AUX epilogue: no pass reading pre to write y.
void CudaBackend::do_linear_gelu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                         TensorView pre, TensorView y) {
  if (!options_.gelu_epilogues) {
    Backend::do_linear_gelu_forward(x, w, b, pre, y);
    return;
  }
  activate();
  Gemm g = linear_forward_gemm(x, w, b, y);
  g.gelu_pre_out = pre.data;
  matmul(g);
}

// dpre = gelu'(pre) (dy w), one GEMM where cuBLASLt has the DGELU epilogue (gelu_epilogues): no
// pass reading the product back to scale it; else the GEMM, then the GELU gradient in place.
void CudaBackend::gelu_gradient_gemm(const Operand& dy, std::int64_t N, ConstTensorView w,
                                     ConstTensorView pre, TensorView dpre) {
  Gemm g = linear_backward_input_gemm(dy, N, w, dpre, tensor::GradientWrite::overwrite);
  if (options_.gelu_epilogues) g.gelu_pre_in = pre.data;
  matmul(g);
  if (!options_.gelu_epilogues)
    do_gelu_backward_input(dpre, pre, dpre, tensor::GradientWrite::overwrite);
}

void CudaBackend::do_linear_gelu_backward_input(ConstTensorView dy, ConstTensorView w,
                                                ConstTensorView pre, TensorView dpre) {
  activate();
  const std::int64_t N = dy.shape.rows(), OUT = w.shape[0];
  gelu_gradient_gemm(gemm_operand(dy.data, N, OUT, 1), N, w, pre, dpre);
}

void CudaBackend::do_linear_backward_weight(ConstTensorView dy, ConstTensorView x, TensorView dw,
                                            TensorView db) {
  activate();
  const std::int64_t N = dy.shape.rows(), OUT = dw.shape[0];
  matmul(linear_backward_weight_gemm(gemm_operand(dy.data, N, OUT, 1), N, x, dw));
  if (!db.empty()) bias_gradient(dy, db);
}

// Both GEMMs from one bf16 copy of dy (slot 1): the input gradient's w and then the weight
// gradient's x take slot 0 in turn, stream-ordered. The same products as the two ops apart.
void CudaBackend::do_linear_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                     TensorView dx, tensor::GradientWrite write, TensorView dw,
                                     TensorView db) {
  activate();
  const std::int64_t N = dy.shape.rows(), OUT = w.shape[0];
  const Operand dyb = gemm_operand(dy.data, N, OUT, 1);
  matmul(linear_backward_input_gemm(dyb, N, w, dx, write));
  matmul(linear_backward_weight_gemm(dyb, N, x, dw));
  if (!db.empty()) bias_gradient(dy, db);
}

// The MLP's second layer in a BW op: dpre as do_linear_gelu_backward_input makes it, and
// dw += dy^T x, from one bf16 copy of dy.
void CudaBackend::do_linear_gelu_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                          ConstTensorView pre, TensorView dpre, TensorView dw,
                                          TensorView db) {
  activate();
  const std::int64_t N = dy.shape.rows(), OUT = w.shape[0];
  const Operand dyb = gemm_operand(dy.data, N, OUT, 1);
  gelu_gradient_gemm(dyb, N, w, pre, dpre);
  matmul(linear_backward_weight_gemm(dyb, N, x, dw));
  if (!db.empty()) bias_gradient(dy, db);
}

}  // namespace pipetune::cuda
