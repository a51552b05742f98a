#pragma once

// The RocksDB implementation of `store`.

#include "persistence/store.hpp"

#include <filesystem>
#include <memory>

#include <caf/expected.hpp>

namespace opforge {

/// Opens (creating if needed) the database in `dir` with every column family of `all_families`,
/// and settles its schema (see `settle_schema`). Fails with errc::store_open_failed when the
/// directory is unusable or another process holds the database, and with
/// errc::store_schema_mismatch when the database has a column family this build does not know or
/// a newer schema. Blocks: call it from a plain thread, never from an actor.
caf::expected<std::unique_ptr<store>> open_rocksdb_store(const std::filesystem::path& dir);

} // namespace opforge
