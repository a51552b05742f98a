#include "messages/metrics.hpp"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

using namespace opforge;

namespace {

std::string scrape(const metrics& m) {
  return prometheus::TextSerializer{}.Serialize(m.registry()->Collect());
}

} // namespace

TEST(Metrics, SameLabelsGiveTheSameChild) {
  metrics m{"test"};
  m.jobs("test", "pass").Increment();
  m.jobs("test", "pass").Increment();
  EXPECT_EQ(m.jobs("test", "pass").Value(), 2);
  EXPECT_EQ(m.jobs("test", "crash").Value(), 0);
}

// A family appears in a scrape once it has a child; unlabelled ones have theirs from the start.
TEST(Metrics, ScrapeHoldsEveryFamilyAndTheBuildInfo) {
  metrics m{"1.2.3"};
  m.workers("interpreter", "idle").Set(1);
  m.malformed_frames("oversized").Increment();
  m.job_latency("test").Observe(0.2);
  m.jobs("lint", "done").Increment();
  m.job_requeues(requeue_reason::worker_lost).Increment();
  m.store_errors(store_operation::write).Increment();
  m.worker_auth_refused(auth_refusal::unknown_key).Increment();
  auto text = scrape(m);
  for (auto name : {"opforge_workers", "opforge_jobs_total", "opforge_job_latency_seconds",
                    "opforge_queue_depth", "opforge_malformed_frames_total",
                    "opforge_job_requeues_total", "opforge_store_write_latency_seconds",
                    "opforge_store_paused_writes 0", "opforge_uptime_seconds"})
    EXPECT_NE(text.find(name), std::string::npos) << name;
  EXPECT_NE(text.find(R"(opforge_store_errors_total{operation="write"} 1)"), std::string::npos);
  EXPECT_NE(text.find(R"(opforge_build_info{version="1.2.3"} 1)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(opforge_malformed_frames_total{reason="oversized"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find(R"(opforge_worker_auth_refused_total{reason="unknown_key"} 1)"),
            std::string::npos);
}

// rate() and increase() see a counter's first step only from a sample at 0 before it: every label
// value known up front is in the first scrape, at 0, and an endpoint's outcomes from its start.
TEST(Metrics, KnownCounterSeriesStartAtZero) {
  metrics m{"test"};
  m.add_llm_endpoint("vllm");
  auto text = scrape(m);
  for (auto series : {R"(opforge_jobs_total{kind="catalog",outcome="failed"} 0)",
                      R"(opforge_jobs_total{kind="test",outcome="lost"} 0)",
                      R"(opforge_sessions_ended_total{outcome="SUCCESS"} 0)",
                      R"(opforge_sessions_ended_total{outcome="FAILED"} 0)",
                      R"(opforge_summaries_total{method="deterministic_fallback"} 0)",
                      R"(opforge_job_requeues_total{reason="deadline"} 0)",
                      R"(opforge_store_errors_total{operation="close"} 0)",
                      R"(opforge_worker_auth_refused_total{reason="handshake"} 0)",
                      R"(opforge_llm_requests_total{endpoint="vllm",outcome="endpoint_fault"} 0)"})
    EXPECT_NE(text.find(std::string{"\n"} + series + "\n"), std::string::npos) << series << text;
  m.jobs("catalog", "failed").Increment();
  EXPECT_NE(scrape(m).find(R"(opforge_jobs_total{kind="catalog",outcome="failed"} 1)"),
            std::string::npos);
}
