// pipetune: thin front end. Parses, calls the libraries, prints. Exit codes: 0 success,
// 1 runtime failure, 2 usage or input error.
#include <csignal>
#include <exception>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/error_wording.hpp"
#include "cli/heap_setup.hpp"
#include "cli/stdout_status.hpp"
#include "engine/errors.hpp"
#include "engine/tensor/cpu/openblas_library.hpp"
#include "profiler/analysis/analysis_error.hpp"

int main(int argc, char** argv) {
  pipetune::cli::set_up_heap();
  pipetune::tensor::set_openblas_thread_timeout();
  // A file-size limit (RLIMIT_FSIZE, a quota) must fail the write that crosses it with EFBIG,
  // which the store reports as a full disk and records, not kill the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  // A closed stdout (`pipetune train | head`) must fail a write, not kill a run in the middle:
  // the command finishes and keeps its work, and the failure is reported below.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"pipetune: simulate, tune and inspect pipeline-parallel LLM training"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");
  pipetune::cli::add_simulate_command(app);
  pipetune::cli::add_train_command(app);
  pipetune::cli::add_presets_command(app);
  pipetune::cli::add_predict_command(app);
  pipetune::cli::add_tune_command(app);
  pipetune::cli::add_runs_command(app);
  pipetune::cli::add_report_command(app);
  pipetune::cli::add_timeline_command(app);
  pipetune::cli::add_diff_command(app);
  pipetune::cli::add_trace_file_commands(app);
  pipetune::cli::add_export_command(app);
  pipetune::cli::add_calibrate_command(app);
  pipetune::cli::refuse_empty_values(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help and --help-all too (they derive from Success)
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "pipetune: " << e.what() << " (see pipetune --help)\n";
    return 2;
  } catch (const pipetune::InputError& e) {
    std::cerr << "pipetune: error: " << pipetune::cli::worded(e) << "\n";
    return 2;
  } catch (const pipetune::profiler::analysis::AnalysisError& e) {
    std::cerr << "pipetune: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "pipetune: failed: " << pipetune::cli::worded_failure(e) << "\n";
    return 1;
  }
  if (const std::string failure = pipetune::cli::stdout_failure(); !failure.empty()) {
    std::cerr << "pipetune: " << failure << "\n";
    return 1;
  }
  return 0;
}
