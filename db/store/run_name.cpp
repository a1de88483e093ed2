#include "db/store/run_name.hpp"

#include <cstdint>
#include <cstdio>

#include "engine/errors.hpp"

namespace pipetune::db {

namespace {

// One UTF-8 sequence at text[at]: its code point and length, or length 0 when the bytes there
// are not one (a stray continuation byte, a truncated sequence, an overlong form, a surrogate,
// a code point past U+10FFFF), as RFC 3629 defines it.
struct Decoded {
  std::uint32_t code_point = 0;
  std::size_t length = 0;
};

Decoded decode(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return {lead, 1};
  std::size_t length = 0;
  std::uint32_t cp = 0, least = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, cp = lead & 0x1F, least = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, cp = lead & 0x0F, least = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, cp = lead & 0x07, least = 0x10000;
  } else {
    return {};
  }
  if (at + length > text.size()) return {};
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (byte(at + i) & 0x3F);
  }
  if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {};
  return {cp, length};
}

bool is_control(std::uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F);
}

}  // namespace

std::string run_name_problem(std::string_view name) {
  char text[96];
  for (std::size_t at = 0; at < name.size();) {
    const Decoded d = decode(name, at);
    if (d.length == 0) {
      std::snprintf(text, sizeof text, "byte %zu (0x%02x) is not valid UTF-8", at,
                    static_cast<unsigned>(static_cast<unsigned char>(name[at])));
      return text;
    }
    if (is_control(d.code_point)) {
      std::snprintf(text, sizeof text, "byte %zu is a control character (U+%04X)", at,
                    static_cast<unsigned>(d.code_point));
      return text;
    }
    at += d.length;
  }
  return {};
}

void check_run_name(std::string_view name) {
  if (const std::string problem = run_name_problem(name); !problem.empty())
    throw InputError("run name: " + problem + "; a name is UTF-8 text without control characters");
}

std::string printable_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const Decoded d = decode(text, at);
    if (d.length == 0 || is_control(d.code_point)) {
      // The bytes as they are: one for an invalid byte, the sequence's for a C1 control.
      const std::size_t n = d.length == 0 ? 1 : d.length;
      for (std::size_t i = 0; i < n; ++i) {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\x%02x",
                      static_cast<unsigned>(static_cast<unsigned char>(text[at + i])));
        out += escaped;
      }
      at += n;
      continue;
    }
    out.append(text, at, d.length);
    at += d.length;
  }
  return out;
}

}  // namespace pipetune::db
