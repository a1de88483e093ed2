// A command whose stdout fails (a closed pipe, a full disk) still finishes its work and keeps
// it. main ignores SIGPIPE, so a write to a closed stdout fails instead of killing the process;
// output after a failure is lost (printing stops, not the work), and main reports the failure
// once the command is done: one line on stderr saying what the command kept, and exit 1.
#pragma once

#include <string>

namespace pipetune::cli {

// Flushes stdout, keeping the first failure's reason (the next write would lose its errno).
// False once stdout has failed.
bool flush_stdout();

// What the command kept that its lost output would have said: "the run was stored as run 3 in
// w.db", "the trace was written to t.json". Said on stderr when stdout fails.
void note_kept(const std::string& what);

// After the command: empty when everything reached stdout, else "stdout: REASON" and what the
// command kept ("stdout: Broken pipe; the run was stored as run 3 in w.db").
std::string stdout_failure();

}  // namespace pipetune::cli
