#include "engine/schedule/op.hpp"

namespace pipetune::schedule {

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::F:
      return "F";
    case OpKind::B:
      return "B";
    case OpKind::W:
      return "W";
    case OpKind::BW:
      return "BW";
    case OpKind::S:
      return "S";
    case OpKind::T:
      return "T";
    case OpKind::IF:
      return "IF";
    case OpKind::IB:
      return "IB";
    case OpKind::R:
      return "R";
  }
  return "?";
}

std::optional<OpKind> parse_op_kind(std::string_view name) {
  for (OpKind k : kAllOpKinds) {
    if (op_kind_name(k) == name) return k;
  }
  return std::nullopt;
}

std::string op_label(const Op& op) {
  std::string s(op_kind_name(op.kind));
  if (is_reduction(op.kind)) return s + "." + std::to_string(op.chunk);
  s += std::to_string(op.microbatch);
  if (!is_vocab_op(op.kind)) {
    s += '.';
    s += std::to_string(op.chunk);
  }
  return s;
}

std::string pair_label(const Op& first, const Op& second) {
  return op_label(first) + "&" + op_label(second);
}

}  // namespace pipetune::schedule
