// torchtitan's own rules, checked on an exported job config (the TOML export_torchtitan_toml
// writes) and, when it names one, the schedule CSV it points torch.distributed.pipelining at.
//
// Sources, all pytorch/torchtitan at 238fa99 (the last TOML-configured commit) unless named
// (torchtitan_sources.hpp gives the lines):
//   torchtitan/config/job_config.py (the TOML schema: sections, keys, literal values)
//   torchtitan/protocols/train_spec.py get_train_spec, torchtitan/train.py (the model name and
//     flavor lookups; the batch sizes)
//   torchtitan/models/llama3/__init__.py llama3_args (the flavors), model/model.py FeedForward
//   torchtitan/distributed/parallel_dims.py (ParallelDims._validate, build_mesh)
//   torchtitan/distributed/dual_pipe_v.py (EP + DualPipeV + activation checkpointing)
//   torchtitan/distributed/pipeline_parallel.py (pipeline_llm, build_pipeline_schedule,
//     generate_llm_fqn_per_model_part, pipeline_module_split)
//   pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc (get_schedule_class,
//     _Action, _validate_schedule, _add_send_recv)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/spec/model_spec.hpp"
#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner {

// A transformer's shape as torchtitan's model arguments fix it (ffn_hidden as its FeedForward
// computes it from dim, multiple_of and ffn_dim_multiplier).
struct TorchtitanModelShape {
  std::int64_t dim = 0;
  std::int64_t n_layers = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t vocab_size = 0;
  std::int64_t ffn_hidden = 0;
  std::int64_t experts = 1;  // 1: dense
  bool swiglu = true;        // gated MLP, RMSNorm, RoPE (Llama blocks)
  bool tied_embeddings = false;
  bool operator==(const TorchtitanModelShape&) const = default;
};

// A model flavor torchtitan registers: TrainSpec name ([model] name), flavor key ([model]
// flavor) and the shape its arguments give.
struct TorchtitanFlavor {
  std::string model;
  std::string flavor;
  TorchtitanModelShape shape;
  // The tokenizer folder torchtitan's own config for the flavor names ([model] hf_assets_path;
  // torchtitan/models/llama3/train_configs/*.toml@238fa99).
  std::string hf_assets_path;
  // b5bcd76: the config function of torchtitan's own run of the flavor (config_registry.py),
  // which an exported config derives from; empty at 238fa99.
  std::string base_config;
};

// The flavors pipetune can name (llama3's llama3_args at 238fa99; the other TrainSpecs' models,
// MoE ones included, have blocks pipetune's model spec does not describe).
const std::vector<TorchtitanFlavor>& torchtitan_flavors();

// The flavors of torchtitan b5bcd76's llama3 model_registry that have a run of their own to
// derive from (llama3_configs; 1B and 3B have none).
const std::vector<TorchtitanFlavor>& torchtitan_config_flavors();

// A pipetune model's shape in torchtitan's terms.
TorchtitanModelShape torchtitan_shape(const spec::ModelSpec& model);

// The registered flavor (of `flavors`: torchtitan_flavors() or torchtitan_config_flavors())
// whose shape is the model's exactly; nullopt when there is none.
std::optional<TorchtitanFlavor> torchtitan_flavor_for(const spec::ModelSpec& model,
                                                      const std::vector<TorchtitanFlavor>& flavors);

// What the launch supplies besides the file: the number of processes (NGPU) and the layer count
// of the model the plan was tuned for (torchtitan takes it from the registered flavor; the
// check compares the two and uses the flavor's).
struct TorchtitanLaunch {
  int world_size = 0;
  int num_layers = 0;
  // The schedule CSV's text when the config names one (pipeline_parallel_schedule_csv); empty
  // when there is none or it was not supplied.
  std::string schedule_csv;
  // The plan's model, when known: the named flavor must have exactly its shape.
  std::optional<TorchtitanModelShape> model_shape;
};

// The TOML's keys as "section.key" -> value text (strings unquoted, a one-line array as written).
// Throws InputError for a line that is neither a section, a key = value, a comment nor blank.
std::map<std::string, std::string> parse_torchtitan_toml(std::string_view toml);

// Every torchtitan / torch.distributed.pipelining rule the config (and CSV) break.
RuleViolations check_torchtitan_config(std::string_view toml, const TorchtitanLaunch& launch);

// The CSV rules alone: rows, stage placement, action counts and order, and that torch's lowering
// to send/recv actions can schedule every action (no rank waits forever).
//   v_placement: the config's schedule class places stages V-shaped (ZBVZeroBubble, DualPipeV)
RuleViolations check_pipelining_csv(std::string_view csv, int pp, int stages, int microbatches,
                                    bool v_placement);

}  // namespace pipetune::tuner
