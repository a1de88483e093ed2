#include "db/store/training_run_sink.hpp"

#include <memory>
#include <utility>

#include "db/store/record_json.hpp"
#include "db/store/run_writer.hpp"

namespace pipetune::db {

namespace {

RunStatus run_status(profiler::RunEnd end) {
  switch (end) {
    case profiler::RunEnd::Complete:
      return RunStatus::Complete;
    case profiler::RunEnd::Interrupted:
      return RunStatus::Interrupted;
    case profiler::RunEnd::Failed:
      break;
  }
  return RunStatus::Failed;
}

class WorkspaceRunSink final : public profiler::RunSink {
 public:
  WorkspaceRunSink(const std::string& path, RunInfo info, WriterOptions options)
      : writer_(path, std::move(info), options) {}

  std::int64_t run_id() const override { return writer_.run_id(); }
  void append(profiler::Trace part) override { writer_.append(std::move(part)); }
  void append_kernels(std::vector<profiler::KernelRecord> kernels) override {
    writer_.append_kernels(std::move(kernels));
  }
  void flush() override { writer_.flush(); }
  void finish(profiler::RunEnd end, const profiler::TrainingSummary* summary) override {
    if (summary != nullptr)
      writer_.set_summary_json(
          training_summary_json(summary->iteration_seconds, summary->tokens_per_s, summary->losses)
              .dump());
    writer_.finish(run_status(end));
  }

 private:
  RunWriter writer_;
};

}  // namespace

spec::TrainingRunOpener training_run_opener(std::string path, std::string name) {
  return [path = std::move(path), name = std::move(name)](
             const spec::TrainingRunStart& start) -> std::unique_ptr<profiler::RunSink> {
    WriterOptions options;
    options.check_integrity = true;
    return std::make_unique<WorkspaceRunSink>(
        path,
        RunInfo{profiler::TraceKind::Measured,
                name.empty() ? training_run_name(start.model, start.plan) : name,
                training_plan_json(start.model, start.plan, start.steps, start.seed, start.engine)
                    .dump(),
                training_specs_json(start.model).dump()},
        options);
  };
}

}  // namespace pipetune::db
