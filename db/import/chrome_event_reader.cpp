#include "db/import/chrome_event_reader.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <streambuf>
#include <vector>

#include "engine/errors.hpp"

#ifdef PIPETUNE_HAVE_ZLIB
#include <zlib.h>
#endif

namespace pipetune::db::import_detail {

using nlohmann::json;

namespace {

constexpr std::int64_t kMaxNs = INT64_MAX / 2;  // headroom for start + dur

// The file's JSON text for the SAX parser, in blocks: read as it is, or inflated with gzread.
// It counts what it hands out and throws InputError at the limits, as the bytes arrive: the whole
// text, a gzip file's inflate ratio, and the bytes since the parser last finished a token (mark()),
// so no limit needs the text inflated or a token held first.
class TraceTextBuf : public std::streambuf {
 public:
  TraceTextBuf(std::string path, bool gzip, const ImportLimits& limits)
      : path_(std::move(path)), gzip_(gzip), limits_(limits) {
#ifdef PIPETUNE_HAVE_ZLIB
    if (gzip_) {
      gz_ = gzopen(path_.c_str(), "rb");
      return;
    }
#endif
    plain_ = std::fopen(path_.c_str(), "rb");
  }
  ~TraceTextBuf() override {
#ifdef PIPETUNE_HAVE_ZLIB
    if (gz_ != nullptr) gzclose(gz_);
#endif
    if (plain_ != nullptr) std::fclose(plain_);
  }
  TraceTextBuf(const TraceTextBuf&) = delete;
  TraceTextBuf& operator=(const TraceTextBuf&) = delete;

  bool is_open() const {
#ifdef PIPETUNE_HAVE_ZLIB
    if (gzip_) return gz_ != nullptr;
#endif
    return plain_ != nullptr;
  }
  // zlib's message for the last failure ("unexpected end of file"), empty when none.
  std::string error() const {
    return error_;
  }
  // The parser finished a token: the next one starts its max_token_bytes from here.
  void mark() {
    mark_ = consumed();
  }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (delivered_ - mark_ > limits_.max_token_bytes)
      throw InputError(path_ + ": a JSON value or run of whitespace longer than " +
                       limit_bytes_text(limits_.max_token_bytes) + " (at byte " +
                       std::to_string(mark_) + "): beyond the import limit");
    const std::size_t n = read_block();
    if (n == 0) return traits_type::eof();
    delivered_ += n;
    check_limits();
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  std::uint64_t consumed() const {
    return delivered_ - static_cast<std::uint64_t>(egptr() - gptr());
  }

  std::size_t read_block() {
#ifdef PIPETUNE_HAVE_ZLIB
    if (gzip_) {
      const int n = gzread(gz_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
      if (n <= 0) {
        // gzread returns 0 at the end, also when the stream was cut short: ask zlib.
        int code = 0;
        const char* msg = gzerror(gz_, &code);
        if (n < 0 || (code != Z_OK && code != Z_STREAM_END)) set_error(msg);
        return 0;
      }
      return static_cast<std::size_t>(n);
    }
#endif
    const std::size_t n = std::fread(buffer_.data(), 1, buffer_.size(), plain_);
    if (n == 0 && std::ferror(plain_))
      throw InputError(path_ + ": read error: " + std::strerror(errno));
    return n;
  }

  void check_limits() const {
    if (delivered_ > limits_.max_text_bytes)
      throw InputError(path_ + ": more than " + limit_bytes_text(limits_.max_text_bytes) +
                       " of JSON text" + (gzip_ ? " inflated" : "") + ": beyond the import limit");
#ifdef PIPETUNE_HAVE_ZLIB
    if (gzip_ && delivered_ > limits_.ratio_check_after_bytes) {
      const auto compressed = static_cast<std::uint64_t>(std::max<z_off_t>(gzoffset(gz_), 1));
      if (delivered_ / compressed >= limits_.max_inflate_ratio)
        throw InputError(path_ + ": gzip data inflating more than " +
                         std::to_string(limits_.max_inflate_ratio) + ":1 (" +
                         std::to_string(delivered_) + " bytes from " + std::to_string(compressed) +
                         " compressed): refused as a decompression bomb (import limit: " +
                         std::to_string(limits_.max_inflate_ratio) + ":1 past " +
                         limit_bytes_text(limits_.ratio_check_after_bytes) + ")");
    }
#endif
  }

  // zlib prefixes its messages with the path; the importer's message names the file already.
  void set_error(const char* msg) {
    error_ = msg != nullptr ? msg : "read error";
    if (error_.rfind(path_ + ": ", 0) == 0) error_.erase(0, path_.size() + 2);
  }

  std::string path_;
  bool gzip_ = false;
  const ImportLimits& limits_;
  std::FILE* plain_ = nullptr;
#ifdef PIPETUNE_HAVE_ZLIB
  gzFile gz_ = nullptr;
#endif
  std::array<char, 1 << 16> buffer_{};
  std::uint64_t delivered_ = 0;  // bytes handed to the parser so far
  std::uint64_t mark_ = 0;       // where the parser last finished a token
  std::string error_;
};

std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

// SAX handler: tracks where it is (top level, event array, an event's members, a subtree being
// built as a DOM, a subtree being skipped) and hands each finished event to the callback.
class EventSax : public nlohmann::json_sax<json> {
 public:
  EventSax(std::string file, const std::function<void(ChromeEvent&)>& on_event,
           ChromeFileInfo& info, TraceTextBuf& text, const ImportLimits& limits)
      : file_(std::move(file)), on_event_(on_event), info_(info), text_(text), limits_(limits) {}

  bool null() override { return scalar(json(nullptr), nullptr); }
  bool boolean(bool v) override { return scalar(json(v), nullptr); }
  bool number_integer(number_integer_t v) override { return scalar(json(v), nullptr); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(json(v), nullptr); }
  bool number_float(number_float_t v, const string_t& raw) override {
    return scalar(json(v), &raw);
  }
  bool string(string_t& v) override { return scalar(json(std::move(v)), nullptr); }
  bool binary(binary_t&) override { return scalar(json(nullptr), nullptr); }

  bool key(string_t& k) override {
    text_.mark();
    if (!dom_.empty()) {
      dom_key_ = std::move(k);
    } else if (skip_depth_ < 0) {
      key_ = std::move(k);
    }
    return true;
  }

  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // The array format's optional ']': input ending between two events of the top-level array.
    if (info_.array_form && depth_ == 1 && !in_event_ && skip_depth_ < 0 &&
        std::string_view(ex.what()).find("unexpected end of input") != std::string_view::npos) {
      info_.unterminated = true;
      return false;  // stop here; parse() accepts it
    }
    throw InputError(file_ + ": not valid JSON (byte " + std::to_string(position) +
                     "): " + ex.what());
  }

  bool saw_events() const { return events_depth_ > 0; }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw InputError(file_ + ": " + what); }
  [[noreturn]] void fail_event(const std::string& what) const {
    fail("event " + std::to_string(event_.index) + " (\"" + event_.name + "\"): " + what);
  }

  bool in_event_members() const { return in_event_ && depth_ == event_depth_; }
  bool at_event_slot() const { return !in_event_ && events_depth_ > 0 && depth_ == events_depth_; }
  bool at_top_member() const { return !info_.array_form && depth_ == 1; }

  static bool kept_top_level(const std::string& k) {
    return k == "distributedInfo" || k == "deviceProperties" || k == "displayTimeUnit" ||
           k == "otherData" || k == "schemaVersion" || k == "baseTimeNanoseconds";
  }

  // One more value in the DOM being built (an event's args, a kept top-level member).
  void count_dom_value() {
    if (++*dom_values_ <= limits_.max_nested_values) return;
    const std::string what = dom_values_ == &top_level_values_
                                 ? "the kept top-level members (distributedInfo, deviceProperties)"
                                 : "event " + std::to_string(event_.index) + "'s \"args\"";
    fail("more than " + std::to_string(limits_.max_nested_values) + " values in " + what +
         ": beyond the import limit");
  }

  void dom_add(json v) {
    count_dom_value();
    json& top = *dom_.back();
    if (top.is_object()) {
      top[dom_key_] = std::move(v);
    } else {
      top.push_back(std::move(v));
    }
  }

  bool scalar(json v, const std::string* raw_float) {
    text_.mark();
    if (!dom_.empty()) {
      dom_add(std::move(v));
      return true;
    }
    if (skip_depth_ >= 0) return true;
    if (in_event_members()) {
      event_member(std::move(v), raw_float);
    } else if (at_event_slot()) {
      fail("event " + std::to_string(info_.events) + " is " + describe(v) + ", not an object");
    } else if (at_top_member()) {
      if (key_ == "traceEvents") fail("\"traceEvents\" is " + describe(v) + ", not an array");
      if (kept_top_level(key_)) info_.top_level[key_] = std::move(v);
    } else if (depth_ == 0) {
      fail("not a Chrome trace: the top level is " + describe(v) +
           ", not an array of events or an object with \"traceEvents\"");
    }
    return true;
  }

  static bool read_id(const json& v, ChromeId& out) {
    out.present = true;
    if (v.is_number_integer()) {
      out.is_text = false;
      out.number = v.get<std::int64_t>();
      return true;
    }
    if (v.is_string()) {
      out.is_text = true;
      out.text = v.get<std::string>();
      return true;
    }
    return false;
  }

  std::int64_t time_ns(const json& v, const std::string* raw_float) const {
    std::optional<std::int64_t> ns;
    if (raw_float != nullptr) {
      ns = microseconds_text_to_ns(*raw_float);
    } else if (v.is_number_integer()) {
      const std::int64_t us = v.get<std::int64_t>();
      if (us > -kMaxNs / 1000 && us < kMaxNs / 1000) ns = us * 1000;
    } else if (v.is_number_unsigned()) {
      const std::uint64_t us = v.get<std::uint64_t>();
      if (us < static_cast<std::uint64_t>(kMaxNs / 1000)) ns = static_cast<std::int64_t>(us) * 1000;
    } else {
      fail_event("\"" + key_ + "\" is " + describe(v) + ", not a number of microseconds");
    }
    if (!ns) fail_event("\"" + key_ + "\" is out of range");
    return *ns;
  }

  void event_member(json v, const std::string* raw_float) {
    auto text = [&](std::string& out) {
      if (!v.is_string()) fail_event("\"" + key_ + "\" is " + describe(v) + ", not a string");
      out = v.get<std::string>();
    };
    if (key_ == "ph") {
      text(event_.ph);
    } else if (key_ == "name") {
      text(event_.name);
    } else if (key_ == "cat") {
      text(event_.cat);
    } else if (key_ == "pid" || key_ == "tid") {
      ChromeId& id = key_ == "pid" ? event_.pid : event_.tid;
      if (!read_id(v, id))
        fail_event("\"" + key_ + "\" is " + describe(v) + ", not an integer or a string");
    } else if (key_ == "ts") {
      event_.ts_ns = time_ns(v, raw_float);
    } else if (key_ == "dur") {
      event_.dur_ns = time_ns(v, raw_float);
    } else if (key_ == "id") {
      if (v.is_string()) {
        event_.id = v.get<std::string>();
      } else if (v.is_number_integer()) {
        event_.id = std::to_string(v.get<std::int64_t>());
      }
    } else if (key_ == "args" && !v.is_null()) {
      fail_event("\"args\" is " + describe(v) + ", not an object");
    }
  }

  bool open(bool object) {
    text_.mark();
    if (!dom_.empty()) {
      count_dom_value();
      json child = object ? json::object() : json::array();
      json& top = *dom_.back();
      if (top.is_object()) {
        dom_.push_back(&(top[dom_key_] = std::move(child)));
      } else {
        top.push_back(std::move(child));
        dom_.push_back(&top.back());
      }
    } else if (skip_depth_ >= 0) {
      // inside a skipped subtree
    } else if (depth_ == 0) {
      info_.array_form = !object;
      if (!object) events_depth_ = 1;
    } else if (in_event_members()) {
      if (key_ == "ph" || key_ == "name" || key_ == "cat" || key_ == "pid" || key_ == "tid" ||
          key_ == "ts" || key_ == "dur")
        fail_event("\"" + key_ + "\" is " + (object ? "an object" : "an array") +
                   ", not a single value");
      if (key_ == "args") {
        if (!object) fail_event("\"args\" is an array, not an object");
        event_.args = json::object();
        dom_values_ = &event_values_;
        dom_.push_back(&event_.args);
      } else {
        skip_depth_ = depth_;  // "stack", "id2", ...: not read
      }
    } else if (at_event_slot()) {
      if (!object) fail("event " + std::to_string(info_.events) + " is an array, not an object");
      begin_event();
    } else if (at_top_member()) {
      if (key_ == "traceEvents") {
        if (object) fail("\"traceEvents\" is an object, not an array");
        events_depth_ = 2;
      } else if (kept_top_level(key_)) {
        info_.top_level[key_] = object ? json::object() : json::array();
        dom_values_ = &top_level_values_;
        dom_.push_back(&info_.top_level[key_]);
      } else {
        skip_depth_ = depth_;
      }
    } else {
      skip_depth_ = depth_;
    }
    ++depth_;
    return true;
  }

  bool close() {
    text_.mark();
    --depth_;
    if (!dom_.empty()) {
      dom_.pop_back();
    } else if (skip_depth_ >= 0) {
      if (depth_ == skip_depth_) skip_depth_ = -1;
    } else if (in_event_ && depth_ == event_depth_ - 1) {
      in_event_ = false;
      on_event_(event_);
    }
    return true;
  }

  void begin_event() {
    in_event_ = true;
    event_depth_ = depth_ + 1;
    event_.index = info_.events++;
    event_.ph.clear();
    event_.name.clear();
    event_.cat.clear();
    event_.pid = ChromeId{};
    event_.tid = ChromeId{};
    event_.ts_ns.reset();
    event_.dur_ns.reset();
    event_.id.clear();
    event_.args = nullptr;
    event_values_ = 0;
  }

  std::string file_;
  const std::function<void(ChromeEvent&)>& on_event_;
  ChromeFileInfo& info_;
  int depth_ = 0;
  int events_depth_ = 0;  // depth of the event array's elements' container; 0 before it is seen
  bool in_event_ = false;
  int event_depth_ = 0;
  int skip_depth_ = -1;
  std::string key_;
  std::vector<json*> dom_;
  std::string dom_key_;
  ChromeEvent event_;
  TraceTextBuf& text_;
  const ImportLimits& limits_;
  std::uint64_t event_values_ = 0, top_level_values_ = 0;  // values in the DOMs built
  std::uint64_t* dom_values_ = &event_values_;             // the one being built
};

void parse(std::istream& in, const std::string& file, EventSax& sax, const ChromeFileInfo& info) {
  const bool ok = json::sax_parse(in, &sax, json::input_format_t::json, true);
  if (!ok && !info.unterminated) throw InputError(file + ": not valid JSON");
}

}  // namespace

bool gzip_supported() {
#ifdef PIPETUNE_HAVE_ZLIB
  return true;
#else
  return false;
#endif
}

std::optional<std::int64_t> microseconds_text_to_ns(std::string_view text) {
  std::size_t pos = 0;
  bool negative = false;
  if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) negative = text[pos++] == '-';
  std::string digits;
  std::int64_t int_digits = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    digits += text[pos++];
    ++int_digits;
  }
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') digits += text[pos++];
  }
  if (digits.empty()) return std::nullopt;
  std::int64_t exponent = 0;
  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    ++pos;
    bool exp_negative = false;
    if (pos < text.size() && (text[pos] == '-' || text[pos] == '+'))
      exp_negative = text[pos++] == '-';
    const std::size_t exp_begin = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (exponent > 1000) return std::nullopt;
      exponent = exponent * 10 + (text[pos++] - '0');
    }
    if (pos == exp_begin) return std::nullopt;
    if (exp_negative) exponent = -exponent;
  }
  if (pos != text.size()) return std::nullopt;
  // ns = digits * 10^(exponent + 3 - fraction digits): the decimal point sits after `point`
  // digits of `digits`.
  const std::int64_t point = int_digits + exponent + 3;
  std::int64_t whole = 0;
  const std::int64_t n = static_cast<std::int64_t>(digits.size());
  for (std::int64_t i = 0; i < point; ++i) {
    const int d = i < n ? digits[static_cast<std::size_t>(i)] - '0' : 0;
    if (whole > (kMaxNs - d) / 10) return std::nullopt;
    whole = whole * 10 + d;
  }
  if (point >= 0 && point < n && digits[static_cast<std::size_t>(point)] >= '5') ++whole;
  return negative ? -whole : whole;
}

ChromeFileInfo read_chrome_events(const std::filesystem::path& path,
                                  const std::function<void(ChromeEvent&)>& on_event,
                                  const ImportLimits& limits) {
  const std::string file = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(file + ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) throw InputError(file + ": not a regular file");

  unsigned char magic[2] = {0, 0};
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw InputError(file + ": cannot be opened for reading");
    probe.read(reinterpret_cast<char*>(magic), 2);
  }
  const bool gzip = magic[0] == 0x1f && magic[1] == 0x8b;
#ifndef PIPETUNE_HAVE_ZLIB
  if (gzip)
    throw InputError(file +
                     ": gzip-compressed, but this build has no zlib: decompress it first "
                     "(gunzip -k)");
#endif
  // A plain file's text is its size: refused before it is read.
  if (!gzip) {
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > limits.max_text_bytes)
      throw InputError(file + ": " + std::to_string(size) + " bytes, more than " +
                       limit_bytes_text(limits.max_text_bytes) +
                       " of JSON text: beyond the import limit");
  }

  ChromeFileInfo info;
  TraceTextBuf text(file, gzip, limits);
  if (!text.is_open())
    throw InputError(file +
                     (gzip ? ": cannot be opened as gzip" : ": cannot be opened for reading"));
  EventSax sax(file, on_event, info, text, limits);
  std::istream in(&text);
  try {
    parse(in, file, sax, info);
  } catch (const InputError& e) {
    // A cut-short gzip stream shows up as JSON ending early: say what really happened.
    if (!text.error().empty()) throw InputError(file + ": gzip data is damaged: " + text.error());
    throw;
  }
  if (!text.error().empty()) throw InputError(file + ": gzip data is damaged: " + text.error());
  if (!info.array_form && !sax.saw_events())
    throw InputError(file + ": not a Chrome trace: no \"traceEvents\" array");
  return info;
}

std::optional<std::int64_t> id_number(const ChromeId& id) {
  if (!id.present) return std::nullopt;
  if (!id.is_text) return id.number;
  if (id.text.empty() || id.text.size() > 18) return std::nullopt;
  std::int64_t v = 0;
  std::size_t i = id.text[0] == '-' ? 1 : 0;
  if (i == id.text.size()) return std::nullopt;
  for (; i < id.text.size(); ++i) {
    if (id.text[i] < '0' || id.text[i] > '9') return std::nullopt;
    v = v * 10 + (id.text[i] - '0');
  }
  return id.text[0] == '-' ? -v : v;
}

std::optional<std::int64_t> int_arg(const nlohmann::json& args, const char* key) {
  if (!args.is_object()) return std::nullopt;
  auto it = args.find(key);
  if (it == args.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<std::int64_t>();
}

}  // namespace pipetune::db::import_detail
