// The GUI's plan export follows the rule every output file does (db/output_file.hpp): a FIFO or a
// folder is refused naming what it is and left as it was, even once the user confirmed
// replacing; a symbolic link is written through and stays a link.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_spec.hpp"
#include "gui/core/plan_export.hpp"
#include "tests/gui/support/temp_dir.hpp"

namespace pipetune::gui {
namespace {

namespace fs = std::filesystem;

tuner::ExportRequest tiny_request() {
  const spec::RunSpec r = spec::load_run("tiny-train");
  tuner::ExportRequest q;
  q.model = r.model;
  q.cluster = r.cluster;
  q.plan = r.plan;
  spec::apply_defaults(q.plan);
  return q;
}

std::string input_error_of(const QString& path, bool overwrite) {
  try {
    write_export(tuner::ExportFormat::Pipetune, tiny_request(), path, overwrite);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PlanExportPaths, FifosAndFoldersAreRefusedAndLeftAsTheyWere) {
  testing::TempDir dir;
  const std::string fifo = dir.file("fifo.toml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directory(dir.file("folder.toml"));
  for (const bool overwrite : {false, true}) {
    EXPECT_NE(input_error_of(dir.qfile("fifo.toml"), overwrite).find("is a FIFO (named pipe)"),
              std::string::npos);
    EXPECT_NE(input_error_of(dir.qfile("folder.toml"), overwrite).find("is a directory"),
              std::string::npos);
    EXPECT_NE(input_error_of(dir.qfile("nodir/plan.toml"), overwrite).find("does not exist"),
              std::string::npos);
  }
  EXPECT_EQ(fs::symlink_status(fifo).type(), fs::file_type::fifo);
  EXPECT_TRUE(fs::is_directory(dir.file("folder.toml")));
}

TEST(PlanExportPaths, ALinkIsWrittenThroughAndStaysALink) {
  testing::TempDir dir;
  std::ofstream(dir.file("real.toml")) << "old";
  fs::create_symlink("real.toml", dir.file("link.toml"));
  EXPECT_EQ(
      write_export(tuner::ExportFormat::Pipetune, tiny_request(), dir.qfile("link.toml"), false),
      ExportWrite::ExistsNotOverwritten);
  EXPECT_EQ(
      write_export(tuner::ExportFormat::Pipetune, tiny_request(), dir.qfile("link.toml"), true),
      ExportWrite::Written);
  EXPECT_TRUE(fs::is_symlink(dir.file("link.toml")));
  std::ifstream in(dir.file("real.toml"));
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str(), "old");
  EXPECT_NO_THROW(spec::load_run(dir.file("real.toml")));
}

// What the CLI writes beside a file the GUI writes too: DeepSpeed's model code next to its JSON
// (the JSON cannot hold the pipeline), and an existing one is not replaced unconfirmed.
TEST(PlanExportPaths, DeepspeedsModelCodeIsWrittenBesideItsConfig) {
  testing::TempDir dir;
  tuner::ExportRequest q;
  q.model = spec::load_model("llama3-8b");
  q.cluster = spec::load_cluster("dgx-h100-8");
  q.plan.pp = 4;
  q.plan.dp = 2;
  q.plan.microbatches = 8;
  spec::apply_defaults(q.plan);
  q.cluster.devices = q.plan.world_size();
  const tuner::ExportSideFile side = tuner::export_side_file(tuner::ExportFormat::Deepspeed, q);
  ASSERT_FALSE(side.text.empty());
  EXPECT_EQ(write_export(tuner::ExportFormat::Deepspeed, q, dir.qfile("ds.json"), false),
            ExportWrite::Written);
  std::ifstream in(dir.file(side.name.c_str()));
  std::stringstream code;
  code << in.rdbuf();
  EXPECT_EQ(code.str(), side.text);
  EXPECT_EQ(write_export(tuner::ExportFormat::Deepspeed, q, dir.qfile("other.json"), false),
            ExportWrite::ExistsNotOverwritten);
  EXPECT_FALSE(fs::exists(dir.file("other.json")));
}

}  // namespace
}  // namespace pipetune::gui
