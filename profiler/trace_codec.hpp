// A Trace as bytes and back, for shipping a rank's records between processes of one run (the
// MPI engine sends each step's part to rank 0, which writes the workspace). The processes of a
// run are one build on one kind of machine, so the format is the host's: fixed-size fields in
// native byte order behind a magic and a version, strings length-prefixed. Not a file format.
#pragma once

#include <string>

#include "profiler/trace.hpp"

namespace pipetune::profiler {

std::string encode_trace(const Trace& trace);
// Throws std::runtime_error for bytes that are not an encode_trace() result of this build
// (wrong magic or version, truncated, a count past the end).
Trace decode_trace(const std::string& bytes);

}  // namespace pipetune::profiler
