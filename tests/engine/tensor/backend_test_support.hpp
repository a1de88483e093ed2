// Shared helpers for the tensor op tests: the list of backends every op test runs on (with each
// one's tolerance floors), seeded random tensors, central finite differences and a readable diff
// (llm.c check_tensor style: first values side by side plus the max difference).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/tensor/backend.hpp"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/tensor.hpp"
#ifdef PIPETUNE_HAVE_CUDA
#include "tests/engine/tensor/staged_cuda_backend.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#endif

namespace pipetune::tensor::testing {

// Floors under a test's own tolerances on a backend, by the kind of op: 0 on the CPU (the tests'
// tolerances and bit-for-bit identities are the CPU's); on the CUDA backend, its other rounding
// (fp32 intrinsics, fused multiply-adds) and other reduction orders (gpu_test_support.hpp).
struct Tolerances {
  double elementwise = 0.0;  // the same formula per element
  double reduction = 0.0;    // sums in another order: GEMMs, norms, softmax, attention
};

struct BackendCase {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
  Tolerances floors;
  // Why the backend cannot run on this machine, or empty; absent: it always can. The fixture
  // skips with the reason, so a backend the build has is always listed.
  std::function<std::string()> unusable_reason;
};

// The CPU backend, on one thread and on a pool of three (more threads than this machine may
// have cores, so parts really interleave; cpu_threads_test checks bit-identity).
inline std::vector<BackendCase> cpu_backends() {
  return {{"cpu", [] { return std::unique_ptr<Backend>(std::make_unique<CpuBackend>()); }, {}, {}},
          {"cpu_threads3",
           [] { return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(3)); },
           {},
           {}}};
}

// Every backend the op tests run on: the CPU's, and in a CUDA build the CUDA backend on the same
// host tensors (staged_cuda_backend.hpp), skipped with the runtime's reason without a device.
inline std::vector<BackendCase> all_backends() {
  std::vector<BackendCase> cases = cpu_backends();
#ifdef PIPETUNE_HAVE_CUDA
  cases.push_back({"cuda",
                   [] {
                     return std::unique_ptr<Backend>(
                         std::make_unique<cuda::testing::StagedCudaBackend>());
                   },
                   {cuda::testing::kFp32ElementwiseTol, cuda::testing::kFp32ReductionTol},
                   [] {
                     const std::string why = cuda::testing::gpu_unavailable_reason();
                     return why.empty() ? why : "no CUDA device usable (" + why + ")";
                   }});
#endif
  return cases;
}

// gtest prints the parameter of a failing test with this (instead of its bytes).
inline void PrintTo(const BackendCase& c, std::ostream* os) {
  *os << c.name;
}

inline std::string backend_case_name(const ::testing::TestParamInfo<BackendCase>& info) {
  return info.param.name;
}

inline Tensor random_tensor(Shape shape, std::mt19937& rng, float scale = 1.0f) {
  Tensor t(shape);
  std::normal_distribution<float> dist(0.0f, scale);
  for (float& v : t.values()) v = dist(rng);
  return t;
}

inline std::vector<std::int32_t> random_ids(std::size_t n, std::int32_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> dist(0, vocab - 1);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

// sum_i a[i] * r[i] in double: the scalar "loss" whose gradient w.r.t. a is r.
inline double dot(const Tensor& a, const Tensor& r) {
  double s = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a[i]) * r[i];
  return s;
}

// Central finite differences of `loss` w.r.t. every element of `input` (restored afterwards).
inline Tensor numeric_grad(const std::function<double()>& loss, Tensor& input, float eps = 1e-2f) {
  Tensor g(input.shape());
  for (std::int64_t i = 0; i < input.numel(); ++i) {
    const float saved = input[i];
    input[i] = saved + eps;
    const double up = loss();
    input[i] = saved - eps;
    const double down = loss();
    input[i] = saved;
    g[i] = static_cast<float>((up - down) / (2.0 * static_cast<double>(eps)));
  }
  return g;
}

// The largest magnitude in `values`: the scale of a tolerance floor for elements near zero.
inline double max_abs(const std::vector<float>& values) {
  double m = 0.0;
  for (float v : values) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// Element-wise |actual - expected| <= rtol * |expected| + atol. On failure: the first values side
// by side, the worst element and the max difference.
inline ::testing::AssertionResult all_close(const std::string& name,
                                            const std::vector<float>& actual,
                                            const std::vector<float>& expected, double rtol,
                                            double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << name << ": size " << actual.size() << " != expected size " << expected.size();
  }
  double max_diff = 0.0;
  std::size_t worst = 0, bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double d = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    const bool ok = d <= rtol * std::fabs(static_cast<double>(expected[i])) + atol;
    if (!ok) ++bad;
    if (d > max_diff || std::isnan(d)) {
      max_diff = d;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << name << ": " << bad << " of " << actual.size() << " values differ (rtol " << rtol
     << ", atol " << atol << ")\n        actual      expected\n";
  for (std::size_t i = 0; i < std::min<std::size_t>(5, actual.size()); ++i) {
    char line[96];
    std::snprintf(line, sizeof line, "  [%zu] %12.6g %12.6g\n", i, actual[i], expected[i]);
    os << line;
  }
  os << "  max diff " << max_diff << " at [" << worst << "]: " << actual[worst] << " vs "
     << expected[worst];
  return ::testing::AssertionFailure() << os.str();
}

// Gradient check: tolerance relative to each element plus a floor relative to the largest one.
inline ::testing::AssertionResult grad_close(const std::string& name, const Tensor& analytic,
                                             const Tensor& numeric, double rtol = 1e-2) {
  return all_close(name, analytic.values(), numeric.values(), rtol,
                   rtol * max_abs(numeric.values()) + 1e-5);
}

// all_close at a test's own (CPU) tolerances with a backend's floor under both: rtol at least
// `floor`, atol at least floor * max|expected| (elements that cancel to near zero). A floor of 0
// leaves the test's tolerances as they are, bit-exact ones included.
inline ::testing::AssertionResult all_close_floored(const std::string& name,
                                                    const std::vector<float>& actual,
                                                    const std::vector<float>& expected, double rtol,
                                                    double atol, double floor) {
  return all_close(name, actual, expected, std::max(rtol, floor),
                   std::max(atol, floor * max_abs(expected)));
}

// Fixture for tests parameterised over backends: `be()` is a fresh backend per test; a backend
// that cannot run here skips with its reason.
class BackendTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    if (GetParam().unusable_reason) {
      const std::string why = GetParam().unusable_reason();
      if (!why.empty()) GTEST_SKIP() << "backend " << GetParam().name << ": " << why;
    }
    set_blas_threads(1);  // the test is the owner of the context: one BLAS thread per rank
    backend_ = GetParam().make();
  }
  Backend& be() { return *backend_; }
  const Tolerances& floors() const { return GetParam().floors; }
  // Whether this backend keeps the CPU's identities bit for bit (the CPU's floors are 0).
  bool bit_exact() const { return floors().elementwise == 0.0 && floors().reduction == 0.0; }
  // all_close at the test's CPU tolerances, floored for this backend by the kind of op compared.
  ::testing::AssertionResult all_close_elementwise(const std::string& name,
                                                   const std::vector<float>& actual,
                                                   const std::vector<float>& expected,
                                                   double rtol = 0.0, double atol = 0.0) const {
    return all_close_floored(name, actual, expected, rtol, atol, floors().elementwise);
  }
  ::testing::AssertionResult all_close_reduction(const std::string& name,
                                                 const std::vector<float>& actual,
                                                 const std::vector<float>& expected,
                                                 double rtol = 0.0, double atol = 0.0) const {
    return all_close_floored(name, actual, expected, rtol, atol, floors().reduction);
  }
  std::mt19937 rng{1234};

 private:
  std::unique_ptr<Backend> backend_;
};

}  // namespace pipetune::tensor::testing
