// The process heap of a CLI command, set up before anything else runs.
#pragma once

namespace pipetune::cli {

// Backs the first 64 MB of the heap with transparent huge pages where the kernel offers them
// (THP "madvise" or "always"), and keeps blocks up to 32 MB and freed memory in the heap, where
// later allocations reuse pages already touched. A command builds its schedules, traces and
// plans in vectors of a few MB each, and a first touch of each 4 KB page is a page fault: about
// 3,500 of them in `simulate` of V-Half with 32 stages and 512 micro-batches, most of its time
// on a virtual machine where a fault is dear; about 1,000 with the heap set up. Call once, first
// in main(). Does nothing, and returns false, where the heap is not glibc's malloc (another C
// library, or a sanitizer's allocator in its place).
bool set_up_heap();

}  // namespace pipetune::cli
