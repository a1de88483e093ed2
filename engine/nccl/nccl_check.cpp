#include "engine/nccl/nccl_check.hpp"

#include <string_view>

namespace pipetune::nccl::detail {

void throw_nccl_error(ncclResult_t result, ncclComm_t comm, const char* call, const char* file,
                      int line) {
  std::string_view f(file);
  const auto slash = f.rfind('/');
  if (slash != std::string_view::npos) f.remove_prefix(slash + 1);
  std::string message = std::string(call) + ": " + nccl_library().GetErrorString(result);
  const char* last = nccl_library().GetLastError(comm);
  if (last != nullptr && last[0] != '\0') message += " (" + std::string(last) + ")";
  message += " [" + std::string(f) + ":" + std::to_string(line) + "]";
  throw NcclError(-1, call, message);  // no single rank to blame
}

}  // namespace pipetune::nccl::detail
