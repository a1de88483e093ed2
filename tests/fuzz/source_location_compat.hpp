// Force-included in the fuzz build (root CMakeLists.txt, PIPETUNE_FUZZ): Debian's clang 14 has no
// __builtin_source_location, so libstdc++ 12 leaves std::source_location undefined under it
// (db/store/sqlite_util.hpp uses it). Its Library Fundamentals TS predecessor, built on
// __builtin_FILE/__builtin_LINE, which clang 14 has, stands in with the same interface.
#pragma once

#include <version>
#if !defined(__cpp_lib_source_location)
#include <experimental/source_location>
namespace std {
using source_location = experimental::source_location;
}  // namespace std
#endif
