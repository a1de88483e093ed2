#include "db/import/chrome_event_reader.hpp"

#include <array>
#include <cstdio>
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

#ifdef PIPETUNE_HAVE_ZLIB
// A read-only streambuf over gzread, so the SAX parser pulls decompressed bytes in blocks.
class GzipStreamBuf : public std::streambuf {
 public:
  explicit GzipStreamBuf(const std::string& path)
      : path_(path), file_(gzopen(path.c_str(), "rb")) {}
  ~GzipStreamBuf() override {
    if (file_ != nullptr) gzclose(file_);
  }
  bool is_open() const { return file_ != nullptr; }
  // zlib's message for the last failure ("unexpected end of file"), empty when none.
  std::string error() const { return error_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    const int n = gzread(file_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
    if (n < 0) {
      int code = 0;
      set_error(gzerror(file_, &code));
      return traits_type::eof();
    }
    if (n == 0) {
      // gzread returns 0 at the end, also when the stream was cut short: ask zlib.
      int code = 0;
      const char* msg = gzerror(file_, &code);
      if (code != Z_OK && code != Z_STREAM_END) set_error(msg);
      return traits_type::eof();
    }
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  // zlib prefixes its messages with the path; the importer's message names the file already.
  void set_error(const char* msg) {
    error_ = msg != nullptr ? msg : "read error";
    if (error_.rfind(path_ + ": ", 0) == 0) error_.erase(0, path_.size() + 2);
  }

  std::string path_;
  gzFile file_ = nullptr;
  std::array<char, 1 << 16> buffer_{};
  std::string error_;
};
#endif

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
           ChromeFileInfo& info)
      : file_(std::move(file)), on_event_(on_event), info_(info) {}

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
           k == "schemaVersion" || k == "baseTimeNanoseconds";
  }

  void dom_add(json v) {
    json& top = *dom_.back();
    if (top.is_object()) {
      top[dom_key_] = std::move(v);
    } else {
      top.push_back(std::move(v));
    }
  }

  bool scalar(json v, const std::string* raw_float) {
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
    if (!dom_.empty()) {
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
                                  const std::function<void(ChromeEvent&)>& on_event) {
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

  ChromeFileInfo info;
  EventSax sax(file, on_event, info);
  if (gzip) {
#ifdef PIPETUNE_HAVE_ZLIB
    GzipStreamBuf buf(file);
    if (!buf.is_open()) throw InputError(file + ": cannot be opened as gzip");
    std::istream in(&buf);
    try {
      parse(in, file, sax, info);
    } catch (const InputError& e) {
      // A cut-short gzip stream shows up as JSON ending early: say what really happened.
      if (!buf.error().empty()) throw InputError(file + ": gzip data is damaged: " + buf.error());
      throw;
    }
    if (!buf.error().empty()) throw InputError(file + ": gzip data is damaged: " + buf.error());
#else
    throw InputError(file +
                     ": gzip-compressed, but this build has no zlib: decompress it first "
                     "(gunzip -k)");
#endif
  } else {
    std::vector<char> buffer(1 << 16);
    std::ifstream in;
    in.rdbuf()->pubsetbuf(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    in.open(path, std::ios::binary);
    if (!in) throw InputError(file + ": cannot be opened for reading");
    parse(in, file, sax, info);
  }
  if (!info.array_form && !sax.saw_events())
    throw InputError(file + ": not a Chrome trace: no \"traceEvents\" array");
  return info;
}

}  // namespace pipetune::db::import_detail
