#pragma once

// The schema version of the database and the migrations that bring an older database up to it.

#include "messages/write_batch.hpp"
#include "persistence/store.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include <caf/expected.hpp>

namespace opforge {

/// The schema version this build reads and writes.
inline constexpr uint32_t current_schema_version = 1;

/// Column families earlier builds created and never wrote (`catalog`, `jobs`). Opening a database
/// drops them when they are empty, which changes no data: the schema version stays, and an older
/// build that opens the database again creates them anew. One that holds data (another program
/// wrote it) is refused with errc::store_schema_mismatch rather than dropped.
inline constexpr std::array<std::string_view, 2> retired_families{"catalog", "jobs"};

/// One step of the schema: computes the batch that turns a database at version `from` into one at
/// `from + 1`. The batch is applied atomically together with the new version number, so a crash
/// leaves the database at one version or the other, never in between.
struct migration {
  uint32_t from;
  std::string_view summary;
  caf::expected<write_batch> (*plan)(store& db);
};

/// Every migration, in order: entry i migrates version i to version i + 1.
std::span<const migration> migrations();

/// Brings the schema of a just opened database to `current_schema_version` and returns it: a new
/// database gets the current version, an older one is migrated step by step, a newer one is
/// refused with errc::store_schema_mismatch. A database without a version is version 0.
caf::expected<uint32_t> settle_schema(store& db, bool is_new);

} // namespace opforge
