// Everything about specs in one include: models, hardware, clusters, plans, runs, presets,
// loading, validation, and writing run files and Slurm launches.
#pragma once

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/hardware_spec.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "engine/spec/presets.hpp"
#include "engine/spec/run_file_writer.hpp"
#include "engine/spec/run_spec.hpp"
#include "engine/spec/slurm_launch.hpp"
#include "engine/spec/validate.hpp"
