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
  m.job_requeues("worker_lost").Increment();
  m.store_errors("write").Increment();
  m.worker_auth_refused("unknown_key").Increment();
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
