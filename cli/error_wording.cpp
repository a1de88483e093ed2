#include "cli/error_wording.hpp"

#include <array>
#include <string_view>

#include "engine/errors.hpp"
#include "engine/runtime/injected_fault.hpp"

namespace pipetune::cli {

namespace {

// An input the CLI takes from one flag: the rule under the flag, or what() and a remedy that
// names the flags to use instead.
struct FlagWording {
  std::string_view field;
  std::string_view flag;    // "--fault": "<flag>: <rule>"
  std::string_view remedy;  // else "<what>; <remedy>"
};

constexpr std::array<FlagWording, 4> kFlagWordings = {{
    {"fault", "--fault", ""},
    {"steps", "--steps", ""},
    {"db", "", "store the run elsewhere (--db) or --no-db"},
    {"stored_run.plan", "", "import it with --config RUN (or --model --hardware --tp --pp --dp)"},
}};

}  // namespace

std::string worded(const InputError& e) {
  for (const FlagWording& w : kFlagWordings) {
    if (e.field() != w.field) continue;
    if (!w.flag.empty()) return std::string(w.flag) + ": " + e.rule();
    return std::string(e.what()) + "; " + std::string(w.remedy);
  }
  return e.what();
}

std::string worded_failure(const std::exception& e) {
  if (const auto* fault = dynamic_cast<const runtime::InjectedFaultError*>(&e))
    return "injected fault (--fault): " + fault->where();
  if (const auto* input = dynamic_cast<const InputError*>(&e)) return worded(*input);
  return e.what();
}

}  // namespace pipetune::cli
