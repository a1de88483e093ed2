#include "engine/tensor/check.hpp"

#include <string_view>

#include "engine/errors.hpp"

namespace pipetune::tensor::detail {

void throw_shape_error(const char* op, const std::string& what, const char* file, int line) {
  std::string_view f(file);
  const auto slash = f.rfind('/');
  if (slash != std::string_view::npos) f.remove_prefix(slash + 1);
  throw InputError(std::string(op) + ": " + what + " [" + std::string(f) + ":" +
                   std::to_string(line) + "]");
}

}  // namespace pipetune::tensor::detail
