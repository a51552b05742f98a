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
    // The same, from the first key after the third argument: pages through a large listing.
    caf::replies_to<atom::scan, family, std::string, std::string,
                    uint64_t>::with<std::vector<key_value>>,
    // Replies with the path, schema version, per-family estimates, batches written, last error.
    caf::replies_to<atom::status>::with<store_status>,
    // Serves what is queued, syncs and closes the database, replies ok, then terminates.
    caf::replies_to<atom::shutdown>::with<atom::ok>,
    // Internal: the I/O thread reports the outcome of request `id` and, for an applied write, when
    // its group commit ended (steady-clock ticks; 0 otherwise), for the hand-back metric.
    caf::reacts_to<atom::io_done, uint64_t, caf::message, int64_t>>;

// -- devices
// ---------------------------------------------------------------------------------------

/// One registered worker: owns its liveness and the frames the daemon sends it.
using device_actor = caf::typed_actor<
    // The worker sent a frame, so it is alive: resets the count of missed heartbeats.
    caf::reacts_to<atom::heartbeat>,
    // Sends a job to the worker.
    caf::reacts_to<atom::dispatch, wire::job>,
    // Asks the worker to stop a job.
    caf::reacts_to<atom::cancel, std::string>,
    // Private: one heartbeat interval passed; beats, and quits with errc::worker_lost when the
    // worker missed `liveness` of them.
    caf::reacts_to<atom::tick>>;

/// The registry of workers and the queue of device jobs.
using device_manager_actor = caf::typed_actor<
    // Queues a job until a worker that serves it has a free slot; replies with its result, or
    // with errc::cancelled, errc::worker_lost (its workers kept vanishing under it: a harness
    // fault, never the candidate's) or errc::request_invalid.
    caf::replies_to<atom::submit, device_job>::with<device_job_result>,
    // Cancels a queued or running job by id; its submitter gets errc::cancelled.
    caf::reacts_to<atom::cancel, std::string>,
    // Describes workers, the queue and totals.
    caf::replies_to<atom::status>::with<device_manager_status>,
    // Lists registered workers and recently dead ones.
    caf::replies_to<atom::workers>::with<std::vector<worker_info>>,
    // Says goodbye to every worker, fails what is unfinished, stops the I/O thread, and quits.
    caf::replies_to<atom::shutdown>::with<atom::ok>,
    // From the I/O thread, each with the sender's routing identity: a worker registers...
    caf::reacts_to<std::string, wire::hello>,
    // ...is alive...
    caf::reacts_to<std::string, wire::worker_heartbeat>,
    // ...answers a job...
    caf::reacts_to<std::string, wire::result>,
    // ...or leaves.
    caf::reacts_to<std::string, wire::goodbye>,
    // From the I/O thread: frames to this identity cannot be delivered any more (the reason).
    caf::reacts_to<atom::disconnected, std::string, std::string>,
    // Private: the job's dispatch with this number ran past deadline + liveness.
    caf::reacts_to<atom::deadline, std::string, uint64_t>>;

// -- control and metrics
// ---------------------------------------------------------------------------

// -- llm endpoints and summarizer
// ------------------------------------------------------------------

/// One configured OpenAI-compatible endpoint (or a replay server standing in for one).
using llm_endpoint_actor = caf::typed_actor<
    // Completes a chat; every accepted request gets exactly one reply, never a candidate failure.
    caf::replies_to<atom::complete, chat_request>::with<chat_result>,
    // Cancels the sender's request with this id: its reply becomes `cancelled`; else a no-op.
    caf::reacts_to<atom::cancel, uint64_t>,
    // Reports breaker state, queue, in-flight requests, retries and token totals.
    caf::replies_to<atom::status>::with<endpoint_status>,
    // Whether it answers: up, failing, or down (failing longer than its outage_after).
    caf::replies_to<atom::health>::with<endpoint_health>,
    // Internal: the endpoint's HTTP thread finished one attempt.
    caf::reacts_to<atom::http_done, http_exchange>,
    // Internal: the backoff of the request with this ticket has passed.
    caf::reacts_to<atom::retry, uint64_t>,
    // Internal: a rate-limit window may have reopened.
    caf::reacts_to<atom::wakeup>,
    // Internal: time to probe a failing endpoint, whether or not a session calls it.
    caf::reacts_to<atom::probe>>;

/// Condenses compiler logs for feedback prompts; falls back to the deterministic summary.
using summarizer_actor = caf::typed_actor<
    // Summarizes one log; never fails, the method says how the summary was made.
    caf::replies_to<atom::summarize, summary_request>::with<summary_result>>;

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
    // Runs a lint or test job; replies with the worker's result or an error (lost, cancelled).
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
    caf::reacts_to<atom::retry, uint64_t>,
    // From its campaign: ask this endpoint (one of session_services::endpoints) from now on,
    // for this reason. Only a session waiting in GENERATE moves; the campaign asks again later.
    caf::reacts_to<atom::failover, std::string, std::string>>;

/// One submitted run over many operators (actors/campaign.hpp).
using campaign_actor = caf::typed_actor<
    // Runs every session, at most `concurrency` at once; replies when all have ended.
    caf::replies_to<atom::run>::with<campaign_status>,
    // Progress so far.
    caf::replies_to<atom::status>::with<campaign_status>,
    // Cancels the running sessions; waiting ones never start.
    caf::reacts_to<atom::cancel>,
    // From one of its sessions after each checkpoint: where it stands now.
    caf::reacts_to<atom::progress, session_summary>,
    // Private: time to ask its endpoints how they are, and to move sessions off a down one.
    caf::reacts_to<atom::tick>>;

/// Every campaign of the daemon (actors/campaign_manager.hpp): starts, resumes, reports, cancels.
using campaign_manager_actor = caf::typed_actor<
    // Checks the request and starts resolving it against a worker's catalog; replies at once
    // with the new campaign's status (state "resolving"), or with errc::request_invalid.
    caf::replies_to<atom::submit, campaign_request>::with<campaign_status>,
    // Progress of the campaign with this id ("" = the newest), live or as stored.
    caf::replies_to<atom::status, std::string>::with<campaign_status>,
    // Every campaign, newest first, without the per-session and per-operator lists.
    caf::replies_to<atom::list>::with<std::vector<campaign_status>>,
    // Cancels a resolving or running campaign; replies with its status.
    caf::replies_to<atom::cancel, std::string>::with<campaign_status>,
    // Stops every campaign where it stands (each resumes when the daemon starts again) and quits.
    caf::replies_to<atom::shutdown>::with<atom::ok>>;

// -- the library
// -----------------------------------------------------------------------------------

/// The kernel library (actors/library/library.hpp): accepted kernels, several versions per
/// operator, and their validations per toolchain fingerprint. Kernels are keyed by operator id
/// and source hash, validations by source hash and fingerprint.
using library_actor = caf::typed_actor<
    // Adds a kernel (`proofs` holds its first validation, a pass; `provenance.origin` says where
    // it came from, e.g. imported:<source>) and that validation in one write batch; replies with
    // it as stored, or errc::request_invalid.
    caf::replies_to<atom::add, contract::library_kernel>::with<kernel_version>,
    // Records a verdict on a stored kernel (by source hash) on one toolchain; replies ok.
    caf::replies_to<atom::validate, std::string, contract::toolchain_proof>::with<atom::ok>,
    // Records benchmark timings of the stored kernel (operator id, source hash), each replacing
    // the one of its fingerprint, device kind, dtype and shape class; replies ok, or
    // errc::request_invalid for an unknown kernel or a timing that names no toolchain.
    caf::replies_to<atom::timed, std::string, std::string,
                    std::vector<contract::kernel_timing>>::with<atom::ok>,
    // The kernels of an operator id, or of every variant of an OpInfo name ("": of every
    // operator), by operator id and oldest version first; sources only when the flag is set.
    caf::replies_to<atom::list, std::string, bool>::with<std::vector<kernel_version>>,
    // One kernel per operator variant for a device kind: with a fingerprint, the fastest kernel
    // that passed there (the newest where none was timed there), with its timings there; with
    // "", the newest accepted on the device kind, with its timings of the device kind.
    caf::replies_to<atom::bundle, std::string, std::string>::with<contract::library_bundle>,
    // From a session whose checkpoint stored an accepted kernel (its key, its device kind): counts
    // it in opforge_library_kernels.
    caf::reacts_to<atom::accepted, std::string, std::string>,
    // Keeps a toolchain's conformance report (a worker's hello brought it), replacing the one of
    // its device kind and fingerprint, and sets opforge_toolchain_defects; replies ok once stored.
    caf::replies_to<atom::conformance, contract::conformance_report>::with<atom::ok>,
    // Every kept conformance report, by device kind and fingerprint.
    caf::replies_to<atom::conformance>::with<std::vector<contract::conformance_report>>>;

/// Where the device manager keeps the conformance reports its workers' hellos bring (the
/// library: library_actor converts to it).
using conformance_sink_actor = caf::typed_actor<
    // Keeps a toolchain's conformance report; replies ok once it is stored.
    caf::replies_to<atom::conformance, contract::conformance_report>::with<atom::ok>>;

/// Keeps the library proved on every toolchain its workers run (actors/library/maintenance.hpp):
/// re-validates the current kernels on each new fingerprint at a priority below campaigns, and
/// repairs regressions when `maintenance.repair` is auto.
using maintenance_actor = caf::typed_actor<
    // Re-validates every current kernel of a device kind ("" = each) on a fingerprint ("" = each
    // live one), even where verdicts exist; replies with the work owed, or errc::request_invalid
    // naming a fingerprint that no connected worker has.
    caf::replies_to<atom::revalidate, std::string, std::string>::with<maintenance_status>,
    // What re-validation owes and has done, per toolchain, and the regressions found.
    caf::replies_to<atom::status>::with<maintenance_status>,
    // Private: time to look at the workers' toolchains and the library again.
    caf::reacts_to<atom::tick>>;

/// Onboards a kernel set (actors/library/importer.hpp): tests every kernel on a device worker and
/// adds those that pass to the library as imported:<source>.
using importer_actor = caf::typed_actor<
    // Takes one part of an import (the first one opens it, the last one starts its tests);
    // replies with its status, or with errc::request_invalid.
    caf::replies_to<atom::onboard, import_request>::with<import_status>,
    // Progress and verdicts of the import with this id, from this daemon or the store.
    caf::replies_to<atom::status, std::string>::with<import_status>,
    // Every stored import, oldest first, without its verdicts.
    caf::replies_to<atom::list>::with<std::vector<import_status>>>;

} // namespace opforge
