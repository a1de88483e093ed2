// Internal to engine/spec: writing TOML text that the readers (toml_reader.hpp) take back
// exactly. Needs no toml++.
#pragma once

#include <string>
#include <string_view>

namespace pipetune::spec::detail {

// Whether `text` is well-formed UTF-8 (TOML text is; a string that is not cannot be written).
bool is_utf8(std::string_view text);

// A TOML basic string in double quotes: quotes, backslashes and every character TOML does not
// allow bare (U+0000..U+001F, U+007F) escaped. InputError naming `what` when the text is not
// UTF-8.
std::string toml_string(std::string_view text, std::string_view what = "a string");

// A number as TOML: the shortest digits that read back to the same double (significant_digits
// 0; always a TOML float), else that many significant digits; infinities and NaN as TOML
// spells them.
std::string toml_number(double value, int significant_digits = 0);

}  // namespace pipetune::spec::detail
