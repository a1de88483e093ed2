#include "tuner/export/pipelining_csv.hpp"

#include <cctype>
#include <sstream>

#include "engine/errors.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {

std::string action_label(const PipeliningAction& a) {
  return std::to_string(a.stage) + a.type + std::to_string(a.microbatch);
}

PipeliningSchedule pipelining_actions(const schedule::Schedule& s) {
  if (s.slices > 1)
    throw InputError("schedule '" + s.name +
                     "' cuts each micro-batch into token slices: torch.distributed.pipelining's "
                     "actions carry whole micro-batches");
  if (s.partial())
    throw InputError("schedule '" + s.name +
                     "' lets micro-batches skip stages: torch.distributed.pipelining runs every "
                     "micro-batch through every stage");
  PipeliningSchedule out(s.ranks.size());
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    for (const schedule::Op& op : s.ranks[r]) {
      // A layer group's gradient reduction (R) has no cell: torch's stages reduce their own
      // gradients once their last backward has run, where pipetune puts R.
      if (schedule::is_reduction(op.kind)) continue;
      char type = 'F';
      switch (op.kind) {
        case schedule::OpKind::F:
          type = 'F';
          break;
        case schedule::OpKind::B:
          type = 'I';
          break;
        case schedule::OpKind::W:
          type = 'W';
          break;
        case schedule::OpKind::BW:
          type = 'B';
          break;
        default:
          throw InputError("schedule " + s.name + " has vocabulary op " + schedule::op_label(op) +
                           ", which torch.distributed.pipelining has no action for");
      }
      out[r].push_back(
          {s.group_of(static_cast<int>(r), op.chunk), type, op.microbatch, op.overlaps_previous});
    }
  }
  return out;
}

std::string pipelining_csv(const schedule::Schedule& s) {
  std::string out;
  for (const std::vector<PipeliningAction>& row : pipelining_actions(s)) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool pair = i + 1 < row.size() && row[i + 1].overlaps_previous;
      out += i ? "," : "";
      if (!pair) {
        out += action_label(row[i]);
        continue;
      }
      out += "(" + action_label(row[i]) + ";" + action_label(row[i + 1]) + ")OVERLAP_F_B";
      ++i;
    }
    out += "\n";
  }
  return out;
}

namespace {

// "<digits><F|I|W|B><digits>", the whole cell.
bool parse_action(std::string cell, PipeliningAction& a) {
  while (!cell.empty() && std::isspace(static_cast<unsigned char>(cell.back()))) cell.pop_back();
  std::size_t i = cell.find_first_not_of(" \t");
  if (i == std::string::npos) return false;
  const std::size_t stage_end = cell.find_first_not_of("0123456789", i);
  if (stage_end == i || stage_end == std::string::npos) return false;
  const char type = cell[stage_end];
  if (type != 'F' && type != 'I' && type != 'W' && type != 'B') return false;
  const std::string mb = cell.substr(stage_end + 1);
  if (mb.empty() || mb.find_first_not_of("0123456789") != std::string::npos) return false;
  a.stage = std::stoi(cell.substr(i, stage_end - i));
  a.type = type;
  a.microbatch = std::stoi(mb);
  return true;
}

}  // namespace

PipeliningSchedule parse_pipelining_csv(std::string_view text) {
  PipeliningSchedule out;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<PipeliningAction>& row = out.emplace_back();
    std::istringstream cells(line);
    std::string cell;
    int column = 0;
    while (std::getline(cells, cell, ',')) {
      ++column;
      if (cell.find_first_not_of(" \t") == std::string::npos) continue;
      const auto bad = [&](const std::string& why) {
        return InputError("schedule CSV row " + std::to_string(out.size() - 1) + " cell " +
                          std::to_string(column) + ": '" + cell + "' " + why);
      };
      std::string text = cell;
      text.erase(0, text.find_first_not_of(" \t"));
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.pop_back();
      if (!text.empty() && text.front() == '(') {
        // "(<action>;<action>)OVERLAP_F_B": the two run together, the second marked.
        const std::string suffix = ")OVERLAP_F_B";
        const std::size_t semi = text.find(';');
        PipeliningAction first, second;
        if (text.size() <= suffix.size() ||
            text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0 ||
            semi == std::string::npos || text.find(';', semi + 1) != std::string::npos ||
            !parse_action(text.substr(1, semi - 1), first) ||
            !parse_action(text.substr(semi + 1, text.size() - suffix.size() - semi - 1), second))
          throw bad("is not (<action>;<action>)OVERLAP_F_B");
        second.overlaps_previous = true;
        row.push_back(first);
        row.push_back(second);
        continue;
      }
      PipeliningAction a;
      if (!parse_action(text, a)) throw bad("is not <stage><F|I|W|B><micro-batch>");
      row.push_back(a);
    }
  }
  return out;
}

schedule::Schedule predicted_schedule(const ExportRequest& r) {
  const PlanEvaluation e = evaluate_plan(r.model, r.cluster, r.plan);
  return spec::plan_schedule(r.plan, e.costs.table);
}

}  // namespace pipetune::tuner
