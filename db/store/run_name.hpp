// What a run's name may hold, and how stored text is shown. A name is valid UTF-8 without
// control characters (C0, DEL, C1): it is printed in tables, written into JSON and shown by the
// GUI, where invalid bytes break encoders and control characters move the terminal's cursor.
// The store refuses other names (RunWriter); text already stored (older workspaces, imported
// span names) is shown through printable_text.
#pragma once

#include <string>
#include <string_view>

namespace pipetune::db {

// Empty when `name` may name a run; else what is wrong, with the byte offset (from 0):
// "byte 3 (0xff) is not valid UTF-8", "byte 5 is a control character (U+0007)".
std::string run_name_problem(std::string_view name);
// InputError "run name: <problem>" when run_name_problem says one.
void check_run_name(std::string_view name);

// The text with each control character and each byte that is not part of valid UTF-8 written as
// \xNN: safe to print on a terminal and to put in JSON; valid names come back unchanged.
std::string printable_text(std::string_view text);

}  // namespace pipetune::db
