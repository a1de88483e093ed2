// Run names (db/store/run_name): valid UTF-8 without control characters, refused otherwise with
// the byte offset, checked by RunWriter before anything is created; stored text is printed
// through printable_text, which escapes exactly what a name may not hold.
#include "db/store/run_name.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"

namespace pipetune::db {
namespace {

TEST(RunName, TextWithoutControlCharactersIsAName) {
  for (const std::string name : {"", "tiny tp=2 pp=2 dp=2 1f1b", "Überlauf ✓", "日本語",
                                 "emoji \xf0\x9f\x98\x80", "a\\b \"quoted\"", "\xc2\xa0nbsp"})
    EXPECT_EQ(run_name_problem(name), "") << name;
}

TEST(RunName, InvalidUtf8IsNamedByItsByteOffset) {
  EXPECT_EQ(run_name_problem("ab\xff"), "byte 2 (0xff) is not valid UTF-8");
  EXPECT_EQ(run_name_problem("\x80"), "byte 0 (0x80) is not valid UTF-8");  // stray continuation
  EXPECT_EQ(run_name_problem("ok \xe2\x9c"), "byte 3 (0xe2) is not valid UTF-8");   // truncated
  EXPECT_EQ(run_name_problem("\xc0\xaf"), "byte 0 (0xc0) is not valid UTF-8");      // overlong '/'
  EXPECT_EQ(run_name_problem("\xe0\x80\xaf"), "byte 0 (0xe0) is not valid UTF-8");  // overlong
  EXPECT_EQ(run_name_problem("\xed\xa0\x80"), "byte 0 (0xed) is not valid UTF-8");  // surrogate
  EXPECT_EQ(run_name_problem("\xf4\x90\x80\x80"), "byte 0 (0xf4) is not valid UTF-8");  // > 10FFFF
  EXPECT_EQ(run_name_problem("\xf8\x88\x80\x80\x80"), "byte 0 (0xf8) is not valid UTF-8");
}

TEST(RunName, ControlCharactersAreRefusedWithTheirCodePoint) {
  EXPECT_EQ(run_name_problem(std::string("a\0b", 3)), "byte 1 is a control character (U+0000)");
  EXPECT_EQ(run_name_problem("tab\there"), "byte 3 is a control character (U+0009)");
  EXPECT_EQ(run_name_problem("\x1b[2J"), "byte 0 is a control character (U+001B)");
  EXPECT_EQ(run_name_problem("del\x7f"), "byte 3 is a control character (U+007F)");
  EXPECT_EQ(run_name_problem("\xc3\xa9\xc2\x85"), "byte 2 is a control character (U+0085)");
  EXPECT_THROW(check_run_name("a\nb"), InputError);
  try {
    check_run_name("a\nb");
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("run name: byte 1 is a control character (U+000A)", 0),
              0u)
        << e.what();
  }
}

TEST(RunName, PrintableTextEscapesWhatANameMayNotHold) {
  EXPECT_EQ(printable_text("Überlauf ✓"), "Überlauf ✓");
  EXPECT_EQ(printable_text("A\xff\x1b[2J\x07"), "A\\xff\\x1b[2J\\x07");
  EXPECT_EQ(printable_text("c1 \xc2\x9b!"), "c1 \\xc2\\x9b!");
  EXPECT_EQ(printable_text("cut \xe2\x9c"), "cut \\xe2\\x9c");
  // Whatever it is given, what comes out is a name.
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  EXPECT_EQ(run_name_problem(printable_text(every_byte)), "");
}

TEST(RunName, TheWriterRefusesABadNameBeforeCreatingAnything) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "pipetune_run_name";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "w.db").string();
  EXPECT_THROW(RunWriter(db, RunInfo{profiler::TraceKind::Simulated, "bad\xff", "", ""}),
               InputError);
  EXPECT_FALSE(std::filesystem::exists(db));
  {
    RunWriter ok(db, RunInfo{profiler::TraceKind::Simulated, "good ✓", "", ""});
    ok.finish();
  }
  Workspace ws(db);
  ASSERT_EQ(ws.runs().size(), 1u);
  EXPECT_EQ(ws.runs()[0].name, "good ✓");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pipetune::db
