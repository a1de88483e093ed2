// cuBLASLt loaded at first use (engine/cuda/cublaslt_library.hpp), checked without a GPU: the
// library the headers name loads, its version's major is the headers', every function resolves
// (a status name comes back as the header spells it), and the pipetune binary does not link it
// (a command that never touches a GPU does not pay for its 500 MB at start-up; ldd's list).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "engine/cuda/cublaslt_library.hpp"

namespace pipetune::cuda {
namespace {

TEST(CublasLtLibrary, LoadsTheHeadersMajorVersionAndResolvesEveryFunction) {
  EXPECT_EQ(cublaslt_soname(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
  const CublasLtLibrary& lib = cublaslt();
  EXPECT_EQ(static_cast<int>(lib.GetVersion() / 10000), CUBLAS_VER_MAJOR);
  EXPECT_STREQ(lib.GetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_EQ(&cublaslt(), &lib);  // resolved once
  for (const void* fn :
       {reinterpret_cast<const void*>(lib.Create), reinterpret_cast<const void*>(lib.Destroy),
        reinterpret_cast<const void*>(lib.Matmul),
        reinterpret_cast<const void*>(lib.MatmulAlgoGetHeuristic),
        reinterpret_cast<const void*>(lib.MatmulDescCreate),
        reinterpret_cast<const void*>(lib.MatmulDescDestroy),
        reinterpret_cast<const void*>(lib.MatmulDescSetAttribute),
        reinterpret_cast<const void*>(lib.MatmulPreferenceCreate),
        reinterpret_cast<const void*>(lib.MatmulPreferenceDestroy),
        reinterpret_cast<const void*>(lib.MatmulPreferenceSetAttribute),
        reinterpret_cast<const void*>(lib.MatrixLayoutCreate),
        reinterpret_cast<const void*>(lib.MatrixLayoutDestroy),
        reinterpret_cast<const void*>(lib.GetStatusString)})
    EXPECT_NE(fn, nullptr);
}

TEST(CublasLtLibrary, ThePipetuneBinaryLinksNoCudaLibrary) {
  const std::string command = std::string("ldd '") + PIPETUNE_BIN + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0;) out.append(buf, n);
  ASSERT_NE(out.find("libc.so"), std::string::npos) << out;  // ldd did list the libraries
  // Nor any CUDA library: the runtime is linked statically, CUPTI and NCCL are opened at first
  // use too (tests/cli/start_up_cli_test.cpp checks what a command loads).
  for (const char* lib : {"libcublasLt", "libcudart", "libcupti", "libnccl", "libcuda."})
    EXPECT_EQ(out.find(lib), std::string::npos) << lib << " in\n" << out;
}

}  // namespace
}  // namespace pipetune::cuda
