// Writing a text file that a person or a scheduler reads later (run files, launch scripts): the
// text goes to a temporary file beside the target, which is renamed over it once complete, so a
// failure never leaves half a file and the old one stays. Only a regular file is replaced; a
// symbolic link is followed (the file it leads to is written, the link stays).
#pragma once

#include <string>
#include <string_view>

namespace pipetune::spec {

// InputError naming the path when it cannot be written: empty, a directory or another file that
// is not a regular one, its folder missing or not writable, or the system refusing a step.
// executable: mode 0777 less the umask (scripts), else 0666 less it.
void write_spec_file(const std::string& path, std::string_view text, bool executable = false);

}  // namespace pipetune::spec
