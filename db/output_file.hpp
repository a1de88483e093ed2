// Output files (traces, exports, hardware profiles): the one rule both front ends follow.
//  - Only a regular file is written, or a new one created. A directory, FIFO, socket or device
//    at the path is refused (InputError naming what it is), whatever the caller allows.
//  - A symbolic link is followed: the file it points to is written and the link stays a link.
//  - The text goes to a temporary file beside the resolved target, which is renamed over it
//    once complete: a failure never leaves a half-written file, and the old one stays.
//  - check_output_file runs the same checks before any work, so that a bad path fails before a
//    run trains or measures rather than after.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "engine/errors.hpp"

namespace pipetune::db {

// A regular file is at the path and the caller did not allow replacing it. The message says
// only that it exists: front ends add how to allow it.
class OutputFileExists : public InputError {
 public:
  using InputError::InputError;
};

// What a file of this st_mode is, for a message: "a directory", "a FIFO (named pipe)", "a socket",
// "a character device", "a block device"; "a regular file" for one.
std::string file_type_name(unsigned mode);

// The path the text will land in: `path`, or the file its symbolic links lead to (which may not
// exist yet). InputError for a cycle of links.
std::string resolve_output_path(const std::string& path);

// Throws InputError when `path` cannot take an output file: empty, not a regular file (naming
// what it is), its folder missing, not a folder or not writable, or the same file as
// `workspace` (the one the command reads or stores into; none when empty); OutputFileExists when
// a regular file is there and !replace.
void check_output_file(const std::string& path, bool replace, const std::string& workspace = {});

struct OutputFileOptions {
  bool executable = false;  // mode 0777 less the umask (launch scripts), else 0666 less it
};

// Writes what `write` streams to `path` by the rule above (it replaces an existing regular file:
// whether it may is check_output_file's question). InputError for a path that cannot take a
// file; std::runtime_error naming the path, the step and the system's reason when the file
// system refuses (a full disk, a rename across devices); whatever `write` throws, after the
// temporary file is removed.
void write_output_file(const std::string& path, const std::function<void(std::ostream&)>& write,
                       const OutputFileOptions& options = {});
void write_output_file(const std::string& path, std::string_view text,
                       const OutputFileOptions& options = {});

}  // namespace pipetune::db
