#include "actors/metrics.hpp"

namespace opforge {

namespace {

// Device jobs take from milliseconds (lint) to minutes (a full OpInfo validation).
const prometheus::Histogram::BucketBoundaries job_buckets{
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};

// Store batches are sub-millisecond without sync and a few milliseconds with it.
const prometheus::Histogram::BucketBoundaries store_buckets{
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25};

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
      job_requeues_{family(prometheus::BuildCounter(), *registry_, "opforge_job_requeues_total",
                           "Device jobs requeued after their worker died or left")},
      late_results_{family(prometheus::BuildCounter(), *registry_, "opforge_late_results_total",
                           "Worker results ignored because the job no longer ran there")
                        .Add({})},
      store_write_latency_{family(prometheus::BuildHistogram(), *registry_,
                                  "opforge_store_write_latency_seconds",
                                  "Time to apply one write batch to the store")
                               .Add({}, store_buckets)},
      uptime_{family(prometheus::BuildGauge(), *registry_, "opforge_uptime_seconds",
                     "Seconds since the daemon started")
                  .Add({})} {
  family(prometheus::BuildGauge(), *registry_, "opforge_build_info",
         "Always 1; the labels say which build runs")
      .Add({{"version", std::move(version)}})
      .Set(1);
}

prometheus::Gauge& metrics::workers(const std::string& kind, const std::string& state) {
  return workers_.Add({{"kind", kind}, {"state", state}});
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

prometheus::Counter& metrics::job_requeues(const std::string& reason) {
  return job_requeues_.Add({{"reason", reason}});
}

} // namespace opforge
