// What the checkpoint tests share: a scratch directory per test, whole-file reads and writes, and
// the check that a call throws a one-line InputError naming what is wrong.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "engine/errors.hpp"

namespace pipetune::checkpoint::test_support {

namespace fs = std::filesystem;

// A scratch directory per test (and process: two builds may run the suite at once).
class ScratchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("pipetune_ckpt_" + std::string(info->test_suite_name()) +
                                        "_" + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    for (const fs::path& p : {dir_, dir_ / "ro"})
      fs::permissions(p, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  // Names in dir_ (or `in`), sorted: what a failed write must not add to.
  std::vector<std::string> entries(const fs::path& in = {}) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(in.empty() ? dir_ : in))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

inline std::vector<char> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs `f`, which must throw InputError whose message holds every fragment.
inline void expect_input_error(const std::function<void()>& f,
                               const std::vector<std::string>& fragments,
                               const std::string& context = "") {
  try {
    f();
    ADD_FAILURE() << context << ": expected an InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
    for (const std::string& fragment : fragments)
      EXPECT_NE(what.find(fragment), std::string::npos)
          << context << ": '" << fragment << "' not in: " << what;
  }
}

}  // namespace pipetune::checkpoint::test_support
