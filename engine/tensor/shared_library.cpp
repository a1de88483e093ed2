#include "engine/tensor/shared_library.hpp"

#include <dlfcn.h>

namespace pipetune::tensor {

namespace {

std::string loader_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "no reason given";
}

}  // namespace

SharedLibrary::SharedLibrary(std::initializer_list<std::string> candidates) {
  std::string tried;
  for (const std::string& candidate : candidates) {
    if (candidate.empty()) continue;
    handle_ = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      name_ = candidate;
      return;
    }
    tried += (tried.empty() ? "" : "; ") + loader_error();
  }
  throw LibraryLoadError("cannot load " + (tried.empty() ? std::string("a library") : tried));
}

void* SharedLibrary::address(const char* symbol) const {
  dlerror();
  void* a = dlsym(handle_, symbol);
  if (a == nullptr)
    throw LibraryLoadError(name_ + " has no " + symbol + " (" + loader_error() + ")");
  return a;
}

}  // namespace pipetune::tensor
