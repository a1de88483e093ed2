// torch.distributed.pipelining's rules for a schedule CSV that torchtitan loads
// (pipeline_parallel_schedule_csv): its actions, where each stage runs, and whether the lowering
// to send/recv can schedule it.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/errors.hpp"
#include "tuner/export/pipelining_csv.hpp"
#include "tuner/export/torchtitan_rules.hpp"
#include "tuner/export/torchtitan_sources.hpp"

namespace pipetune::tuner {

namespace {

using namespace torchtitan_sources;

std::string n(std::int64_t v) {
  return std::to_string(v);
}

void add_violation(RuleViolations& out, const char* rule, const char* source,
                   const std::string& detail) {
  out.push_back({rule, source, detail});
}

// The micro-batches each (stage, action type) has run so far.
using ActionsSeen = std::map<std::tuple<int, char>, std::set<int>>;

// _validate_schedule and pipeline_module_split, action by action: every stage on one rank, and
// on the rank torchtitan built it on (loop = rank + k * pp, V = rank and 2pp-1-rank; a rank runs
// only the stages it holds); indices in range; F before I or B of the same micro-batch on the
// stage, I before W. Returns whether every action passed.
bool check_actions(RuleViolations& out, const PipeliningSchedule& rows, int pp, int stages,
                   int microbatches, bool v_placement, ActionsSeen& seen) {
  auto home = [&](int s) { return v_placement ? (s < pp ? s : 2 * pp - 1 - s) : s % pp; };
  std::map<int, int> rank_of;
  bool well_formed = true;
  for (int r = 0; r < pp; ++r) {
    for (const PipeliningAction& a : rows[r]) {
      const std::string at = "rank " + n(r) + " action " + action_label(a);
      if (a.stage < 0 || a.stage >= stages) {
        add_violation(out, "stage index below the number of stages", kValidateSchedule,
                      at + " (" + n(stages) + " stages)");
        well_formed = false;
        continue;
      }
      if (a.microbatch >= microbatches) {
        add_violation(out, "micro-batch index below the number of micro-batches", kValidateSchedule,
                      at + " (" + n(microbatches) + " micro-batches)");
        well_formed = false;
      }
      auto [it, fresh] = rank_of.emplace(a.stage, r);
      if (!fresh && it->second != r) {
        add_violation(out, "each stage runs on one rank", kValidateSchedule,
                      at + ", stage " + n(a.stage) + " also on rank " + n(it->second));
        well_formed = false;
      }
      if (home(a.stage) != r) {
        add_violation(out, "stage placed where torchtitan builds it", kModuleSplit,
                      at + ", stage " + n(a.stage) + " is built on rank " + n(home(a.stage)) +
                          (v_placement ? " (V placement)" : " (loop placement)"));
        well_formed = false;
      }
      // F before I or B of the same micro-batch on the stage; I before W.
      if (a.type == 'I' || a.type == 'B')
        if (!seen[{a.stage, 'F'}].count(a.microbatch)) {
          add_violation(out, "backward after its forward", kValidateSchedule,
                        at + " before its forward");
          well_formed = false;
        }
      if (a.type == 'W' && !seen[{a.stage, 'I'}].count(a.microbatch)) {
        add_violation(out, "weight backward after its input backward", kValidateSchedule,
                      at + " before its input backward");
        well_formed = false;
      }
      seen[{a.stage, a.type}].insert(a.microbatch);
    }
  }
  return well_formed;
}

// _validate_schedule: every stage runs each micro-batch's forward and backward (B, or I and W).
// Returns whether every stage does.
bool check_stage_coverage(RuleViolations& out, int stages, int microbatches, ActionsSeen& seen) {
  bool well_formed = true;
  for (int s = 0; s < stages; ++s) {
    const std::size_t f = seen[{s, 'F'}].size();
    const std::size_t b =
        seen[{s, 'B'}].size() + (seen[{s, 'I'}].size() + seen[{s, 'W'}].size()) / 2;
    if (static_cast<int>(f) != microbatches || static_cast<int>(b) != microbatches) {
      add_violation(out, "every stage runs each micro-batch's forward and backward",
                    kValidateSchedule,
                    "stage " + n(s) + ": " + n(static_cast<std::int64_t>(f)) + " forwards, " +
                        n(static_cast<std::int64_t>(b)) + " backwards for " + n(microbatches) +
                        " micro-batches");
      well_formed = false;
    }
  }
  return well_formed;
}

// _add_send_recv: ranks in order take their next action when its input is there (F of stage
// s after F of s-1, I/B of stage s after I/B of s+1); a pass in which no rank can is an error.
void check_send_recv_lowering(RuleViolations& out, const PipeliningSchedule& rows, int pp,
                              int stages) {
  std::set<std::tuple<int, char, int>> done;
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  auto ready = [&](const PipeliningAction& a) {
    if (a.type == 'F') return a.stage == 0 || done.count({a.stage - 1, 'F', a.microbatch}) > 0;
    if (a.type == 'I' || a.type == 'B')
      return a.stage == stages - 1 || done.count({a.stage + 1, 'I', a.microbatch}) > 0 ||
             done.count({a.stage + 1, 'B', a.microbatch}) > 0;
    return true;
  };
  for (;;) {
    bool progress = false;
    bool left = false;
    for (int r = 0; r < pp; ++r) {
      if (next[r] >= rows[r].size()) continue;
      left = true;
      const PipeliningAction& a = rows[r][next[r]];
      if (!ready(a)) continue;
      done.insert({a.stage, a.type, a.microbatch});
      ++next[r];
      progress = true;
    }
    if (!left) break;
    if (!progress) {
      std::string stuck;
      for (int r = 0; r < pp; ++r)
        if (next[r] < rows[r].size())
          stuck += (stuck.empty() ? "" : ", ") +
                   ("rank " + n(r) + " at " + action_label(rows[r][next[r]]));
      add_violation(out, "the lowering to send/recv can schedule every action (no deadlock)",
                    kSendRecv, stuck);
      break;
    }
  }
}

}  // namespace

RuleViolations check_pipelining_csv(std::string_view csv, int pp, int stages, int microbatches,
                                    bool v_placement) {
  RuleViolations out;
  PipeliningSchedule rows;
  try {
    rows = parse_pipelining_csv(csv);
  } catch (const InputError& e) {
    add_violation(out, "every cell is <stage><F|I|W|B><micro-batch>", kActionFormat, e.what());
    return out;
  }
  // _validate_schedule: one row per pipeline rank.
  if (static_cast<int>(rows.size()) != pp) {
    add_violation(out, "one CSV row per pipeline rank", kValidateSchedule,
                  n(static_cast<std::int64_t>(rows.size())) + " rows for " + n(pp) + " ranks");
    return out;
  }
  ActionsSeen seen;
  bool well_formed = check_actions(out, rows, pp, stages, microbatches, v_placement, seen);
  well_formed = check_stage_coverage(out, stages, microbatches, seen) && well_formed;
  if (!well_formed) return out;
  check_send_recv_lowering(out, rows, pp, stages);
  return out;
}

}  // namespace pipetune::tuner
