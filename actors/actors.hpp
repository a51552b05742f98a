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

/// What a session needs of the store: checkpoints (store_actor converts to it).
using checkpoint_actor = caf::typed_actor<
  // Applies a batch atomically; replies ok once it is applied.
  caf::replies_to<atom::write, write_batch>::with<atom::ok>>;

/// What a session needs of an LLM endpoint (llm_endpoint_actor converts to it).
using chat_actor = caf::typed_actor<
  // Completes a chat; never a candidate failure.
  caf::replies_to<atom::complete, chat_request>::with<chat_result>,
  // Cancels the request with this id.
  caf::reacts_to<atom::cancel, uint64_t>>;

/// What a session needs of the device manager (device_manager_actor converts to it).
using job_runner_actor = caf::typed_actor<
  // Runs a lint or test job; replies with the worker's result or an error (lost, quarantined).
  caf::replies_to<atom::submit, device_job>::with<device_job_result>,
  // Cancels a job by id.
  caf::reacts_to<atom::cancel, std::string>>;

/// One operator's generation loop (actors/op_session.hpp).
using op_session_actor = caf::typed_actor<
  // Runs the session from wherever its record stands to SUCCESS or FAILED.
  caf::replies_to<atom::run>::with<session_summary>,
  // Ends the session as FAILED (cancelled), cancelling the request or job it waits for.
  caf::reacts_to<atom::cancel>,
  // Internal: the back-off before retrying the step at this revision has passed.
  caf::reacts_to<atom::retry, uint64_t>>;

/// One submitted run over many operators (actors/campaign.hpp).
using campaign_actor = caf::typed_actor<
  // Runs every session, at most `concurrency` at once; replies when all have ended.
  caf::replies_to<atom::run>::with<campaign_status>,
  // Progress so far.
  caf::replies_to<atom::status>::with<campaign_status>,
  // Cancels the running sessions; waiting ones never start.
  caf::reacts_to<atom::cancel>>;

} // namespace opforge
