// Loading models, hardware and clusters from TOML (presets or files). Absent keys take their
// defaults; unknown keys, wrong types and non-positive sizes are SpecErrors that name the file,
// the line and the key; a malformed file is a SpecError naming file, line and column. Every
// loaded spec has passed validate().
//
// Model files: name, description (both optional; name defaults to the file name), layers, hidden,
// heads, vocab, seq_len (required), kv_heads (= heads), ffn_hidden (default_ffn_hidden),
// experts (1), top_k (1), moe_every (1), activation ("gelu" | "swiglu"), tied_embeddings (false),
// vocab_divisible_by (1: no padding rows; Megatron-LM's make_vocab_size_divisible_by).
//
// Hardware files: name, description, peak_flops, hbm_bytes, hbm_bandwidth, intra_node_bandwidth,
// inter_node_bandwidth (required; FLOP/s, bytes, bytes/s), devices_per_node (8),
// intra_node_latency, inter_node_latency (seconds; defaults in hardware_spec.hpp).
//
// Cluster files: name, description, hardware (a hardware preset name or path, or a table of the
// keys of a hardware file: [hardware], in a run file [cluster.hardware]), nodes or devices
// (one of them, or node_groups), devices_per_node, intra_node_bandwidth, inter_node_bandwidth,
// intra_node_latency, inter_node_latency (default: the hardware's), and node groups with their
// own NICs as an array of tables:  [[node_groups]]  nodes = 4  inter_node_bandwidth = 25e9
//
// Model and cluster files may start from another preset: `preset = "llama3-8b"` loads it first
// and the file's keys override it. Relative paths in a file are relative to that file's folder.
#pragma once

#include <filesystem>
#include <string_view>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/hardware_spec.hpp"
#include "engine/spec/model_spec.hpp"

namespace pipetune::spec {

// A preset name (presets.hpp) or a path to a TOML file.
ModelSpec load_model(std::string_view name_or_path);
HardwareSpec load_hardware(std::string_view name_or_path);
ClusterSpec load_cluster(std::string_view name_or_path);

// The same from TOML text; `source` names it in messages and is the default name; relative
// paths inside resolve against base_dir (else the working directory).
ModelSpec parse_model(std::string_view toml_text, std::string_view source = "model",
                      const std::filesystem::path& base_dir = {});
HardwareSpec parse_hardware(std::string_view toml_text, std::string_view source = "hardware");
ClusterSpec parse_cluster(std::string_view toml_text, std::string_view source = "cluster",
                          const std::filesystem::path& base_dir = {});

}  // namespace pipetune::spec
