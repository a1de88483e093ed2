// Writes small Nsight Systems SQLite exports for tests, with the tables and columns of the
// documented schema (reference/profiling.md Part 1.3): each table is created on first use, as
// nsys does, so a table a test never fills is absent.
#pragma once

#include <sqlite3.h>

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipetune::db::testing {

// globalPid / globalTid as nsys serialises them: hardware id 1 in bits 48+, PID in bits 24..47,
// TID in bits 0..23.
inline std::int64_t global_pid(std::int64_t pid) {
  return (std::int64_t{1} << 48) | (pid << 24);
}
inline std::int64_t global_tid(std::int64_t pid, std::int64_t tid) {
  return global_pid(pid) | tid;
}

// A unique path under the system temp folder, removed when the object goes.
class TempFile {
 public:
  explicit TempFile(const std::string& suffix) {
    static int counter = 0;
    path_ =
        std::filesystem::temp_directory_path() / ("pipetune_import_" + std::to_string(::getpid()) +
                                                  "_" + std::to_string(counter++) + suffix);
    std::filesystem::remove(path_);
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string sql_text(const std::optional<std::string>& s) {
  if (!s) return "NULL";
  std::string q = "'";
  for (char c : *s) {
    if (c == '\'') q += '\'';
    q += c;
  }
  return q + "'";
}

inline std::string sql_int(std::optional<std::int64_t> v) {
  return v ? std::to_string(*v) : std::string("NULL");
}

class NsysExportWriter {
 public:
  explicit NsysExportWriter(const std::filesystem::path& file) {
    if (sqlite3_open(file.string().c_str(), &db_) != SQLITE_OK)
      throw std::runtime_error("cannot create " + file.string());
    exec("BEGIN");
  }
  ~NsysExportWriter() { sqlite3_close(db_); }
  NsysExportWriter(const NsysExportWriter&) = delete;
  NsysExportWriter& operator=(const NsysExportWriter&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string why = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error("test export: " + why + " in: " + sql);
    }
  }
  void close() {
    exec("COMMIT");
    sqlite3_close(db_);
    db_ = nullptr;
  }

  void metadata(const std::string& table, const std::string& version) {
    create(table, "name TEXT, value TEXT");
    exec("INSERT INTO " + table + " VALUES ('EXPORT_SCHEMA_VERSION', " + sql_text(version) + ")");
  }
  // The launched command as META_DATA_CAPTURE records it (PROCESS_0:COMMAND, ARGUMENT_i).
  void launch_command(const std::string& command, const std::vector<std::string>& arguments) {
    create("META_DATA_CAPTURE", "name TEXT, value TEXT");
    exec("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:COMMAND', " + sql_text(command) + ")");
    for (std::size_t i = 0; i < arguments.size(); ++i)
      exec("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ARGUMENT_" + std::to_string(i) +
           "', " + sql_text(arguments[i]) + ")");
  }
  void string_id(std::int64_t id, const std::string& value) {
    create("StringIds", "id INTEGER PRIMARY KEY, value TEXT NOT NULL");
    exec("INSERT INTO StringIds VALUES (" + std::to_string(id) + ", " + sql_text(value) + ")");
  }
  void process(std::int64_t pid, const std::string& name) {
    create("PROCESSES", "globalPid INTEGER, pid INTEGER, name TEXT");
    exec("INSERT INTO PROCESSES VALUES (" + std::to_string(global_pid(pid)) + ", " +
         std::to_string(pid) + ", " + sql_text(name) + ")");
  }
  void thread_name(std::int64_t pid, std::int64_t tid, std::int64_t name_id) {
    create("ThreadNames", "nameId INTEGER, priority INTEGER, globalTid INTEGER");
    exec("INSERT INTO ThreadNames VALUES (" + std::to_string(name_id) + ", 0, " +
         std::to_string(global_tid(pid, tid)) + ")");
  }
  void kernel(std::int64_t pid, int device, int stream, std::int64_t correlation,
              std::int64_t start, std::int64_t end, std::int64_t short_name,
              std::int64_t demangled) {
    create("CUPTI_ACTIVITY_KIND_KERNEL",
           "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
           "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
           "globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
           "mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, registersPerThread "
           "INTEGER, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, "
           "blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL");
    exec("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + std::to_string(start) + ", " +
         std::to_string(end) + ", " + std::to_string(device) + ", 1, " + std::to_string(stream) +
         ", " + std::to_string(correlation) + ", " + std::to_string(global_pid(pid)) + ", " +
         std::to_string(demangled) + ", " + std::to_string(short_name) +
         ", NULL, 0, 0, 32, 128, 2, 1, 256, 1, 1)");
  }
  void memcpy(std::int64_t pid, int device, int stream, std::int64_t correlation,
              std::int64_t start, std::int64_t end, std::int64_t bytes, int copy_kind) {
    create("CUPTI_ACTIVITY_KIND_MEMCPY",
           "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
           "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
           "globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind "
           "INTEGER, dstKind INTEGER");
    exec("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (" + std::to_string(start) + ", " +
         std::to_string(end) + ", " + std::to_string(device) + ", 1, " + std::to_string(stream) +
         ", " + std::to_string(correlation) + ", " + std::to_string(global_pid(pid)) + ", " +
         std::to_string(bytes) + ", " + std::to_string(copy_kind) + ", 0, 2)");
  }
  void memset(std::int64_t pid, int device, int stream, std::int64_t correlation,
              std::int64_t start, std::int64_t end, std::int64_t bytes) {
    create("CUPTI_ACTIVITY_KIND_MEMSET",
           "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
           "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
           "globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, memKind INTEGER");
    exec("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (" + std::to_string(start) + ", " +
         std::to_string(end) + ", " + std::to_string(device) + ", 1, " + std::to_string(stream) +
         ", " + std::to_string(correlation) + ", " + std::to_string(global_pid(pid)) + ", 0, " +
         std::to_string(bytes) + ", 2)");
  }
  void runtime(std::int64_t pid, std::int64_t tid, std::int64_t correlation, std::int64_t start,
               std::int64_t end, std::int64_t name_id) {
    create("CUPTI_ACTIVITY_KIND_RUNTIME",
           "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
           "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue "
           "INTEGER NOT NULL, callchainId INTEGER");
    exec("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (" + std::to_string(start) + ", " +
         std::to_string(end) + ", 0, " + std::to_string(global_tid(pid, tid)) + ", " +
         std::to_string(correlation) + ", " + std::to_string(name_id) + ", 0, NULL)");
  }
  // One CUDA_GPU_MEMORY_USAGE_EVENTS row (nsys --cuda-memory-usage): `operation` 0 allocates,
  // 1 frees (ENUM_CUDA_DEV_MEM_EVENT_OPER).
  void memory_usage(std::int64_t pid, int device, std::int64_t start, std::int64_t bytes,
                    int operation) {
    create("CUDA_GPU_MEMORY_USAGE_EVENTS",
           "start INTEGER NOT NULL, globalPid INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
           "contextId INTEGER NOT NULL, address INTEGER NOT NULL, pc INTEGER NOT NULL, bytes "
           "INTEGER NOT NULL, memKind INTEGER NOT NULL, memoryOperationType INTEGER NOT NULL, "
           "name TEXT, correlationId INTEGER, streamId INTEGER");
    exec("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (" + std::to_string(start) + ", " +
         std::to_string(global_pid(pid)) + ", " + std::to_string(device) + ", 1, 4096, 0, " +
         std::to_string(bytes) + ", 1, " + std::to_string(operation) + ", NULL, NULL, NULL)");
  }
  // One NVTX_EVENTS row; `text` for a plain string, `text_id` for a registered one.
  void nvtx(int event_type, std::int64_t pid, std::int64_t tid, std::int64_t start,
            std::optional<std::int64_t> end, std::optional<std::string> text,
            std::optional<std::int64_t> text_id = std::nullopt, std::int64_t domain = 0) {
    create("NVTX_EVENTS",
           "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
           "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
           "textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, "
           "doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, "
           "jsonTextId INTEGER, jsonText TEXT");
    exec(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) "
        "VALUES (" +
        std::to_string(start) + ", " + sql_int(end) + ", " + std::to_string(event_type) + ", " +
        sql_text(text) + ", " + std::to_string(global_tid(pid, tid)) + ", " + sql_int(text_id) +
        ", " + std::to_string(domain) + ")");
  }

  void create(const std::string& table, const std::string& columns) {
    if (!created_.insert(table).second) return;
    exec("CREATE TABLE " + table + " (" + columns + ")");
  }

 private:
  sqlite3* db_ = nullptr;
  std::set<std::string> created_;
};

}  // namespace pipetune::db::testing
