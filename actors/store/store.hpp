#pragma once

// The store actor: the daemon's one database as an actor. Every RocksDB call runs on a plain
// thread owned by the actor, in the order the requests arrived, so that no CAF scheduler thread
// ever blocks on disk; the thread reports each outcome back to the actor, which replies.

#include "messages/actors.hpp"
#include "messages/metrics.hpp"
#include "messages/store_messages.hpp"
#include "messages/write_batch.hpp"
#include "persistence/store.hpp"

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

/// Opens the database in `dir` (see `open_rocksdb_store`) and spawns the actor that serves it.
/// Opening errors surface here, before the daemon commits to starting. Blocks while opening: call
/// it from main, not from an actor. `telemetry` (required) receives the latency of every batch.
/// With `sync_every_batch` (the `store.sync` setting) every write is synced, whatever its batch
/// asks; concurrent writes share one fsync either way (group commit).
caf::expected<store_actor> spawn_store(caf::actor_system& sys, const std::filesystem::path& dir,
                                       std::shared_ptr<metrics> telemetry,
                                       bool sync_every_batch = true);

} // namespace opforge
