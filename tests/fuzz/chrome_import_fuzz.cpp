// Fuzz target: `import-trace` on a mutated Chrome trace / Kineto JSON, plain or gzip (the
// importer reads both: db/import/chrome_trace_import.hpp; a .json.gz input is recognised by its
// gzip magic bytes, not the name). The input is written to a scratch file and imported; an import
// that yields spans goes through the analyses `report` runs on it. Malformed JSON, a bad gzip
// stream, wrong types and unpaired events must be InputErrors.
#include <cstddef>
#include <cstdint>

#include "db/import/chrome_trace_import.hpp"
#include "profiler/analysis/analysis.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipetune;
  namespace an = profiler::analysis;
  if (size > 1024 * 1024) return 0;
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const fuzz::ScratchFile file(gzip ? ".json.gz" : ".json", data, size);
  fuzz::refusals_are_clean([&] {
    const db::ImportedProfile p = db::import_chrome_trace(file.path());
    if (p.trace.spans.empty()) return;  // the CLI refuses it ("no spans to import")
    const std::size_t iterations = an::iteration_count(p.trace);
    an::BreakdownOptions b;
    b.window = an::iteration_window(p.trace, iterations - 1);
    an::stage_breakdown(p.trace, b);
    an::CriticalPathOptions c;
    c.window = b.window;
    c.span_slack = false;
    an::critical_path(p.trace, c);
  });
  return 0;
}
