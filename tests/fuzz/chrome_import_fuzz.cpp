// Fuzz target: `import-trace` on a mutated Chrome trace / Kineto JSON, plain or gzip (the
// importer reads both: db/import/chrome_trace_import.hpp; a .json.gz input is recognised by its
// gzip magic bytes, not the name). The input is written to a scratch file and imported; an import
// that yields spans goes through the analyses `report` runs on it. Malformed JSON, a bad gzip
// stream, wrong types, unpaired events and files beyond the import limits must be InputErrors.
//
// The limits are the importer's own (db/import/import_limits.hpp), with the thresholds that
// count bytes, records and ranks scaled to one fuzz input (at most 1 MB, 10 s and 2048 MB of
// RSS under ASan): a gzip input then inflates at most 1 MiB before the 100:1 ratio applies, so a
// bomb is refused in milliseconds, and the seeds `gzip-bomb.json.gz` (4 MiB of events in 12 KB)
// and `ranks-over-limit.json.gz` (one rank more than the limit) reach both refusals.
#include <cstddef>
#include <cstdint>

#include "db/import/chrome_trace_import.hpp"
#include "db/import/import_limits.hpp"
#include "profiler/analysis/analysis.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipetune;
  namespace an = profiler::analysis;
  if (size > 1024 * 1024) return 0;
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const fuzz::ScratchFile file(gzip ? ".json.gz" : ".json", data, size);
  db::ImportLimits limits;
  limits.max_text_bytes = 64 << 20;
  limits.ratio_check_after_bytes = 1 << 20;
  limits.max_records = 1 << 20;
  limits.max_ranks = 4096;
  fuzz::refusals_are_clean([&] {
    const db::ImportedProfile p = db::import_chrome_trace(file.path(), limits);
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
