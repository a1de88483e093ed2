// The SQLite helpers: failures name the database, the call and the C++ file and line, bad files
// are InputErrors, transactions roll back unless committed, and busy locks are waited out.
#include "db/store/sqlite_util.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "store_test_support.hpp"

namespace pipetune::db::sqlite {
namespace {

using testing::TempDir;

TEST(SqliteUtil, ErrorsNameTheDatabaseTheCallAndTheLine) {
  TempDir dir;
  const std::string path = dir.file("u.db");
  Connection db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  int line = 0;
  try {
    line = __LINE__ + 1;
    db.exec("SELEC 1");
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(path + ": SELEC 1: ", 0), 0u) << m;
    EXPECT_NE(m.find("syntax error"), std::string::npos) << m;
    EXPECT_NE(m.find("[sqlite_util_test.cpp:" + std::to_string(line) + "]"), std::string::npos)
        << m;
    EXPECT_EQ(e.code(), SQLITE_ERROR);
  }
  try {
    line = __LINE__ + 1;
    PIPETUNE_SQLITE_CHECK(db.handle(), path,
                          sqlite3_exec(db.handle(), "DROP TABLE nope", nullptr, nullptr, nullptr));
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("sqlite3_exec(db.handle(), \"DROP TABLE nope\""), std::string::npos) << m;
    EXPECT_NE(m.find("no such table: nope"), std::string::npos) << m;
    EXPECT_NE(m.find("[sqlite_util_test.cpp:" + std::to_string(line) + "]"), std::string::npos)
        << m;
  }
  db.exec("CREATE TABLE t(x INTEGER PRIMARY KEY)");
  Statement insert = db.prepare("INSERT INTO t(x) VALUES (?1)");
  insert.bind(1, 1).run();
  try {
    insert.bind(1, 1).run();  // the same key again
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SQLITE_CONSTRAINT_PRIMARYKEY);
    EXPECT_NE(std::string(e.what()).find("INSERT INTO t(x) VALUES (?1)"), std::string::npos)
        << e.what();
  }
  insert.bind(1, 2).run();  // the statement is usable after a failure
  EXPECT_EQ(db.query_int64("SELECT count(*) FROM t"), 2);
}

TEST(SqliteUtil, NotADatabaseIsABadFile) {
  TempDir dir;
  const std::string path = dir.file("text.db");
  {
    std::ofstream out(path);
    for (int i = 0; i < 100; ++i) out << "not a database at all\n";
  }
  Connection db(path, SQLITE_OPEN_READWRITE);  // SQLite opens lazily
  try {
    db.query_int64("SELECT count(*) FROM sqlite_master");
    ADD_FAILURE();
  } catch (const BadFileError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": file is not a database");
    EXPECT_EQ(e.code(), SQLITE_NOTADB);
    const InputError& as_input = e;  // front ends map it to exit code 2
    (void)as_input;
  }
}

TEST(SqliteUtil, TransactionRollsBackUnlessCommitted) {
  TempDir dir;
  Connection db(dir.file("t.db"), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  db.exec("CREATE TABLE t(x)");
  {
    Transaction tx(db);
    db.exec("INSERT INTO t VALUES (1)");
  }
  EXPECT_EQ(db.query_int64("SELECT count(*) FROM t"), 0);
  {
    Transaction tx(db);
    db.exec("INSERT INTO t VALUES (1)");
    tx.commit();
  }
  EXPECT_EQ(db.query_int64("SELECT count(*) FROM t"), 1);
}

TEST(SqliteUtil, BusyLocksAreWaitedOut) {
  TempDir dir;
  const std::string path = dir.file("busy.db");
  Connection holder(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  holder.exec("PRAGMA journal_mode = WAL; CREATE TABLE t(x)");
  Connection other(path, SQLITE_OPEN_READWRITE);
  auto tx = std::make_unique<Transaction>(holder);
  // Without a timeout the second writer fails at once with a busy code...
  try {
    other.exec("BEGIN IMMEDIATE");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_TRUE(is_busy(e.code())) << e.what();
  }
  // ...with one it waits until the holder commits (on another thread, 100 ms later).
  other.set_busy_timeout(std::chrono::milliseconds(10000));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    holder.exec("INSERT INTO t VALUES (1)");
    tx->commit();
  });
  {
    Transaction mine(other);
    other.exec("INSERT INTO t VALUES (2)");
    mine.commit();
  }
  release.join();
  EXPECT_EQ(other.query_int64("SELECT count(*) FROM t"), 2);
}

}  // namespace
}  // namespace pipetune::db::sqlite
