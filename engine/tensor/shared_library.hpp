// A shared library a backend opens when it first needs it (dlopen), not when pipetune starts:
// OpenBLAS for the CPU backend, the CUDA runtime's companions (cuBLASLt, CUPTI, NCCL) for the
// GPU. Linked, every command paid for them at start-up, the ones that never train included:
// OpenBLAS starts its threads as it loads, and they spin for about 0.1 s of a core.
#pragma once

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace pipetune::tensor {

// A library that cannot be loaded, or lacks a function. The message names the file(s) tried
// and the loader's reason; the table that loads the library adds what needs it.
class LibraryLoadError : public std::runtime_error {
 public:
  explicit LibraryLoadError(const std::string& what) : std::runtime_error(what) {}
};

class SharedLibrary {
 public:
  // Opens the first of `candidates` the loader finds (a full path as configured, then the
  // soname, found as the loader finds any library). Never closed: the functions resolved from
  // it live as long as the process.
  SharedLibrary(std::initializer_list<std::string> candidates);

  // The file that was opened, as it was named.
  const std::string& name() const { return name_; }

  // Sets `fn` to the function `symbol`, or throws LibraryLoadError naming it.
  template <class Fn>
  void resolve(Fn& fn, const char* symbol) const {
    static_assert(std::is_pointer_v<Fn>);
    fn = reinterpret_cast<Fn>(address(symbol));
  }

 private:
  void* address(const char* symbol) const;

  std::string name_;
  void* handle_ = nullptr;
};

}  // namespace pipetune::tensor
