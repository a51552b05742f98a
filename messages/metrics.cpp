#include "messages/metrics.hpp"

#include "messages/contract.hpp"
#include "messages/llm_messages.hpp"

namespace opforge {

namespace {

// Device jobs take from milliseconds (lint) to minutes (a full OpInfo validation).
const prometheus::Histogram::BucketBoundaries job_buckets{
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};

// Store batches are sub-millisecond without sync and a few milliseconds with it; a shared disk
// stalls an fdatasync for a second or more.
const prometheus::Histogram::BucketBoundaries store_buckets{0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                                            0.0025,  0.005,  0.01,    0.025,  0.05,
                                                            0.1,     0.25,   0.5,     1,      2.5};

// A group commit holds from one batch (an idle store) to every session's checkpoint at once.
const prometheus::Histogram::BucketBoundaries group_buckets{1,  2,   4,   8,   16,  32,
                                                            64, 128, 256, 512, 1024};

// A chat completion takes from a fraction of a second (replayed) to many minutes (reasoning).
const prometheus::Histogram::BucketBoundaries llm_buckets{0.05, 0.1, 0.25, 0.5, 1,   2.5, 5,   10,
                                                          20,   30,  60,   120, 300, 600, 1200};

// A series at 0 under `label` for each value of E.
template <class E>
void zero_each(prometheus::Family<prometheus::Counter>& counters, const char* label) {
  for (auto name : contract::enum_traits<E>::names)
    counters.Add({{label, std::string{name}}});
}

template <class Builder>
auto& family(Builder builder, prometheus::Registry& registry, const char* name, const char* help) {
  return builder.Name(name).Help(help).Register(registry);
}

} // namespace

metrics::metrics(std::string version)
    : registry_{std::make_shared<prometheus::Registry>()},
      workers_{family(prometheus::BuildGauge(), *registry_, "opforge_workers",
                      "Connected workers by device kind and state")},
      jobs_{family(prometheus::BuildCounter(), *registry_, "opforge_jobs_total",
                   "Finished device jobs by job kind and outcome")},
      job_latency_{family(prometheus::BuildHistogram(), *registry_, "opforge_job_latency_seconds",
                          "Time from dispatch to result of device jobs")},
      queue_depth_{family(prometheus::BuildGauge(), *registry_, "opforge_queue_depth",
                          "Device jobs waiting for a free worker slot")
                       .Add({})},
      malformed_frames_{family(prometheus::BuildCounter(), *registry_,
                               "opforge_malformed_frames_total",
                               "Frames dropped by a decoder, by reason")},
      worker_auth_refused_{family(prometheus::BuildCounter(), *registry_,
                                  "opforge_worker_auth_refused_total",
                                  "Connections to the workers socket refused by CURVE, by reason")},
      job_requeues_{family(prometheus::BuildCounter(), *registry_, "opforge_job_requeues_total",
                           "Device jobs requeued after their worker died or left")},
      late_results_{family(prometheus::BuildCounter(), *registry_, "opforge_late_results_total",
                           "Worker results ignored because the job no longer ran there")
                        .Add({})},
      store_write_latency_{family(prometheus::BuildHistogram(), *registry_,
                                  "opforge_store_write_latency_seconds",
                                  "Time to apply one group commit of write batches to the store")
                               .Add({}, store_buckets)},
      store_queue_wait_{family(prometheus::BuildHistogram(), *registry_,
                               "opforge_store_queue_wait_seconds",
                               "Time a write batch waited for the group commit it joined to start")
                            .Add({}, store_buckets)},
      store_handback_{family(prometheus::BuildHistogram(), *registry_,
                             "opforge_store_handback_seconds",
                             "Time from a group commit's end to the store answering its writers")
                          .Add({}, store_buckets)},
      store_group_batches_{family(prometheus::BuildHistogram(), *registry_,
                                  "opforge_store_group_batches", "Write batches per group commit")
                               .Add({}, group_buckets)},
      store_errors_{family(prometheus::BuildCounter(), *registry_, "opforge_store_errors_total",
                           "Failed database calls by operation")},
      store_paused_writes_{family(prometheus::BuildGauge(), *registry_,
                                  "opforge_store_paused_writes",
                                  "Write batches held back until the database takes writes again")
                               .Add({})},
      llm_requests_{family(prometheus::BuildCounter(), *registry_, "opforge_llm_requests_total",
                           "Finished chat requests by endpoint and outcome")},
      llm_latency_{family(prometheus::BuildHistogram(), *registry_,
                          "opforge_llm_request_latency_seconds",
                          "Acceptance-to-reply time of chat requests, retries included")},
      llm_tokens_{family(prometheus::BuildCounter(), *registry_, "opforge_llm_tokens_total",
                         "Tokens by endpoint and kind (prompt, completion, reasoning)")},
      llm_retries_{family(prometheus::BuildCounter(), *registry_, "opforge_llm_retries_total",
                          "Retried chat attempts by endpoint and reason")},
      llm_breaker_state_{family(prometheus::BuildGauge(), *registry_, "opforge_llm_breaker_state",
                                "Circuit breaker per endpoint: 0 closed, 1 half-open, 2 open")},
      llm_in_flight_{family(prometheus::BuildGauge(), *registry_, "opforge_llm_in_flight",
                            "HTTP attempts under way per endpoint")},
      llm_down_{family(prometheus::BuildGauge(), *registry_, "opforge_llm_down",
                       "1 while every attempt of an endpoint has failed for longer than its "
                       "outage_after")},
      replay_restarts_{family(prometheus::BuildCounter(), *registry_,
                              "opforge_replay_restarts_total",
                              "Replay servers the daemon started again after they died")},
      summaries_{family(prometheus::BuildCounter(), *registry_, "opforge_summaries_total",
                        "Compiler-log summaries by method (raw, deterministic, llm, fallback)")},
      sessions_{family(prometheus::BuildGauge(), *registry_, "opforge_sessions",
                       "Running operator sessions by the state they wait in")},
      sessions_ended_{family(prometheus::BuildCounter(), *registry_, "opforge_sessions_ended_total",
                             "Operator sessions that ended, by outcome (SUCCESS, FAILED)")},
      campaign_operators_{family(prometheus::BuildGauge(), *registry_, "opforge_campaign_operators",
                                 "Operators of each campaign by state (waiting, running, "
                                 "succeeded, failed)")},
      library_kernels_{family(prometheus::BuildGauge(), *registry_, "opforge_library_kernels",
                              "Kernels in the library by the device kind they were accepted on")},
      library_passing_{family(prometheus::BuildGauge(), *registry_, "opforge_library_passing",
                              "Current kernels passing on each live toolchain fingerprint")},
      validations_pending_{family(prometheus::BuildGauge(), *registry_,
                                  "opforge_validations_pending",
                                  "Current kernels owed a re-validation on each live toolchain")},
      regressions_{family(prometheus::BuildGauge(), *registry_, "opforge_regressions",
                          "Kernels that passed on one toolchain and fail on a later one")},
      speed_regressions_{family(prometheus::BuildGauge(), *registry_, "opforge_speed_regressions",
                                "Kernels that pass on a later toolchain but run slower there "
                                "than on the previous one, beyond the measured noise")},
      toolchain_defects_{family(prometheus::BuildGauge(), *registry_, "opforge_toolchain_defects",
                                "Defects the conformance probes found on each toolchain")},
      toolchain_unknown_defects_{
          family(prometheus::BuildGauge(), *registry_, "opforge_toolchain_unknown_defects",
                 "Defects found on each toolchain that its device kind does not list as known")},
      uptime_{family(prometheus::BuildGauge(), *registry_, "opforge_uptime_seconds",
                     "Seconds since the daemon started")
                  .Add({})} {
  family(prometheus::BuildGauge(), *registry_, "opforge_build_info",
         "Always 1; the labels say which build runs")
      .Add({{"version", std::move(version)}})
      .Set(1);
  // rate() and increase() count a counter's first step only from an earlier sample at 0; a
  // series made at its first increment has none, so every label value known now starts at 0.
  for (auto kind : contract::enum_traits<contract::job_kind>::names) {
    for (auto status : contract::enum_traits<contract::job_status>::names)
      jobs_.Add({{"kind", std::string{kind}}, {"outcome", std::string{status}}});
    jobs_.Add({{"kind", std::string{kind}}, {"outcome", std::string{job_lost}}});
    job_latency_.Add({{"kind", std::string{kind}}}, job_buckets);
  }
  for (auto ended : {contract::session_state::success, contract::session_state::failed})
    sessions_ended_.Add({{"outcome", to_string(ended)}});
  zero_each<summary_method>(summaries_, "method");
  zero_each<requeue_reason>(job_requeues_, "reason");
  zero_each<store_operation>(store_errors_, "operation");
  zero_each<auth_refusal>(worker_auth_refused_, "reason");
}

void metrics::add_llm_endpoint(const std::string& endpoint) {
  for (auto outcome : contract::enum_traits<chat_outcome>::names)
    llm_requests_.Add({{"endpoint", endpoint}, {"outcome", std::string{outcome}}});
}

prometheus::Gauge& metrics::workers(const std::string& kind, const std::string& state) {
  return workers_.Add({{"kind", kind}, {"state", state}});
}

void metrics::remove_workers(const std::string& kind, const std::string& state) {
  prometheus::Labels labels{{"kind", kind}, {"state", state}};
  if (workers_.Has(labels))
    workers_.Remove(&workers_.Add(labels));
}

prometheus::Counter& metrics::jobs(const std::string& kind, const std::string& outcome) {
  return jobs_.Add({{"kind", kind}, {"outcome", outcome}});
}

prometheus::Histogram& metrics::job_latency(const std::string& kind) {
  return job_latency_.Add({{"kind", kind}}, job_buckets);
}

prometheus::Counter& metrics::malformed_frames(const std::string& reason) {
  return malformed_frames_.Add({{"reason", reason}});
}

prometheus::Counter& metrics::worker_auth_refused(auth_refusal reason) {
  return worker_auth_refused_.Add({{"reason", to_string(reason)}});
}

prometheus::Counter& metrics::job_requeues(requeue_reason reason) {
  return job_requeues_.Add({{"reason", to_string(reason)}});
}

prometheus::Counter& metrics::store_errors(store_operation operation) {
  return store_errors_.Add({{"operation", to_string(operation)}});
}

prometheus::Counter& metrics::llm_requests(const std::string& endpoint,
                                           const std::string& outcome) {
  return llm_requests_.Add({{"endpoint", endpoint}, {"outcome", outcome}});
}

prometheus::Histogram& metrics::llm_latency(const std::string& endpoint) {
  return llm_latency_.Add({{"endpoint", endpoint}}, llm_buckets);
}

prometheus::Counter& metrics::llm_tokens(const std::string& endpoint, const std::string& kind) {
  return llm_tokens_.Add({{"endpoint", endpoint}, {"kind", kind}});
}

prometheus::Counter& metrics::llm_retries(const std::string& endpoint, const std::string& reason) {
  return llm_retries_.Add({{"endpoint", endpoint}, {"reason", reason}});
}

prometheus::Gauge& metrics::llm_breaker_state(const std::string& endpoint) {
  return llm_breaker_state_.Add({{"endpoint", endpoint}});
}

prometheus::Gauge& metrics::llm_in_flight(const std::string& endpoint) {
  return llm_in_flight_.Add({{"endpoint", endpoint}});
}

prometheus::Gauge& metrics::llm_down(const std::string& endpoint) {
  return llm_down_.Add({{"endpoint", endpoint}});
}

prometheus::Counter& metrics::replay_restarts(const std::string& endpoint) {
  return replay_restarts_.Add({{"endpoint", endpoint}});
}

prometheus::Counter& metrics::summaries(const std::string& method) {
  return summaries_.Add({{"method", method}});
}

prometheus::Gauge& metrics::sessions(const std::string& state) {
  return sessions_.Add({{"state", state}});
}

prometheus::Counter& metrics::sessions_ended(const std::string& outcome) {
  return sessions_ended_.Add({{"outcome", outcome}});
}

prometheus::Gauge& metrics::campaign_operators(const std::string& campaign,
                                               const std::string& state) {
  return campaign_operators_.Add({{"campaign", campaign}, {"state", state}});
}

prometheus::Gauge& metrics::library_kernels(const std::string& device_kind) {
  return library_kernels_.Add({{"device_kind", device_kind}});
}

prometheus::Gauge& metrics::library_passing(const std::string& device_kind,
                                            const std::string& fingerprint) {
  return library_passing_.Add({{"device_kind", device_kind}, {"fingerprint", fingerprint}});
}

prometheus::Gauge& metrics::validations_pending(const std::string& device_kind,
                                                const std::string& fingerprint) {
  return validations_pending_.Add({{"device_kind", device_kind}, {"fingerprint", fingerprint}});
}

void metrics::remove_toolchain(const std::string& device_kind, const std::string& fingerprint) {
  prometheus::Labels labels{{"device_kind", device_kind}, {"fingerprint", fingerprint}};
  for (auto* gauges : {&library_passing_, &validations_pending_})
    if (gauges->Has(labels))
      gauges->Remove(&gauges->Add(labels));
}

prometheus::Gauge& metrics::regressions(const std::string& device_kind) {
  return regressions_.Add({{"device_kind", device_kind}});
}

prometheus::Gauge& metrics::speed_regressions(const std::string& device_kind) {
  return speed_regressions_.Add({{"device_kind", device_kind}});
}

prometheus::Gauge& metrics::toolchain_defects(const std::string& device_kind,
                                              const std::string& fingerprint) {
  return toolchain_defects_.Add({{"device_kind", device_kind}, {"fingerprint", fingerprint}});
}

prometheus::Gauge& metrics::toolchain_unknown_defects(const std::string& device_kind,
                                                      const std::string& fingerprint) {
  return toolchain_unknown_defects_.Add(
      {{"device_kind", device_kind}, {"fingerprint", fingerprint}});
}

} // namespace opforge
