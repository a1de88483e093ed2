// What the fuzz targets share: what counts as a clean refusal, and a scratch file that holds an
// input for the code paths that read files (workspaces, nsys exports, Chrome traces).
//
// A clean refusal is what the CLI turns into exit 2 (cli/main.cpp): an InputError (SpecError,
// ScheduleError, DeadlockError, sqlite BadFileError...) or an analysis's AnalysisError. Anything
// else that escapes (std::bad_alloc, std::out_of_range, sqlite::Error, a json exception) is
// printed with its type and aborts, so libFuzzer records the input as a crash.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>

#include "engine/errors.hpp"
#include "profiler/analysis/analysis_error.hpp"

namespace pipetune::fuzz {

template <class Fn>
void refusals_are_clean(Fn&& fn) {
  try {
    fn();
  } catch (const InputError&) {
  } catch (const profiler::analysis::AnalysisError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: escaped %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
}

// A path of this process for scratch files: under /dev/shm when there is one (no disk I/O per
// input), named after the pid and `suffix`.
inline std::filesystem::path scratch_path(std::string_view suffix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir =
      fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  return dir / ("pipetune_fuzz_" + std::to_string(::getpid()) + std::string(suffix));
}

// A file of this process (scratch_path) holding the input bytes; it and SQLite's side files (-wal,
// -shm, -journal) are removed before writing and on destruction, so no input sees what the previous
// one left.
class ScratchFile {
 public:
  ScratchFile(std::string_view suffix, const std::uint8_t* data, std::size_t size)
      : path_(scratch_path(suffix)) {
    remove_all();
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", path_.c_str());
      std::abort();
    }
  }
  ~ScratchFile() { remove_all(); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  void remove_all() {
    std::error_code ec;
    for (const char* side : {"", "-wal", "-shm", "-journal"})
      std::filesystem::remove(path_.string() + side, ec);
  }
  std::filesystem::path path_;
};

// An empty folder of this process (scratch_path) for inputs that are several files (a checkpoint);
// emptied before each input and removed on destruction.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(std::string_view suffix) : path_(scratch_path(suffix)) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::remove_all(path_, ec);
    if (!fs::create_directory(path_, ec)) {
      std::fprintf(stderr, "fuzz: cannot create %s\n", path_.c_str());
      std::abort();
    }
  }
  ~ScratchDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes `bytes` to the file `name` in the folder; aborts when it cannot.
  void write(const std::string& name, std::string_view bytes) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", file.c_str());
      std::abort();
    }
  }

 private:
  std::filesystem::path path_;
};

}  // namespace pipetune::fuzz
