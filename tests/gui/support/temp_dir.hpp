// A fresh directory per test (mkdtemp), removed with everything in it when the test ends.
#pragma once

#include <unistd.h>

#include <QString>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace pipetune::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "pipetune_gui") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const char* name) const { return (path / name).string(); }
  QString qfile(const char* name) const { return QString::fromStdString(file(name)); }
};

}  // namespace pipetune::testing
