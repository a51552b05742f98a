#pragma once

// The one place that creates opforge's Prometheus families. Actors and threads receive a
// `std::shared_ptr<metrics>` at spawn and keep references to the children they update; children
// are thread-safe, and asking twice for the same labels returns the same child.

#include "messages/enum_names.hpp"

#include <array>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace opforge {

/// Why a device job went back to the queue: its deadline passed, or its worker said goodbye,
/// connected again, or died.
enum class requeue_reason { deadline, goodbye, reconnect, worker_lost };

template <>
struct contract::enum_traits<requeue_reason> {
  static constexpr std::string_view label = "requeue_reason";
  static constexpr std::array<std::string_view, 4> names{"deadline", "goodbye", "reconnect",
                                                         "worker_lost"};
  static_assert(names.size() - 1 == static_cast<size_t>(requeue_reason::worker_lost));
};

/// The store's database calls that can fail.
enum class store_operation { write, resume, get, scan, status, close };

template <>
struct contract::enum_traits<store_operation> {
  static constexpr std::string_view label = "store_operation";
  static constexpr std::array<std::string_view, 6> names{"write", "resume", "get",
                                                         "scan",  "status", "close"};
  static_assert(names.size() - 1 == static_cast<size_t>(store_operation::close));
};

/// Why the workers socket refused a connection: a key not on the allow-list, or no CURVE (or not
/// this daemon's server key).
enum class auth_refusal { unknown_key, handshake };

template <>
struct contract::enum_traits<auth_refusal> {
  static constexpr std::string_view label = "auth_refusal";
  static constexpr std::array<std::string_view, 2> names{"unknown_key", "handshake"};
  static_assert(names.size() - 1 == static_cast<size_t>(auth_refusal::handshake));
};

/// The opforge_jobs_total outcome of a job that lost its worker on every attempt; the others are
/// job statuses.
inline constexpr std::string_view job_lost = "lost";

class metrics {
public:
  /// Creates every family, and at 0 every counter series whose labels are known up front: job
  /// kind x (job status or lost), ended-session outcome, summary method, requeue reason, store
  /// operation, auth refusal; and the job latency histogram of each job kind.
  explicit metrics(std::string version);

  /// The registry an exposer serves.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // -- devices ---------------------------------------------------------------------------------

  /// opforge_workers{kind,state}: connected workers by device kind and state (idle, busy, dead).
  prometheus::Gauge& workers(const std::string& kind, const std::string& state);
  /// Drops the opforge_workers series of `kind` and `state`; a later `workers` call adds it anew.
  void remove_workers(const std::string& kind, const std::string& state);
  /// opforge_jobs_total{kind,outcome}: finished device jobs by job kind and outcome.
  prometheus::Counter& jobs(const std::string& kind, const std::string& outcome);
  /// opforge_job_latency_seconds{kind}: dispatch-to-result time of device jobs.
  prometheus::Histogram& job_latency(const std::string& kind);
  /// opforge_queue_depth: device jobs waiting for a free slot.
  prometheus::Gauge& queue_depth() { return queue_depth_; }
  /// opforge_malformed_frames_total{reason}: frames dropped by a decoder.
  prometheus::Counter& malformed_frames(const std::string& reason);
  /// opforge_worker_auth_refused_total{reason}: connections to the workers socket refused by
  /// CURVE: `unknown_key` (a key not on the allow-list) or `handshake` (no CURVE, or not our
  /// server key).
  prometheus::Counter& worker_auth_refused(auth_refusal reason);
  /// opforge_job_requeues_total{reason}: jobs requeued after their worker died or left.
  prometheus::Counter& job_requeues(requeue_reason reason);
  /// opforge_late_results_total: results ignored because their job was no longer running there
  /// (the worker had been declared dead, or the job cancelled or already answered).
  prometheus::Counter& late_results() { return late_results_; }

  // -- persistence -----------------------------------------------------------------------------

  /// opforge_store_write_latency_seconds: time to apply one group commit (the write batches that
  /// queued up meanwhile, in one RocksDB write).
  prometheus::Histogram& store_write_latency() { return store_write_latency_; }
  /// opforge_store_queue_wait_seconds: how long a write batch waited, from the store actor taking
  /// it to the start of the group commit it joined (mostly the group being written before it).
  prometheus::Histogram& store_queue_wait() { return store_queue_wait_; }
  /// opforge_store_handback_seconds: from a group commit's end to the store actor answering each
  /// of its writers (the I/O thread's message waiting for the actor to be scheduled).
  prometheus::Histogram& store_handback() { return store_handback_; }
  /// opforge_store_group_batches: write batches per group commit.
  prometheus::Histogram& store_group_batches() { return store_group_batches_; }
  /// opforge_store_errors_total{operation}: failed database calls by operation (write, resume,
  /// get, scan, status, close); a write that keeps failing counts once per attempt.
  prometheus::Counter& store_errors(store_operation operation);
  /// opforge_store_paused_writes: write batches held back until the database takes writes again.
  prometheus::Gauge& store_paused_writes() { return store_paused_writes_; }

  // -- llm endpoints and summarizer ------------------------------------------------------------

  /// Creates every opforge_llm_requests_total series of a new endpoint at 0 (one per chat
  /// outcome), so that its first finished request shows in rate() and increase().
  void add_llm_endpoint(const std::string& endpoint);
  /// opforge_llm_requests_total{endpoint,outcome}: finished chat requests by outcome.
  prometheus::Counter& llm_requests(const std::string& endpoint, const std::string& outcome);
  /// opforge_llm_request_latency_seconds{endpoint}: acceptance-to-reply time of chat requests.
  prometheus::Histogram& llm_latency(const std::string& endpoint);
  /// opforge_llm_tokens_total{endpoint,kind}: tokens by kind (prompt, completion, reasoning).
  prometheus::Counter& llm_tokens(const std::string& endpoint, const std::string& kind);
  /// opforge_llm_retries_total{endpoint,reason}: retried attempts by what failed.
  prometheus::Counter& llm_retries(const std::string& endpoint, const std::string& reason);
  /// opforge_llm_breaker_state{endpoint}: 0 closed, 1 half-open, 2 open.
  prometheus::Gauge& llm_breaker_state(const std::string& endpoint);
  /// opforge_llm_in_flight{endpoint}: HTTP attempts under way.
  prometheus::Gauge& llm_in_flight(const std::string& endpoint);
  /// opforge_llm_down{endpoint}: 1 while every attempt has failed for longer than outage_after.
  prometheus::Gauge& llm_down(const std::string& endpoint);
  /// opforge_replay_restarts_total{endpoint}: replay servers started again after they died.
  prometheus::Counter& replay_restarts(const std::string& endpoint);
  /// opforge_summaries_total{method}: compiler-log summaries by how they were made.
  prometheus::Counter& summaries(const std::string& method);

  // -- sessions and campaigns ------------------------------------------------------------------

  /// opforge_sessions{state}: running operator sessions by the state they wait in.
  prometheus::Gauge& sessions(const std::string& state);
  /// opforge_sessions_ended_total{outcome}: sessions that ended, SUCCESS or FAILED.
  prometheus::Counter& sessions_ended(const std::string& outcome);
  /// opforge_campaign_operators{campaign,state}: a campaign's operators by where they stand
  /// (waiting, running, succeeded, failed); flat succeeded+failed while work waits means no
  /// progress, which the alert rules watch.
  prometheus::Gauge& campaign_operators(const std::string& campaign, const std::string& state);

  // -- the library -----------------------------------------------------------------------------

  /// opforge_library_kernels{device_kind}: kernels in the library (every version of every
  /// operator) by the device kind they were accepted on.
  prometheus::Gauge& library_kernels(const std::string& device_kind);
  /// opforge_library_passing{device_kind,fingerprint}: current kernels of the device kind whose
  /// newest verdict on the fingerprint (a live worker's toolchain) is a pass: the library's
  /// coverage there.
  prometheus::Gauge& library_passing(const std::string& device_kind,
                                     const std::string& fingerprint);
  /// opforge_validations_pending{device_kind,fingerprint}: current kernels still owed a
  /// re-validation on a live toolchain; flat above zero means re-validation is stuck.
  prometheus::Gauge& validations_pending(const std::string& device_kind,
                                         const std::string& fingerprint);
  /// Drops both per-fingerprint series of a toolchain no live worker has any more.
  void remove_toolchain(const std::string& device_kind, const std::string& fingerprint);
  /// opforge_regressions{device_kind}: kernels that passed on one toolchain and fail on a later
  /// one of the device kind.
  prometheus::Gauge& regressions(const std::string& device_kind);
  /// opforge_speed_regressions{device_kind}: kernels that pass on a later toolchain of the device
  /// kind but run more than maintenance.speed_regression_percent slower there than on the
  /// previous one, beyond the noise, and that no faster kernel of their operator serves there.
  prometheus::Gauge& speed_regressions(const std::string& device_kind);

  /// opforge_toolchain_defects{device_kind,fingerprint}: defects the conformance probes of the
  /// toolchain found (its workers' conformance reports); kept across restarts from the store.
  prometheus::Gauge& toolchain_defects(const std::string& device_kind,
                                       const std::string& fingerprint);
  /// opforge_toolchain_unknown_defects{device_kind,fingerprint}: those of them that the device
  /// kind's registry entry does not list (known=false): a new defect of a compiler drop.
  prometheus::Gauge& toolchain_unknown_defects(const std::string& device_kind,
                                               const std::string& fingerprint);

  // -- build -----------------------------------------------------------------------------------

  /// opforge_uptime_seconds: seconds since the daemon started.
  prometheus::Gauge& uptime() { return uptime_; }

private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Counter>& jobs_;
  prometheus::Family<prometheus::Histogram>& job_latency_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Counter>& malformed_frames_;
  prometheus::Family<prometheus::Counter>& worker_auth_refused_;
  prometheus::Family<prometheus::Counter>& job_requeues_;
  prometheus::Counter& late_results_;
  prometheus::Histogram& store_write_latency_;
  prometheus::Histogram& store_queue_wait_;
  prometheus::Histogram& store_handback_;
  prometheus::Histogram& store_group_batches_;
  prometheus::Family<prometheus::Counter>& store_errors_;
  prometheus::Gauge& store_paused_writes_;
  prometheus::Family<prometheus::Counter>& llm_requests_;
  prometheus::Family<prometheus::Histogram>& llm_latency_;
  prometheus::Family<prometheus::Counter>& llm_tokens_;
  prometheus::Family<prometheus::Counter>& llm_retries_;
  prometheus::Family<prometheus::Gauge>& llm_breaker_state_;
  prometheus::Family<prometheus::Gauge>& llm_in_flight_;
  prometheus::Family<prometheus::Gauge>& llm_down_;
  prometheus::Family<prometheus::Counter>& replay_restarts_;
  prometheus::Family<prometheus::Counter>& summaries_;
  prometheus::Family<prometheus::Gauge>& sessions_;
  prometheus::Family<prometheus::Counter>& sessions_ended_;
  prometheus::Family<prometheus::Gauge>& campaign_operators_;
  prometheus::Family<prometheus::Gauge>& library_kernels_;
  prometheus::Family<prometheus::Gauge>& library_passing_;
  prometheus::Family<prometheus::Gauge>& validations_pending_;
  prometheus::Family<prometheus::Gauge>& regressions_;
  prometheus::Family<prometheus::Gauge>& speed_regressions_;
  prometheus::Family<prometheus::Gauge>& toolchain_defects_;
  prometheus::Family<prometheus::Gauge>& toolchain_unknown_defects_;
  prometheus::Gauge& uptime_;
};

} // namespace opforge
