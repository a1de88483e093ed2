// Import of an Nsight Systems SQLite export (`nsys export --type sqlite`) into a Trace plus
// KernelRecords. Tables and columns are probed (sqlite_master, PRAGMA table_info), never assumed:
// nsys creates tables lazily, so a missing optional table is a warning, not an error.
//
// Mapping (see reference/profiling.md Part 1):
//  - Ranks are the processes with GPU activity (kernels, copies, memsets; the processes with NVTX
//    ranges or CUDA API calls when the capture has no GPU activity). Rank numbers, first rule that
//    applies to every such process: (1) an explicit rank — MPI_RANKS, or a thread named "MPI Rank
//    N" / "rank N" through ThreadNames or an NVTX thread-name event (eventType 39); (2) device
//    order, when each process ran on exactly one device and no two share one: rank i is the
//    process on the i-th smallest device id; (3) PID order. ImportedRank::source says which.
//  - Lanes: per rank one Gpu lane per CUDA stream (index = streamId) and one Host lane per thread
//    with NVTX ranges or CUDA API calls (index = TID). globalPid/globalTid decode as
//    PID = (id >> 24) & 0xFFFFFF, TID = id & 0xFFFFFF.
//  - Kernels: span name = shortName (else demangledName) through StringIds;
//  profiler::KernelRecord::name =
//    demangledName. NCCL kernels become communication spans on their stream (AllReduce,
//    AllGather, ReduceScatter, Broadcast, AllToAll, Send, Recv). A SendRecv kernel is Recv only
//    when the NCCL API ranges (NVTX domain "NCCL", or an unnamed non-default domain whose ranges
//    are named nccl*) that issued its launch — the ranges from ncclGroupStart to the
//    ncclGroupEnd enclosing the launching CUDA call, or the single ncclSend/ncclRecv enclosing
//    it — show ncclRecv and no ncclSend; otherwise Send. Peer ranks are unknown (-1).
//    NCCL Reduce kernels (no such span kind) stay Kernel spans, with a warning.
//  - Copies: Memcpy spans named "memcpy <kind>" (copyKind through ENUM_CUDA_MEMCPY_OPER, else the
//    documented codes), memsets: Memset spans named "memset"; both with KernelRecords (bytes).
//  - CUDA runtime/driver calls: Runtime spans on the calling thread's Host lane (name via nameId).
//  - NVTX push/pop (59) and start/end (60) ranges: spans on the Host lane of the thread that
//    started them, named COALESCE(text, StringIds[textId]); pipeline phase names become F / B /
//    W / BW spans with their micro-batch (db/import/pipeline_phase_names.hpp), others Range.
//    Domains are named by eventType 75 rows; a domainId without one is accepted.
//  - Times are ns as stored; nothing is clipped to ANALYSIS_DETAILS (events may precede it).
// Errors: a missing or non-SQLite file, or one with neither StringIds nor CUPTI/NVTX tables, or a
// present table lacking a required column or holding text where times belong, is an InputError
// naming the file and what is wrong; so is a corrupt or truncated file that SQLite cannot read.
#pragma once

#include <filesystem>

#include "db/import/imported_profile.hpp"

namespace pipetune::db {

ImportedProfile import_nsys_sqlite(const std::filesystem::path& file);

}  // namespace pipetune::db
