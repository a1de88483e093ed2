#include "engine/checkpoint/checkpoint_format.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string_view>

#include "engine/errors.hpp"

namespace pipetune::checkpoint {

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc) {
  // zlib's crc32_z takes a z_size_t; feed it in chunks that fit in any z_size_t.
  const auto* p = static_cast<const Bytef*>(data);
  uLong value = crc;
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  while (size > 0) {
    const std::size_t k = std::min(size, kChunk);
    value = ::crc32_z(value, p, static_cast<z_size_t>(k));
    p += k;
    size -= k;
  }
  return static_cast<std::uint32_t>(value);
}

const NamedTensor* RankCheckpoint::find(const std::string& name) const {
  for (const NamedTensor& t : buffers)
    if (t.name == name) return &t;
  return nullptr;
}

namespace format {

void put_le(char* out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}

std::uint64_t get_le(const char* in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.bin", rank);
  return buf;
}

// The rank of "rank-<digits>.bin", or -1 for any other name.
int parse_rank_file_name(const std::string& name) {
  constexpr std::string_view prefix = "rank-", suffix = ".bin";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  int rank = -1;
  const auto [end, ec] = std::from_chars(first, last, rank);
  if (ec != std::errc() || end != last ||
      !std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return rank;
}

bool is_checkpoint_entry(const std::string& name) {
  return name == kManifestName || parse_rank_file_name(name) >= 0;
}

[[noreturn]] void write_error(const std::string& what, const fs::path& path, int err) {
  throw std::runtime_error("checkpoint: cannot " + what + " '" + path.string() +
                           "': " + std::strerror(err));
}

[[noreturn]] void bad_file(const fs::path& path, const std::string& what) {
  throw InputError("checkpoint file '" + path.string() + "': " + what);
}

namespace {

// Manifest values are one line each: backslash, control characters and DEL are escaped.
std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  return out;
}

bool unescape(const std::string& s, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return false;
    switch (s[i]) {
      case '\\':
        out += '\\';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'x': {
        unsigned value = 0;
        if (i + 2 >= s.size()) return false;
        const auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, value, 16);
        if (ec != std::errc() || end != s.data() + i + 3) return false;
        out += static_cast<char>(value);
        i += 2;
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

std::string manifest_text(const CheckpointManifest& m) {
  return "# pipetune checkpoint\nformat = " + std::to_string(kCheckpointFormatVersion) +
         "\nstep = " + std::to_string(m.step) + "\nworld = " + std::to_string(m.world) +
         "\nmodel = " + escape(m.model) + "\nplan = " + escape(m.plan) +
         "\nseed = " + std::to_string(m.seed) + "\n";
}

CheckpointManifest parse_manifest_text(const std::string& text, const fs::path& path) {
  auto fail = [&](const std::string& what) -> void { bad_file(path, what); };
  std::map<std::string, std::string> kv;
  std::size_t start = 0;
  for (int lineno = 1; start < text.size(); ++lineno) {
    std::size_t stop = text.find('\n', start);
    if (stop == std::string::npos) stop = text.size();
    std::string line = text.substr(start, stop - start);
    start = stop + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.front() == '#') continue;
    const std::string at = "line " + std::to_string(lineno) + ": ";
    const auto eq = line.find('=');
    if (eq == std::string::npos) fail(at + "expected 'key = value'");
    std::string key = line.substr(0, eq);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    std::string raw = line.substr(eq + 1);
    if (!raw.empty() && raw.front() == ' ') raw.erase(0, 1);
    std::string value;
    if (key.empty()) fail(at + "expected 'key = value'");
    if (!unescape(raw, value)) fail(at + "bad escape in the value of '" + key + "'");
    if (!kv.emplace(key, std::move(value)).second) fail(at + "key '" + key + "' is repeated");
  }
  auto get = [&](const char* key) -> const std::string& {
    const auto it = kv.find(key);
    if (it == kv.end()) bad_file(path, std::string("missing key '") + key + "'");
    return it->second;
  };
  auto number = [&](const char* key, auto& out) {
    const std::string& v = get(key);
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      bad_file(path, std::string("'") + key + "' is not a valid number: '" + v + "'");
  };
  CheckpointManifest m;
  number("format", m.format_version);
  if (m.format_version != kCheckpointFormatVersion)
    bad_file(path, "format " + std::to_string(m.format_version) +
                       " is not supported (this build reads " +
                       std::to_string(kCheckpointFormatVersion) + ")");
  for (const auto& [key, value] : kv)
    if (key != "format" && key != "step" && key != "world" && key != "model" && key != "plan" &&
        key != "seed")
      bad_file(path, "unknown key '" + key + "'");
  number("step", m.step);
  number("world", m.world);
  number("seed", m.seed);
  if (m.step < 0) bad_file(path, "step " + std::to_string(m.step) + " is negative");
  if (m.world < 1 || m.world > kMaxWorld)
    bad_file(path,
             "world " + std::to_string(m.world) + " is outside 1.." + std::to_string(kMaxWorld));
  m.model = get("model");
  m.plan = get("plan");
  return m;
}

}  // namespace format
}  // namespace pipetune::checkpoint
