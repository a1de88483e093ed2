// generate(): checks the parameters every schedule shares, then dispatches by name.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {

namespace {

using GeneratorFn = Schedule (*)(const GeneratorParams&);

struct Entry {
  std::string_view name;
  GeneratorFn fn;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {"gpipe", generate_gpipe},
      {"1f1b", generate_1f1b},
      {"interleaved-1f1b", generate_interleaved_1f1b},
      {"zb-h1", generate_zb_h1},
      {"zb-h2", generate_zb_h2},
      {"zb-v", generate_zb_v},
      {"v-half", generate_v_half},
      {"v-min", generate_v_min},
      {"dualpipe-v", generate_dualpipe_v},
      {"terapipe", generate_terapipe},
      {"skippipe", generate_skippipe},
      {"skippipe-ca", generate_skippipe_ca},
      {"layered", generate_layered},
  };
  return table;
}

std::string joined_names() {
  std::string s;
  for (const auto& e : entries()) {
    if (!s.empty()) s += ", ";
    s += e.name;
  }
  return s;
}

}  // namespace

const std::vector<std::string_view>& schedule_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> n;
    for (const auto& e : entries()) n.push_back(e.name);
    return n;
  }();
  return names;
}

Placement schedule_placement(std::string_view name) {
  if (name == "zb-v" || name == "v-half" || name == "v-min" || name == "dualpipe-v")
    return Placement::VShape;
  for (const auto& e : entries())
    if (e.name == name) return Placement::Linear;
  throw ScheduleError("unknown schedule '" + std::string(name) + "' (valid: " + joined_names() +
                      ")");
}

bool supports_vocab(std::string_view name, VocabMode vocab) {
  switch (vocab) {
    case VocabMode::None:
      return true;
    case VocabMode::Vocab1:
    case VocabMode::Vocab2:
      return name == "1f1b" || name == "interleaved-1f1b" || name == "v-half";
    case VocabMode::Interlaced:
      return name == "1f1b";
  }
  return false;
}

int default_chunks(std::string_view name) {
  if (schedule_placement(name) == Placement::VShape || name == "interleaved-1f1b" ||
      name == "layered")
    return 2;
  return 1;
}

bool uses_costs(std::string_view name, VocabMode vocab) {
  return vocab != VocabMode::None || name == "zb-h1" || name == "zb-h2" || name == "zb-v" ||
         name == "skippipe-ca";
}

std::optional<Schedule> transformer_ops_schedule(const GeneratorParams& params) {
  if (params.vocab != VocabMode::Vocab1 && params.vocab != VocabMode::Vocab2) return std::nullopt;
  Schedule s;
  if (params.name == "v-half")
    s = transformer_ops_of_v_half(params);
  else if (params.name == "1f1b")
    s = transformer_ops_of_1f1b_vocab(params);
  else if (params.name == "interleaved-1f1b")
    s = transformer_ops_of_interleaved_1f1b(params);
  else
    return std::nullopt;
  // The reductions follow each group's last weight-gradient pass, as generate() adds them.
  if (params.layered_reduction && !reduces_per_group(s)) add_gradient_reductions(s);
  validate_structure(s);
  return s;
}

bool supports_slices(std::string_view name) {
  return name == "terapipe";
}

int default_slices(std::string_view name) {
  schedule_placement(name);  // throws for an unknown name
  return slice_count(name, 0, {});
}

int slice_count(std::string_view name, int slices, const std::vector<int>& slice_tokens) {
  if (!slice_tokens.empty()) return static_cast<int>(slice_tokens.size());
  if (slices > 0) return slices;
  return supports_slices(name) ? 4 : 1;
}

bool skips_stages(std::string_view name) {
  return name == "skippipe" || name == "skippipe-ca";
}

bool has_overlapped_pairs(std::string_view name) {
  return name == "dualpipe-v";
}

bool always_reduces_per_group(std::string_view name) {
  return name == "layered";
}

void validate_generated(const Schedule& s, const GeneratorParams& params) {
  if (!params.check_generated) return;
  if (params.prove_deadlock_free)
    validate(s);
  else
    validate_structure(s);
}

Schedule generate(const GeneratorParams& params) {
  const auto it = std::find_if(entries().begin(), entries().end(),
                               [&](const Entry& e) { return e.name == params.name; });
  if (it == entries().end())
    throw ScheduleError({"plan.schedule"},
                        "unknown schedule '" + params.name + "' (valid: " + joined_names() + ")");
  if (params.stages < 1)
    throw ScheduleError({"plan.pp"},
                        "stages must be positive, got " + std::to_string(params.stages));
  if (params.microbatches < 1)
    throw ScheduleError({"plan.microbatches"}, "micro-batches must be positive, got " +
                                                   std::to_string(params.microbatches));
  if (params.chunks < 0)
    throw ScheduleError({"plan.chunks"},
                        "chunks must be positive, got " + std::to_string(params.chunks));
  if (params.group_size < 0)
    throw ScheduleError({"plan.group_size"},
                        "group size must be positive, got " + std::to_string(params.group_size));
  if (params.memory_limit < 0.0) throw ScheduleError("memory limit must not be negative");
  // Sizes a schedule can have before anything is allocated: the op list and the simulator's
  // state grow with stages x micro-batches x chunks (a typo of 1e9 micro-batches must be an
  // error, not an hour of swapping).
  constexpr std::int64_t kMaxTriples = std::int64_t{1} << 24;
  const std::int64_t triples =
      std::int64_t{params.stages} * params.microbatches * std::max(1, params.chunks);
  if (triples > kMaxTriples)
    throw ScheduleError({"plan.microbatches", "plan.pp", "plan.chunks"},
                        "the schedule would have " + std::to_string(params.stages) + " stages x " +
                            std::to_string(params.microbatches) + " micro-batches x " +
                            std::to_string(std::max(1, params.chunks)) +
                            " chunks = " + std::to_string(triples) + " forward passes; at most " +
                            std::to_string(kMaxTriples) + " are generated");
  if (!supports_vocab(params.name, params.vocab)) {
    throw ScheduleError(
        {"plan.vocab", "plan.schedule"},
        "vocabulary mode " + std::string(vocab_mode_name(params.vocab)) + " is supported on " +
            (params.vocab == VocabMode::Interlaced ? "1f1b" : "1f1b, interleaved-1f1b and v-half") +
            " only, not on " + params.name);
  }
  // Options a schedule does not read are refused, never ignored: from flags, run files or forms.
  if (params.group_size > 0 && params.name != "interleaved-1f1b")
    throw ScheduleError({"plan.group_size", "plan.schedule"},
                        "a micro-batch group size (" + std::to_string(params.group_size) +
                            ") applies to interleaved-1f1b only, not " + params.name);
  if (params.skip_ratio && !skips_stages(params.name))
    throw ScheduleError(
        {"plan.skip_ratio", "plan.schedule"},
        "a skip ratio applies to skippipe and skippipe-ca only, not " + params.name);
  if (params.skip_ratio && !(*params.skip_ratio >= 0.0 && *params.skip_ratio < 1.0))  // nan too
    throw ScheduleError({"plan.skip_ratio"},
                        "the skip ratio is the fraction of stages a micro-batch skips: at least 0 "
                        "and below 1");
  if (params.memory_limit > 0.0 && params.name != "zb-h2" && params.name != "zb-v" &&
      params.name != "skippipe-ca")
    throw ScheduleError(
        "an activation memory limit applies to the memory-bounded schedules zb-h2, zb-v and "
        "skippipe-ca only, not " +
        params.name);
  if (params.slices < 0)
    throw ScheduleError({"plan.slices"},
                        "token slices must be positive, got " + std::to_string(params.slices));
  const int slices = slice_count(params.name, params.slices, params.slice_tokens);
  if ((params.slices > 1 || !params.slice_tokens.empty()) && !supports_slices(params.name))
    throw ScheduleError({"plan.slices", "plan.schedule"},
                        "token slices (" + std::to_string(slices) +
                            " per micro-batch) apply to terapipe only, not " + params.name);
  if (!params.slice_tokens.empty() && params.slices > 0 &&
      params.slices != static_cast<int>(params.slice_tokens.size()))
    throw ScheduleError({"plan.slice_tokens", "plan.slices"},
                        std::to_string(params.slice_tokens.size()) + " slice lengths given for " +
                            std::to_string(params.slices) + " token slices");
  for (int t : params.slice_tokens)
    if (t < 1)
      throw ScheduleError({"plan.slice_tokens"},
                          "a token slice must hold at least one token, got " + std::to_string(t));
  if (std::int64_t{params.stages} * params.microbatches * slices > kMaxTriples)
    throw ScheduleError({"plan.microbatches", "plan.slices"},
                        "the schedule would have " + std::to_string(params.stages) + " stages x " +
                            std::to_string(params.microbatches) + " micro-batches x " +
                            std::to_string(slices) + " token slices; at most " +
                            std::to_string(kMaxTriples) + " forward passes are generated");
  if (!params.costs.stages.empty() && static_cast<int>(params.costs.stages.size()) != params.stages)
    throw ScheduleError("cost table has " + std::to_string(params.costs.stages.size()) +
                        " stages, asked for " + std::to_string(params.stages));
  // The cost-aware generators plan with sums of these: bounded here as the simulator bounds them.
  check_costs(params.costs);
  if (!params.layered_reduction) return it->fn(params);
  GeneratorParams unchecked = params;
  unchecked.check_generated = false;
  Schedule s = it->fn(unchecked);
  if (!reduces_per_group(s)) {
    add_gradient_reductions(s);
    s.planned_time.reset();  // planned without the reductions
  }
  validate_generated(s, params);
  return s;
}

}  // namespace pipetune::schedule
