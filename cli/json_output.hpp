// JSON as the CLI prints it (`--json` on stdout) and writes it: one place, so that no command
// fails on text stored by an older pipetune (a run or span name that is not valid UTF-8 is
// printed with U+FFFD in place of each bad byte, never an exception).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pipetune::cli {

// The text of `j`, indented by `indent` (-1: one line), invalid UTF-8 replaced.
std::string json_text(const nlohmann::json& j, int indent = 2);
// json_text(j) and a newline on stdout.
void print_json_value(const nlohmann::json& j);

}  // namespace pipetune::cli
