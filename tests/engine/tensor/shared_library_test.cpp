// SharedLibrary (engine/tensor/shared_library.hpp), against a library every machine has (zlib,
// which the engine links anyway): the first candidate the loader finds is opened, a function
// resolves to the one the linked library exports, and a missing file or function is named.
#include "engine/tensor/shared_library.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <string>

#include "engine/tensor/cpu/openblas_library.hpp"

namespace pipetune::tensor {
namespace {

TEST(SharedLibrary, OpensTheFirstCandidateFoundAndResolvesItsFunctions) {
  const SharedLibrary z({"/nonexistent/libz.so.1", "libz.so.1"});
  EXPECT_EQ(z.name(), "libz.so.1");
  decltype(&::zlibVersion) version = nullptr;
  z.resolve(version, "zlibVersion");
  ASSERT_NE(version, nullptr);
  EXPECT_STREQ(version(), ::zlibVersion());  // the same library the engine links
}

TEST(SharedLibrary, NamesAFileThatCannotBeLoaded) {
  try {
    const SharedLibrary missing({"", "/nonexistent/libpipetune_missing.so.7"});
    FAIL() << "loaded " << missing.name();
  } catch (const LibraryLoadError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load /nonexistent/libpipetune_missing.so.7"),
              std::string::npos)
        << e.what();
  }
}

TEST(SharedLibrary, NamesAFunctionTheLibraryLacks) {
  const SharedLibrary z({"libz.so.1"});
  void (*fn)() = nullptr;
  try {
    z.resolve(fn, "pipetune_no_such_function");
    FAIL() << "resolved a function zlib lacks";
  } catch (const LibraryLoadError& e) {
    EXPECT_NE(std::string(e.what()).find("libz.so.1 has no pipetune_no_such_function"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fn, nullptr);
}

// The CPU backend's table: every function resolves, once, and sgemm multiplies (a 2x2 product
// worked by hand).
TEST(OpenBlasLibrary, ResolvesOnceAndMultiplies) {
  const OpenBlasLibrary& lib = openblas();
  EXPECT_EQ(&openblas(), &lib);
  ASSERT_NE(lib.set_num_threads, nullptr);
  ASSERT_NE(lib.get_num_threads, nullptr);
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {};
  lib.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  EXPECT_EQ(c[0], 19.0f);
  EXPECT_EQ(c[1], 22.0f);
  EXPECT_EQ(c[2], 43.0f);
  EXPECT_EQ(c[3], 50.0f);
}

}  // namespace
}  // namespace pipetune::tensor
