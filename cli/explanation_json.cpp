#include "cli/explanation_json.hpp"

namespace pipetune::cli {

namespace {

nlohmann::json parts_json(const tuner::TimeParts& t) {
  return {{"compute", t.compute},
          {"tp_comm", t.tp_comm},
          {"ep_comm", t.ep_comm},
          {"sharded_comm", t.sharded_comm},
          {"bubble", t.bubble},
          {"pipeline", t.pipeline()},
          {"data_parallel", t.data_parallel},
          {"optimizer", t.optimizer},
          {"total", t.total()}};
}

nlohmann::json link_json(const tuner::LinkUse& u) {
  nlohmann::json j = {{"group", u.group},
                      {"collective", u.collective},
                      {"stage", u.stage},
                      {"members", u.members},
                      {"inter_node", u.inter_node},
                      {"members_per_node", u.members_per_node},
                      {"nic_bandwidth", u.nic_bandwidth},
                      {"bandwidth", u.bandwidth},
                      {"time", u.time}};
  if (u.peer_stage >= 0) j["peer_stage"] = u.peer_stage;
  return j;
}

nlohmann::json breakdown_json(const tuner::PlanBreakdown& b, int rank) {
  return {{"rank", rank},
          {"feasible", b.feasible},
          {"iteration_time", b.iteration_time},
          {"pipeline_time", b.pipeline_time},
          {"bubble_ratio", b.bubble_ratio},
          {"binding_stage", b.binding_stage},
          {"parts", parts_json(b.parts)},
          {"busiest_link", b.busiest_link ? link_json(*b.busiest_link) : nlohmann::json()}};
}

}  // namespace

nlohmann::json explanation_json(const tuner::PlanExplanation& e) {
  nlohmann::json settings = nlohmann::json::array();
  for (const tuner::SettingDifference& d : e.settings)
    settings.push_back({{"setting", d.setting}, {"best", d.first}, {"runner_up", d.second}});
  return {{"best_rank", 1},
          {"runner_up_rank", 2},
          {"margin", e.margin()},
          {"difference", parts_json(e.difference)},
          {"best", breakdown_json(e.first, 1)},
          {"runner_up", breakdown_json(e.second, 2)},
          {"settings", settings},
          {"text", tuner::explanation_text(e)}};
}

nlohmann::json no_runner_up_json() {
  return {{"best_rank", 1}, {"runner_up_rank", nullptr}, {"text", kNoRunnerUp}};
}

}  // namespace pipetune::cli
