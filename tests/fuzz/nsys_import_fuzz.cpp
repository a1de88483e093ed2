// Fuzz target: `import-nsys` on a mutated Nsight Systems SQLite export. The input is written to a
// scratch .sqlite file and imported (db/import/nsys_sqlite.hpp); an import that yields spans is
// checked the way the CLI's store path and `report` see it (extent, iterations). A damaged file,
// a missing table or column, or text where numbers belong must be an InputError.
#include <cstddef>
#include <cstdint>

#include "db/import/nsys_sqlite.hpp"
#include "profiler/analysis/analysis.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipetune;
  if (size > 1024 * 1024) return 0;
  const fuzz::ScratchFile file(".sqlite", data, size);
  fuzz::refusals_are_clean([&] {
    const db::ImportedProfile p = db::import_nsys_sqlite(file.path());
    if (p.trace.spans.empty()) return;  // the CLI refuses it ("no spans to import")
    profiler::analysis::trace_extent(p.trace);
    profiler::analysis::stage_breakdown(p.trace);
  });
  return 0;
}
