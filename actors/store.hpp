#pragma once

// The store actor: the daemon's one database as an actor. Every RocksDB call runs on a plain
// thread owned by the actor, in the order the requests arrived, so that no CAF scheduler thread
// ever blocks on disk; the thread reports each outcome back to the actor, which replies.

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "persistence/store.hpp"
#include "persistence/write_batch.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/meta/type_name.hpp>

namespace opforge {

/// The reply to a get: the value of the key, or nothing when it is absent.
struct stored_value {
  std::optional<std::string> value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stored_value& x) {
  optional_bytes value{x.value};
  return f(caf::meta::type_name("stored_value"), value);
}

/// One entry of a scan reply.
struct key_value {
  std::string key;
  std::string value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, key_value& x) {
  return f(caf::meta::type_name("key_value"), x.key, x.value);
}

/// What the store actor reports about itself.
struct store_status {
  std::string path;
  uint32_t schema_version = 0;
  std::vector<family_stats> families;
  /// Batches written through the actor since it started.
  uint64_t batches_written = 0;
  /// The last failure of any request, rendered; empty when there was none.
  std::string last_error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_status& x) {
  return f(caf::meta::type_name("store_status"), x.path, x.schema_version, x.families,
           x.batches_written, x.last_error);
}

/// Opens the database in `dir` (see `open_rocksdb_store`) and spawns the actor that serves it.
/// Opening errors surface here, before the daemon commits to starting. Blocks while opening: call
/// it from main, not from an actor. `telemetry` (required) receives the latency of every batch.
caf::expected<store_actor> spawn_store(caf::actor_system& sys, const std::filesystem::path& dir,
                                       std::shared_ptr<metrics> telemetry);

} // namespace opforge
