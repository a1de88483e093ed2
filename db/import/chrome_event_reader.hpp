// Streams the events of a Chrome trace file (JSON array, or an object with "traceEvents"; plain or
// gzip) one at a time through a SAX parser, so a file of millions of events is never held as a
// JSON document (private to db/import). Times are converted from µs to ns exactly from the
// number's text, not through a double (epoch µs with decimals lose nanoseconds in a double).
// What is read is bounded by ImportLimits (text, inflate ratio, token size, nested values),
// checked as the bytes arrive, so a decompression bomb stops early.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "db/import/import_limits.hpp"

namespace pipetune::db::import_detail {

// A pid or tid: Chrome traces use integers, some writers strings ("0", "Spans").
struct ChromeId {
  bool is_text = false;
  std::int64_t number = 0;
  std::string text;
  bool present = false;
};

struct ChromeEvent {
  std::size_t index = 0;  // position in the event array, for messages
  std::string ph;
  std::string name;
  std::string cat;
  ChromeId pid, tid;
  std::optional<std::int64_t> ts_ns;
  std::optional<std::int64_t> dur_ns;
  std::string id;       // async/flow id as text, "" when none
  nlohmann::json args;  // an object, or null when the event has none
};

// The integer a pid/tid stands for: itself, or a text that is a whole number ("3").
std::optional<std::int64_t> id_number(const ChromeId& id);

// An integer member of an event's args; nullopt when args is not an object or has no integer
// by that key.
std::optional<std::int64_t> int_arg(const nlohmann::json& args, const char* key);

// What the file says outside its events (small top-level members only: distributedInfo,
// deviceProperties, displayTimeUnit, schemaVersion, baseTimeNanoseconds).
struct ChromeFileInfo {
  bool array_form = false;
  // The JSON Array Format may end without its closing ']' (a process that died while tracing,
  // or a tracer that never closes it): the events before the cut are read and this is set.
  bool unterminated = false;
  nlohmann::json top_level = nlohmann::json::object();
  std::size_t events = 0;
};

// Calls on_event for every event in file order. Throws InputError naming the file for a file that
// cannot be read, bad JSON (truncated, syntax), a top level that is neither an array nor an
// object with a "traceEvents" array, or an event field of the wrong type (an event that is not an
// object, "ph"/"name"/"cat" not strings, "ts"/"dur" not numbers, pid/tid neither integer nor
// string, "args" not an object), or a file beyond `limits` (naming the limit).
ChromeFileInfo read_chrome_events(const std::filesystem::path& file,
                                  const std::function<void(ChromeEvent&)>& on_event,
                                  const ImportLimits& limits = {});

// Whether this build reads gzip-compressed traces (zlib linked).
bool gzip_supported();

// µs written as a JSON number ("1649317709410899.2", "10.0", "1.5e3") -> ns, rounded half away
// from zero; nullopt when not a number or out of range.
std::optional<std::int64_t> microseconds_text_to_ns(std::string_view text);

}  // namespace pipetune::db::import_detail
