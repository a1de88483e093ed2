// Bytes for a rank's kernel records between the processes of one run (ranks as processes on
// GPUs: each step's records travel to rank 0's process with the step's trace part), in the
// format of byte_codec.hpp. decode_kernels throws std::runtime_error for truncated or foreign
// bytes.
#pragma once

#include <string>
#include <vector>

#include "profiler/gpu/kernel_record.hpp"

namespace pipetune::profiler {

std::string encode_kernels(const std::vector<KernelRecord>& kernels);
std::vector<KernelRecord> decode_kernels(const std::string& bytes);

}  // namespace pipetune::profiler
