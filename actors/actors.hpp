#pragma once

// Every typed actor interface of the daemon, one line of comment per handler (the style of
// tenzir/vast). Implementations live in one .hpp/.cpp pair per actor beside this file.

#include "messages/type_ids.hpp"

#include <caf/typed_actor.hpp>

namespace opforge {

// -- persistence
// -----------------------------------------------------------------------------------

/// The daemon's one database (actors/store.hpp). Requests are served in arrival order by a plain
/// thread that owns the RocksDB calls.
using store_actor = caf::typed_actor<
    // Applies a batch atomically; replies ok once it is applied (and on disk when `sync`).
    caf::replies_to<atom::write, write_batch>::with<atom::ok>,
    // Replies with the value of a key, if it exists.
    caf::replies_to<atom::get, family, std::string>::with<stored_value>,
    // Replies with at most `limit` entries whose keys start with `prefix`, in key order.
    caf::replies_to<atom::scan, family, std::string, uint64_t>::with<std::vector<key_value>>,
    // Replies with the path, schema version, per-family estimates, batches written, last error.
    caf::replies_to<atom::status>::with<store_status>,
    // Serves what is queued, syncs and closes the database, replies ok, then terminates.
    caf::replies_to<atom::shutdown>::with<atom::ok>,
    // Internal: the I/O thread reports the outcome of request `id`.
    caf::reacts_to<atom::io_done, uint64_t, caf::message>>;

// -- devices
// ---------------------------------------------------------------------------------------

// -- control and metrics
// ---------------------------------------------------------------------------

// -- llm endpoints and summarizer
// ------------------------------------------------------------------

// -- sessions and campaigns
// ------------------------------------------------------------------------

} // namespace opforge
