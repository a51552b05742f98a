#include "persistence/rocksdb_store.hpp"

#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/schema.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

namespace opforge {

namespace {

errc code_of(const rocksdb::Status& status) {
  return status.IsCorruption() ? errc::store_corrupt : errc::store_io_failed;
}

std::string describe(family f) {
  return std::string{"family "} + to_string(f);
}

std::string describe(std::string_view key) {
  return "key '" + printable(key) + "'";
}

std::string describe(const write_batch& batch) {
  auto text = "batch of " + std::to_string(batch.ops.size()) + " ops";
  if (!batch.ops.empty())
    text += " (first: " + describe(batch.ops.front().family) + ", " +
            describe(batch.ops.front().key) + ")";
  return text;
}

class rocksdb_store final : public store {
public:
  rocksdb_store(std::filesystem::path dir, rocksdb::DB* db,
                std::vector<rocksdb::ColumnFamilyHandle*> handles)
      : path_{std::move(dir)}, db_{db}, handles_{std::move(handles)} {}

  ~rocksdb_store() override { close(); }

  void set_schema_version(uint32_t version) { schema_version_ = version; }

  caf::error write(const write_batch& batch) override {
    if (auto err = check_open())
      return err;
    rocksdb::WriteBatch updates;
    for (size_t i = 0; i < batch.ops.size(); ++i) {
      const auto& op = batch.ops[i];
      if (auto err = check_family(op.family))
        return err;
      auto status = op.value ? updates.Put(handle(op.family), op.key, *op.value)
                             : updates.Delete(handle(op.family), op.key);
      if (!status.ok())
        return failure(status, describe(batch), "op " + std::to_string(i), describe(op.family),
                       describe(op.key));
    }
    rocksdb::WriteOptions options;
    options.sync = batch.sync;
    if (auto status = db_->Write(options, &updates); !status.ok()) {
      write_failure_ = status;
      return failure(status, describe(batch));
    }
    return {};
  }

  caf::expected<std::optional<std::string>> get(family f, std::string_view key) override {
    if (auto err = check_open())
      return err;
    if (auto err = check_family(f))
      return err;
    rocksdb::PinnableSlice value;
    auto status = db_->Get(rocksdb::ReadOptions{}, handle(f), key, &value);
    if (status.IsNotFound())
      return std::optional<std::string>{};
    if (!status.ok())
      return failure(status, describe(f), describe(key));
    return std::optional<std::string>{value.ToString()};
  }

  using store::scan;

  caf::error scan(family f, std::string_view prefix, std::string_view after,
                  const scan_visitor& visit) override {
    if (auto err = check_open())
      return err;
    if (auto err = check_family(f))
      return err;
    std::unique_ptr<rocksdb::Iterator> it{db_->NewIterator(rocksdb::ReadOptions{}, handle(f))};
    it->Seek(std::max(prefix, after));
    if (it->Valid() && !after.empty() && it->key() == after)
      it->Next();
    for (; it->Valid() && it->key().starts_with(prefix); it->Next())
      if (!visit(it->key().ToStringView(), it->value().ToStringView()))
        break;
    if (!it->status().ok())
      return failure(it->status(), describe(f), "scan of prefix '" + printable(prefix) + "'");
    return {};
  }

  caf::error resume() override {
    if (auto err = check_open())
      return err;
    if (auto status = db_->Resume(); !status.ok())
      return failure(status, "resuming writes");
    write_failure_ = rocksdb::Status::OK();
    return {};
  }

  caf::expected<family_stats> stats(family f) override {
    if (auto err = check_open())
      return err;
    if (auto err = check_family(f))
      return err;
    family_stats result{to_string(f)};
    uint64_t on_disk = 0;
    uint64_t in_memory = 0;
    for (auto [property, value] : {std::pair{"rocksdb.estimate-num-keys", &result.estimated_keys},
                                   std::pair{"rocksdb.estimate-live-data-size", &on_disk},
                                   std::pair{"rocksdb.cur-size-all-mem-tables", &in_memory}})
      if (!db_->GetIntProperty(handle(f), property, value))
        return caf::make_error(errc::store_io_failed, path_.string(), describe(f),
                               std::string{"RocksDB does not report "} + property);
    result.estimated_bytes = on_disk + in_memory;
    return result;
  }

  uint32_t schema_version() const override { return schema_version_; }

  const std::filesystem::path& path() const override { return path_; }

  // RocksDB wants every column family handle destroyed before the database; the log is synced
  // first so that writes made without `sync` survive a power loss after a clean shutdown too.
  // After a failed write RocksDB must not touch its log again (it asserts, aborting the
  // process): what was written before is in the log already, and the next open replays it.
  caf::error close() override {
    if (!db_)
      return {};
    caf::error first_failure;
    auto note = [&](const rocksdb::Status& status, const char* step) {
      if (!status.ok() && !first_failure)
        first_failure = failure(status, step);
    };
    if (write_failure_.ok()) {
      note(db_->SyncWAL(), "sync of the write-ahead log");
      note(db_->Flush(rocksdb::FlushOptions{}, handles_), "flush of the memtables");
    } else {
      note(write_failure_, "closing without a final sync or flush, as writes were failing");
    }
    for (auto* handle : handles_)
      note(db_->DestroyColumnFamilyHandle(handle), "release of a column family handle");
    handles_.clear();
    note(db_->Close(), "close");
    db_.reset();
    return first_failure;
  }

private:
  rocksdb::ColumnFamilyHandle* handle(family f) const { return handles_[1 + index_of(f)]; }

  caf::error check_open() const {
    if (!db_)
      return caf::make_error(errc::store_io_failed, path_.string(), "the store is closed");
    return {};
  }

  caf::error check_family(family f) const {
    if (!is_known(f))
      return caf::make_error(errc::request_invalid, path_.string(),
                             "unknown column family number " +
                                 std::to_string(static_cast<unsigned>(f)));
    return {};
  }

  template <class... Context>
  caf::error failure(const rocksdb::Status& status, Context&&... context) const {
    return caf::make_error(code_of(status), path_.string(), std::string{context}...,
                           status.ToString());
  }

  std::filesystem::path path_;
  std::unique_ptr<rocksdb::DB> db_;
  /// In the order of the descriptors passed to DB::Open: RocksDB's "default", then
  /// `all_families`.
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  uint32_t schema_version_ = 0;
  /// The failure of the last write, until resume() succeeds.
  rocksdb::Status write_failure_;
};

// RocksDB's own log goes to opforge's instead of a LOG file in the data directory: that file
// fails with the disk, and RocksDB asserts (aborting the daemon) when it logs again after a
// failed write to it. Warnings and errors only; RocksDB prefixes their level.
class rocksdb_logger final : public rocksdb::Logger {
public:
  rocksdb_logger() : rocksdb::Logger{rocksdb::InfoLogLevel::WARN_LEVEL} {}

  using rocksdb::Logger::Logv;

  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof line, format, ap);
    spdlog::warn("rocksdb: {}", line);
  }
};

caf::error open_failure(const std::string& where, const rocksdb::Status& status) {
  // RocksDB reports a held lock as an I/O error on the LOCK file, from another process ("While
  // lock file") or from this one ("lock hold by current process").
  if (status.IsIOError() && status.ToString().find("/LOCK") != std::string::npos)
    return caf::make_error(errc::store_open_failed, where,
                           "the database is locked: another opforge serve (or another store in "
                           "this process) has it open",
                           status.ToString());
  return caf::make_error(status.IsCorruption() ? errc::store_corrupt : errc::store_open_failed,
                         where, status.ToString());
}

bool is_retired(std::string_view name) {
  return std::find(retired_families.begin(), retired_families.end(), name) !=
         retired_families.end();
}

// Drops the retired families a database still has once each is found empty, and releases every
// handle of them, also on failure (RocksDB wants them released before the database closes).
caf::error drop_retired(rocksdb::DB& db, const std::string& where,
                        const std::vector<rocksdb::ColumnFamilyHandle*>& retired) {
  caf::error first_failure;
  for (auto* handle : retired) {
    if (!first_failure) {
      std::unique_ptr<rocksdb::Iterator> it{db.NewIterator(rocksdb::ReadOptions{}, handle)};
      it->SeekToFirst();
      if (it->Valid())
        first_failure = caf::make_error(
            errc::store_schema_mismatch, where,
            "column family '" + handle->GetName() + "' holds data",
            "opforge never wrote it and no longer has it: another program did; move its data "
            "out of the database");
      else if (!it->status().ok())
        first_failure = open_failure(where, it->status());
      else if (auto status = db.DropColumnFamily(handle); !status.ok())
        first_failure = open_failure(where, status);
    }
    if (auto status = db.DestroyColumnFamilyHandle(handle); !status.ok() && !first_failure)
      first_failure = open_failure(where, status);
  }
  return first_failure;
}

} // namespace

caf::expected<std::unique_ptr<store>> open_rocksdb_store(const std::filesystem::path& dir) {
  auto where = dir.string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return caf::make_error(errc::store_open_failed, where,
                           "cannot create the directory: " + ec.message());
  // Whether the database exists decides between stamping the current schema version and
  // migrating: a wrong guess would skip migrations, so a failed check is an error.
  auto is_new = !std::filesystem::exists(dir / "CURRENT", ec);
  if (ec)
    return caf::make_error(errc::store_open_failed, where, "cannot inspect the directory",
                           ec.message());
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.info_log = std::make_shared<rocksdb_logger>();
  // close() flushes when it may; RocksDB's own flush at close would touch a failed log.
  options.avoid_flush_during_shutdown = true;
  // RocksDB opens a database only with every family it has, the retired ones too.
  std::vector<std::string> retired;
  if (!is_new) {
    std::vector<std::string> names;
    if (auto status = rocksdb::DB::ListColumnFamilies(options, where, &names); !status.ok())
      return open_failure(where, status);
    for (const auto& name : names) {
      if (is_retired(name))
        retired.push_back(name);
      else if (name != rocksdb::kDefaultColumnFamilyName && !from_string<family>(name))
        return caf::make_error(errc::store_schema_mismatch, where,
                               "unknown column family '" + printable(name) + "'",
                               "the database was written by a newer opforge or another program");
    }
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors{
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions{}}};
  for (auto f : all_families)
    descriptors.emplace_back(to_string(f), rocksdb::ColumnFamilyOptions{});
  for (const auto& name : retired)
    descriptors.emplace_back(name, rocksdb::ColumnFamilyOptions{});
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  if (auto status = rocksdb::DB::Open(options, where, descriptors, &handles, &raw); !status.ok())
    return open_failure(where, status);
  std::vector<rocksdb::ColumnFamilyHandle*> retired_handles(handles.end() - retired.size(),
                                                            handles.end());
  handles.resize(handles.size() - retired.size());
  auto db = std::make_unique<rocksdb_store>(dir, raw, std::move(handles));
  if (auto err = drop_retired(*raw, where, retired_handles))
    return err;
  auto version = settle_schema(*db, is_new);
  if (!version)
    return version.error();
  db->set_schema_version(*version);
  return std::unique_ptr<store>{std::move(db)};
}

} // namespace opforge
