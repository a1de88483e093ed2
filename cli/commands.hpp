// The pipetune subcommands. Each registers its options on the CLI11 app and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

namespace pipetune::cli {

// Registers `simulate`; its callback runs the simulation and prints the report.
void add_simulate_command(CLI::App& app);
// Registers `train`: trains on the embedded engine.
void add_train_command(CLI::App& app);
// Registers `presets`: lists presets by kind.
void add_presets_command(CLI::App& app);
// Registers `predict`: evaluates one plan with the cost, schedule and memory models.
void add_predict_command(CLI::App& app);
// Registers `tune`: searches plans and ranks them.
void add_tune_command(CLI::App& app);
// Workspace commands: `runs`, `report`, `timeline`, `diff`, `export-trace`, `import-nsys`,
// `import-trace`.
void add_runs_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_timeline_command(CLI::App& app);
void add_diff_command(CLI::App& app);
void add_trace_file_commands(CLI::App& app);
// Registers `export`: a tuned plan as a framework's launch file.
void add_export_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);

// After every command is added: each option that takes a value refuses an empty one (a parse
// error naming the option), instead of running as if it were left out.
void refuse_empty_values(CLI::App& app);

}  // namespace pipetune::cli
