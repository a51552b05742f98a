#pragma once

// The store: opforge's key-value database behind an interface (in the style of zeek/broker's
// backends), so that actors and migrations do not depend on RocksDB. Every failure is a caf::error
// with an errc::store_* code whose context names the path, family and key, and the backend's
// message.

#include "messages/family.hpp"
#include "messages/store_messages.hpp"
#include "messages/write_batch.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/meta/type_name.hpp>

namespace opforge {

/// Receives the entries of a scan in key order; returns false to stop the scan.
using scan_visitor = std::function<bool(std::string_view key, std::string_view value)>;

class store {
public:
  virtual ~store() = default;

  /// Applies every operation of `batch` or none of them. Returns once the batch is applied, and
  /// synced to disk if `batch.sync`. An op naming an unknown family fails with
  /// errc::request_invalid before anything is written.
  virtual caf::error write(const write_batch& batch) = 0;

  /// The value of `key`, or nothing when it is absent.
  virtual caf::expected<std::optional<std::string>> get(family f, std::string_view key) = 0;

  /// Visits every entry of `f` whose key starts with `prefix` and sorts after `after`, in key
  /// order: a listing continues from the last key it saw (the empty `after` starts at the first).
  virtual caf::error scan(family f, std::string_view prefix, std::string_view after,
                          const scan_visitor& visit) = 0;

  /// Visits every entry of `f` whose key starts with `prefix`, in key order.
  caf::error scan(family f, std::string_view prefix, const scan_visitor& visit) {
    return scan(f, prefix, {}, visit);
  }

  /// Clears a failure that stops every write (a full disk, a failed sync of the log), so that
  /// writes can be tried again; fails while its cause persists. Does nothing when writes work.
  virtual caf::error resume() = 0;

  /// Key and size estimates of `f` (exact for keys still in memory, approximate on disk).
  virtual caf::expected<family_stats> stats(family f) = 0;

  /// The schema version of the open database (after migrations).
  virtual uint32_t schema_version() const = 0;

  /// The directory of the database.
  virtual const std::filesystem::path& path() const = 0;

  /// Syncs the log, flushes and closes. Every later call fails; closing again does nothing.
  /// Destroying an open store closes it, dropping any error: call close() to see it.
  virtual caf::error close() = 0;
};

} // namespace opforge
