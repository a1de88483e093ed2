#include "db/import/pipeline_phase_names.hpp"

#include <cctype>
#include <string>

namespace pipetune::db {

using profiler::SpanKind;

namespace {

// Reads decimal digits at s[pos...]; false when there are none or the value exceeds int32.
bool read_int(std::string_view s, std::size_t& pos, std::int32_t& out) {
  const std::size_t begin = pos;
  std::int64_t v = 0;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
    v = v * 10 + (s[pos] - '0');
    if (v > INT32_MAX) return false;
    ++pos;
  }
  out = static_cast<std::int32_t>(v);
  return pos > begin;
}

bool consume(std::string_view s, std::size_t& pos, std::string_view word) {
  if (s.substr(pos, word.size()) != word) return false;
  pos += word.size();
  return true;
}

bool is_separator(char c) {
  return c == '-' || c == '_' || c == ' ' || c == ':' || c == '#' || c == '=';
}

// "F_0,3", "B_2,1", "S_3,0" (PiPPy). Its later "A_0,3" (gradient accumulation) is not a phase.
std::optional<PipelinePhase> match_pippy(std::string_view s) {
  if (s.size() < 5 || s[1] != '_') return std::nullopt;
  PipelinePhase p;
  switch (s[0]) {
    case 'F':
      p.kind = SpanKind::F;
      break;
    case 'B':
      p.kind = SpanKind::BW;
      break;
    case 'S':
      p.kind = SpanKind::Barrier;
      break;
    default:
      return std::nullopt;
  }
  std::size_t pos = 2;
  if (!read_int(s, pos, p.stage) || !consume(s, pos, ",") || !read_int(s, pos, p.microbatch) ||
      pos != s.size())
    return std::nullopt;
  return p;
}

// "PP:1F3" (torch.distributed.pipelining). Non-compute actions ("PP:0UNSHARD", "PP:1SEND_F3",
// "PP:0REDUCE_GRAD") and DualPipeV's "PP:(0F3;1B2)OVERLAP_F_B" pair do not match.
std::optional<PipelinePhase> match_torch_pipelining(std::string_view s) {
  std::size_t pos = 0;
  PipelinePhase p;
  if (!consume(s, pos, "PP:") || !read_int(s, pos, p.stage) || pos >= s.size()) return std::nullopt;
  switch (s[pos]) {
    case 'F':
      p.kind = SpanKind::F;
      break;
    case 'I':
      p.kind = SpanKind::B;
      break;
    case 'W':
      p.kind = SpanKind::W;
      break;
    case 'B':
      p.kind = SpanKind::BW;
      break;
    default:
      return std::nullopt;
  }
  ++pos;
  if (!read_int(s, pos, p.microbatch) || pos != s.size()) return std::nullopt;
  return p;
}

// "forward", "backward-compute mb=2", "fwd_3" (already lower-case). A bare word is accepted only
// when `bare` (a module path's tail "mlp.forward" is a module's forward, not a pipeline phase).
std::optional<PipelinePhase> match_forward_backward(std::string_view s, bool bare) {
  std::size_t pos = 0;
  PipelinePhase p;
  if (consume(s, pos, "forward") || consume(s, pos, "fwd")) {
    p.kind = SpanKind::F;
  } else if (consume(s, pos, "backward") || consume(s, pos, "bwd")) {
    p.kind = SpanKind::BW;
  } else {
    return std::nullopt;
  }
  if (pos == s.size()) return bare ? std::optional<PipelinePhase>(p) : std::nullopt;
  // Optional qualifier: "-compute", "_step", " pass".
  if (s[pos] == '-' || s[pos] == '_' || s[pos] == ' ') {
    std::size_t q = pos + 1;
    if (consume(s, q, "compute") || consume(s, q, "step") || consume(s, q, "pass")) pos = q;
  }
  if (pos == s.size()) return p;
  // Optional micro-batch: separators, an optional "microbatch"/"mb" word, separators, digits.
  std::size_t q = pos;
  while (q < s.size() && is_separator(s[q])) ++q;
  if (!consume(s, q, "microbatch") && !consume(s, q, "micro_batch") &&
      !consume(s, q, "micro-batch") && !consume(s, q, "micro batch"))
    consume(s, q, "mb");
  while (q < s.size() && is_separator(s[q])) ++q;
  if (q == pos) return std::nullopt;  // "forwardx": another word
  if (!read_int(s, q, p.microbatch) || q != s.size()) return std::nullopt;
  return p;
}

}  // namespace

std::optional<PipelinePhase> match_pipeline_phase(std::string_view name) {
  if (name.empty() || name.size() > 256) return std::nullopt;
  if (auto p = match_pippy(name)) return p;
  if (auto p = match_torch_pipelining(name)) return p;

  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (auto p = match_forward_backward(lower, true)) return p;
  // "<module>.<function>" with a phase as the function: "megatron.core.x.forward_step".
  const std::size_t dot = lower.rfind('.');
  if (dot != std::string::npos && lower.find(' ') == std::string::npos) {
    if (auto p = match_forward_backward(std::string_view(lower).substr(dot + 1), false)) return p;
  }
  return std::nullopt;
}

std::optional<PipelinePhase> match_python_function_phase(std::string_view name) {
  const auto ends_with = [&](std::string_view tail) {
    return name.size() >= tail.size() && name.substr(name.size() - tail.size()) == tail;
  };
  PipelinePhase p;
  if (ends_with("_exec_forward_pass")) {
    p.kind = SpanKind::F;
    return p;
  }
  if (ends_with("_exec_backward_pass")) {
    p.kind = SpanKind::BW;
    return p;
  }
  return std::nullopt;
}

}  // namespace pipetune::db
