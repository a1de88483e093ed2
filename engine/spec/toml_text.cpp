#include "engine/spec/toml_text.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/errors.hpp"

namespace pipetune::spec::detail {

namespace {

// Length of the well-formed UTF-8 sequence at text[i], else 0.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned low = 0x80;
  unsigned high = 0xBF;  // the second byte's range (narrower after E0, ED, F0, F4)
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;  // no UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return length;
}

}  // namespace

bool is_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string toml_string(std::string_view text, std::string_view what) {
  if (!is_utf8(text)) throw InputError(std::string(what) + " is not valid UTF-8 text");
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7F) {
          char escape[8];
          std::snprintf(escape, sizeof escape, "\\u%04X", static_cast<unsigned>(u));
          out += escape;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string toml_number(double value, int significant_digits) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[64];
  if (significant_digits > 0) {
    std::snprintf(text, sizeof text, "%.*g", significant_digits, value);
    return text;
  }
  const auto result = std::to_chars(text, text + sizeof text, value);
  std::string out(text, result.ptr);
  // Digits alone would read as a TOML integer, which cannot hold 1.2345678901234567e19.
  if (out.find_first_of(".eE") == std::string::npos) out += ".0";
  return out;
}

}  // namespace pipetune::spec::detail
