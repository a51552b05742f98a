// Throughput of the generation loop itself: N sessions at once over the real store (RocksDB),
// an in-process endpoint that answers at once from a script, and device jobs answered at once by a
// scripted device manager. Each session goes answer -> lint -> test (accuracy error) -> feedback
// -> answer -> lint -> test (pass), so every state and one feedback round are exercised.
// Prints transitions/s, checkpoint latency percentiles and memory per session.
//
//   session_bench [--sessions 500] [--dir /tmp/opforge-bench]

#include "actors/sessions/campaign.hpp"
#include "actors/store/store.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/session_messages.hpp"
#include "messages/wire.hpp"
#include "tests/test_session_support.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <sys/resource.h>

using namespace opforge;
using namespace opforge::testing;
using clock_type = std::chrono::steady_clock;

namespace {

long max_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * values.size()))];
}

} // namespace

int main(int argc, char** argv) {
  size_t sessions = 500;
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "opforge-session-bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--sessions")
      sessions = std::stoul(argv[i + 1]);
    else if (flag == "--dir")
      dir = argv[i + 1];
  }
  std::filesystem::remove_all(dir);
  auto templates = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
  if (!templates) {
    std::fprintf(stderr, "%s\n", render(templates.error()).c_str());
    return 1;
  }
  system_config cfg;
  caf::actor_system sys{cfg};
  auto telemetry = std::make_shared<metrics>("bench");
  auto store = spawn_store(sys, dir, telemetry);
  if (!store) {
    std::fprintf(stderr, "%s\n", render(store.error()).c_str());
    return 1;
  }
  auto latencies = std::make_shared<std::vector<double>>();
  auto chat = std::make_shared<chat_script>();
  auto jobs = std::make_shared<job_script>();
  campaign_spec spec;
  spec.campaign_id = "bench";
  spec.endpoint = "scripted";
  spec.concurrency = static_cast<uint32_t>(sessions);
  for (size_t i = 0; i < sessions; ++i) {
    auto op = "op" + std::to_string(i);
    spec.operators.push_back({op, "", "bench", op + "(input) -> Tensor", {"float32"}});
    for (int attempt = 0; attempt < 2; ++attempt)
      chat->add(op, chat_outcome::ok,
                "```python\n@triton.jit\ndef k(x_ptr):\n    pass\n\n\ndef " + wrapper_name(op) +
                    "(input):\n    k[(1,)](input)\n    return input\n```\n");
    jobs->add_test(
        op, done(test_verdict(contract::outcome::accuracy_error, 1, 0,
                              contract::test_failure{.dtype = "float32",
                                                     .diff = diff_map({{"max_abs_error", 1.0}})})));
    jobs->add_test(op, done(test_verdict(contract::outcome::pass, 4, 4)));
  }
  session_services services;
  services.store = sys.spawn(observed_store, *store, [latencies](auto latency) {
    latencies->push_back(std::chrono::duration<double, std::milli>(latency).count());
  });
  services.llm = sys.spawn(scripted_chat, chat);
  services.jobs = sys.spawn(scripted_jobs, jobs);
  services.templates = std::make_shared<const prompt_templates>(std::move(*templates));
  services.examples = "EXAMPLES";

  auto rss_before = max_rss_kib();
  auto started = clock_type::now();
  caf::scoped_actor self{sys};
  auto run = sys.spawn(campaign, spec, services, std::vector<session_record>{});
  campaign_status status;
  self->request(run, caf::infinite, atom::run_v)
      .receive([&](campaign_status& s) { status = std::move(s); },
               [&](const caf::error& err) { std::fprintf(stderr, "%s\n", render(err).c_str()); });
  auto seconds = std::chrono::duration<double>(clock_type::now() - started).count();
  auto rss_after = max_rss_kib();
  // Each checkpoint of a session holds one or more transitions; count them from the records.
  uint64_t transitions = 0;
  self->request(*store, caf::infinite, atom::scan_v, family::events, std::string{},
                uint64_t{100'000'000})
      .receive([&](std::vector<key_value>& events) { transitions = events.size(); },
               [&](const caf::error& err) { std::fprintf(stderr, "%s\n", render(err).c_str()); });
  std::printf("sessions %zu succeeded %llu failed %llu in %.2f s\n", sessions,
              static_cast<unsigned long long>(status.succeeded),
              static_cast<unsigned long long>(status.failed), seconds);
  std::printf("transitions %llu (%.0f/s), checkpoints %zu (%.0f/s)\n",
              static_cast<unsigned long long>(transitions), transitions / seconds,
              latencies->size(), latencies->size() / seconds);
  std::printf("checkpoint latency ms: p50 %.2f p99 %.2f max %.2f\n", percentile(*latencies, 0.5),
              percentile(*latencies, 0.99), percentile(*latencies, 1.0));
  // What the store's thread itself spent: the rest of a checkpoint's latency is waiting for a CPU.
  auto groups = telemetry->store_write_latency().Collect().histogram;
  std::printf("store: %llu group commits (%.1f batches each), %.2f ms each on average\n",
              static_cast<unsigned long long>(groups.sample_count),
              groups.sample_count ? static_cast<double>(latencies->size()) / groups.sample_count
                                  : 0,
              groups.sample_count ? 1e3 * groups.sample_sum / groups.sample_count : 0);
  std::printf("peak RSS growth %.1f KiB per session (%ld -> %ld KiB)\n",
              static_cast<double>(rss_after - rss_before) / sessions, rss_before, rss_after);
  stop(self, services, *store);
  std::filesystem::remove_all(dir);
  return status.succeeded == sessions ? 0 : 1;
}
