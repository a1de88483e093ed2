#include "cli/tuning_target.hpp"

#include "engine/errors.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"

namespace pipetune::cli {

void add_target_options(CLI::App* cmd, TargetArgs& a) {
  cmd->add_option("--model", a.model, "Model preset or TOML file")->required();
  cmd->add_option("--hardware", a.hardware, "Hardware preset or TOML file")->required();
  cmd->add_option("--gpus", a.gpus, "Number of GPUs")->required();
  cmd->add_option("--nodes-of", a.nodes_of, "GPUs per node (default: the hardware's)");
  cmd->add_option("--global-batch", a.global_batch, "Sequences per iteration")->required();
  cmd->add_option("--seq", a.seq, "Sequence length (default: the model's)");
}

Target resolve_target(const TargetArgs& a) {
  if (a.gpus < 1) throw InputError("--gpus must be positive (got " + std::to_string(a.gpus) + ")");
  if (a.nodes_of < 0)
    throw InputError("--nodes-of must be positive (got " + std::to_string(a.nodes_of) + ")");
  if (a.global_batch < 1)
    throw InputError("--global-batch must be positive (got " + std::to_string(a.global_batch) +
                     ")");
  if (a.seq < 0) throw InputError("--seq must be positive (got " + std::to_string(a.seq) + ")");
  Target t;
  t.model = spec::load_model(a.model);
  if (a.seq > 0) t.model.seq_len = a.seq;
  const spec::HardwareSpec hw = spec::load_hardware(a.hardware);
  t.cluster = spec::make_cluster(hw, a.gpus);
  if (a.nodes_of > 0) t.cluster.devices_per_node = a.nodes_of;
  t.global_batch = a.global_batch;
  // Contradictions between the options (8 GPUs in nodes of 3...) before any search.
  spec::validate(t.model);
  spec::validate(t.cluster);
  return t;
}

nlohmann::json plan_to_json(const spec::ParallelPlan& p, const std::string& vocab_label) {
  return {{"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"ep", p.ep},
          {"chunks", p.chunks},
          {"micro_batch_size", p.micro_batch_size},
          {"microbatches", p.microbatches},
          {"global_batch", p.global_batch},
          {"schedule", p.schedule},
          {"vocab", vocab_label},
          {"layer_split", p.layer_split},
          {"recompute", std::string(spec::recompute_name(p.recompute))},
          {"sequence_parallel", p.sequence_parallel},
          {"zero_stage", p.zero_stage}};
}

spec::ParallelPlan plan_from_json(const nlohmann::json& j, std::string& vocab_label) {
  try {
    spec::ParallelPlan p;
    p.tp = j.at("tp");
    p.pp = j.at("pp");
    p.dp = j.at("dp");
    p.ep = j.at("ep");
    p.chunks = j.at("chunks");
    p.micro_batch_size = j.at("micro_batch_size");
    p.microbatches = j.at("microbatches");
    p.global_batch = j.at("global_batch");
    p.schedule = j.at("schedule");
    vocab_label = j.at("vocab");
    if (vocab_label != "redis") p.vocab = schedule::parse_vocab_mode(vocab_label);
    p.layer_split = j.at("layer_split").get<std::vector<int>>();
    p.recompute = spec::parse_recompute(j.at("recompute").get<std::string>());
    p.sequence_parallel = j.at("sequence_parallel");
    p.zero_stage = j.at("zero_stage");
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("stored plan: ") + e.what());
  }
}

nlohmann::json trial_json(const TargetArgs& t, const spec::ParallelPlan& plan,
                          const std::string& vocab_label) {
  return {{"model", t.model},
          {"hardware", t.hardware},
          {"gpus", t.gpus},
          {"nodes_of", t.nodes_of},
          {"global_batch", t.global_batch},
          {"seq", t.seq},
          {"plan", plan_to_json(plan, vocab_label)}};
}

void read_trial_json(const nlohmann::json& j, TargetArgs& t, spec::ParallelPlan& plan,
                     std::string& vocab_label) {
  try {
    t.model = j.at("model");
    t.hardware = j.at("hardware");
    t.gpus = j.at("gpus");
    t.nodes_of = j.at("nodes_of");
    t.global_batch = j.at("global_batch");
    t.seq = j.at("seq");
    plan = plan_from_json(j.at("plan"), vocab_label);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("stored trial: ") + e.what());
  }
}

std::string plan_summary(const spec::ParallelPlan& p, const std::string& vocab_label) {
  std::string s =
      "tp=" + std::to_string(p.tp) + " pp=" + std::to_string(p.pp) + " dp=" + std::to_string(p.dp);
  if (p.ep > 1) s += " ep=" + std::to_string(p.ep);
  s += " mbs=" + std::to_string(p.micro_batch_size) + " " + p.schedule;
  if (p.chunks > 1) s += " v=" + std::to_string(p.chunks);
  s += " vocab=" + vocab_label + " recompute=" + std::string(spec::recompute_name(p.recompute)) +
       " zero=" + std::to_string(p.zero_stage);
  return s;
}

}  // namespace pipetune::cli
