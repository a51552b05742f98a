// Checkpoint latency of the generation loop: N sessions at once over the real store (RocksDB), an
// in-process endpoint that answers from a script, and device jobs answered by a scripted device
// manager. Each session goes answer -> lint -> test (accuracy error) -> feedback -> answer -> lint
// -> test (pass), so every state and one feedback round are exercised.
//
// With zero think time every session checkpoints again the moment the store answers, so by
// Little's law a checkpoint's mean latency is sessions / group-commit throughput: a saturation
// measure. `--think-ms` gives each LLM answer and each test job a wait drawn from an exponential
// distribution of that mean, as a real endpoint or worker would take, so the store sees the
// arrivals a session would cause. Each value in the list is one campaign in a fresh database, run
// one after the other in this process, and the results are printed side by side with the store's
// own breakdown (its metrics: queue wait, group write + fdatasync, hand-back).
//
//   session_bench [--sessions 500] [--think-ms 0,50,200,1000] [--dir /tmp/opforge-bench]

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
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

/// Mean and the upper bound of the bucket holding the 99th percentile, in milliseconds.
struct histogram_summary {
  uint64_t count = 0;
  double mean_ms = 0;
  double p99_bound_ms = 0;
};

histogram_summary summarize(prometheus::Histogram& histogram, double scale = 1e3) {
  auto h = histogram.Collect().histogram;
  histogram_summary s;
  s.count = h.sample_count;
  if (h.sample_count == 0)
    return s;
  s.mean_ms = scale * h.sample_sum / static_cast<double>(h.sample_count);
  for (const auto& bucket : h.bucket)
    if (static_cast<double>(bucket.cumulative_count) >=
        0.99 * static_cast<double>(h.sample_count)) {
      s.p99_bound_ms = scale * bucket.upper_bound;
      break;
    }
  return s;
}

/// Answers what `inner` answers, after a think time drawn from an exponential distribution of
/// mean `mean_ms` for the requests `delays` picks; `atom::retry` hands over an answer that is due.
template <class Interface, class Atom, class Request, class Result>
struct thinking_state {
  thinking_state() = default; // not an aggregate: CAF would try to build it from `self`
  Interface inner;
  std::function<bool(const Request&)> delays;
  std::exponential_distribution<double> think_ms{1.0};
  std::mt19937_64 rng;
  std::map<uint64_t, std::pair<caf::typed_response_promise<Result>, Result>> due;
  uint64_t next = 0;
  static inline const char* name = "thinking";
};

template <class Interface, class Atom, class Request, class Result, class CancelId>
auto thinking(typename Interface::template extend<caf::reacts_to<atom::retry, uint64_t>>::
                  template stateful_pointer<thinking_state<Interface, Atom, Request, Result>>
                      self,
              Interface inner, double mean_ms, uint64_t seed,
              std::function<bool(const Request&)> delays) ->
    typename Interface::template extend<caf::reacts_to<atom::retry, uint64_t>>::behavior_type {
  auto& st = self->state;
  st.inner = inner;
  st.delays = std::move(delays);
  st.think_ms = std::exponential_distribution<double>{1.0 / mean_ms};
  st.rng.seed(seed);
  return {
      [self](Atom verb, Request& request) -> caf::result<Result> {
        auto promise = self->template make_response_promise<Result>();
        bool delay = self->state.delays(request);
        self->request(self->state.inner, caf::infinite, verb, std::move(request))
            .then(
                [self, promise, delay](Result& result) mutable {
                  if (!delay) {
                    promise.deliver(std::move(result));
                    return;
                  }
                  auto& st = self->state;
                  auto id = st.next++;
                  st.due.emplace(id, std::pair{promise, std::move(result)});
                  std::chrono::microseconds wait{static_cast<int64_t>(1e3 * st.think_ms(st.rng))};
                  self->delayed_send(self, wait, atom::retry_v, id);
                },
                [promise](caf::error& err) mutable { promise.deliver(std::move(err)); });
        return promise;
      },
      [self](atom::cancel, CancelId& id) {
        self->send(self->state.inner, atom::cancel_v, std::move(id));
      },
      [self](atom::retry, uint64_t id) {
        auto found = self->state.due.find(id);
        if (found == self->state.due.end())
          return;
        found->second.first.deliver(std::move(found->second.second));
        self->state.due.erase(found);
      },
  };
}

/// Forwards checkpoints to the store, noting each one's latency and payload bytes.
struct checkpoint_log {
  std::vector<double> latencies_ms;
  // Those of every session's later checkpoints: the first ones all arrive at once, when the
  // campaign starts, whatever the think time.
  std::vector<double> later_ms;
  std::set<std::string> started;         // sessions whose first checkpoint was seen
  std::map<std::string, uint64_t> bytes; // keys and values, by family
};

struct observing_state {
  observing_state() = default; // not an aggregate: CAF would try to build it from `self`
  store_actor store;
  std::shared_ptr<checkpoint_log> log;
  static inline const char* name = "observing_store";
};

checkpoint_actor::behavior_type observing(checkpoint_actor::stateful_pointer<observing_state> self,
                                          store_actor store, std::shared_ptr<checkpoint_log> log) {
  self->state.store = store;
  self->state.log = std::move(log);
  return {
      [self](atom::write, write_batch& batch) -> caf::result<atom::ok> {
        bool later = false;
        for (const auto& op : batch.ops) {
          self->state.log->bytes[std::string{to_string(op.family)}] +=
              op.key.size() + (op.value ? op.value->size() : 0);
          if (op.family == family::sessions)
            later = !self->state.log->started.insert(op.key).second;
        }
        auto promise = self->make_response_promise<atom::ok>();
        auto started = clock_type::now();
        self->request(self->state.store, caf::infinite, atom::write_v, std::move(batch))
            .then(
                [self, promise, started, later](atom::ok) mutable {
                  auto ms = std::chrono::duration<double, std::milli>(clock_type::now() - started)
                                .count();
                  self->state.log->latencies_ms.push_back(ms);
                  if (later)
                    self->state.log->later_ms.push_back(ms);
                  promise.deliver(atom::ok_v);
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
  };
}

struct run_result {
  double think_ms = 0;
  uint64_t succeeded = 0;
  double seconds = 0;
  std::vector<double> latencies_ms;
  std::vector<double> later_ms;
  std::map<std::string, uint64_t> bytes;
  histogram_summary queue_wait, write, handback;
  double groups = 0;
  double batches_per_group = 0;
  long rss_growth_kib = 0;
};

std::optional<run_result> run_campaign(caf::actor_system& sys, const prompt_templates& templates,
                                       size_t sessions, double think_ms,
                                       const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  auto telemetry = std::make_shared<metrics>("bench");
  auto store = spawn_store(sys, dir, telemetry);
  if (!store) {
    std::fprintf(stderr, "%s\n", render(store.error()).c_str());
    return std::nullopt;
  }
  auto log = std::make_shared<checkpoint_log>();
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
    jobs->add_test(op, done(test_verdict(contract::outcome::accuracy_error, 1, 0,
                                         contract::test_failure{.dtype = "float32",
                                                                .diff = values_differ(1.0)})));
    jobs->add_test(op, done(test_verdict(contract::outcome::pass, 4, 4)));
  }
  session_services services;
  services.store = sys.spawn(observing, *store, log);
  chat_actor llm = sys.spawn(scripted_chat, chat);
  job_runner_actor runner = sys.spawn(scripted_jobs, jobs);
  if (think_ms > 0) {
    // Lint runs on the daemon's host in milliseconds; an LLM answer and a test job take long.
    llm = sys.spawn(thinking<chat_actor, atom::complete, chat_request, chat_result, uint64_t>, llm,
                    think_ms, 1, [](const chat_request&) { return true; });
    runner = sys.spawn(
        thinking<job_runner_actor, atom::submit, device_job, device_job_result, std::string>,
        runner, think_ms, 2,
        [](const device_job& job) { return job.kind == contract::job_kind::test; });
  }
  services.llm = llm;
  services.jobs = runner;
  services.templates = std::make_shared<const prompt_templates>(templates);
  services.examples = "EXAMPLES";

  run_result result;
  result.think_ms = think_ms;
  auto rss_before = max_rss_kib();
  auto started = clock_type::now();
  caf::scoped_actor self{sys};
  auto run = sys.spawn(campaign, spec, services, std::vector<session_record>{});
  self->request(run, caf::infinite, atom::run_v)
      .receive([&](campaign_status& s) { result.succeeded = s.succeeded; },
               [&](const caf::error& err) { std::fprintf(stderr, "%s\n", render(err).c_str()); });
  result.seconds = std::chrono::duration<double>(clock_type::now() - started).count();
  result.rss_growth_kib = max_rss_kib() - rss_before;
  result.queue_wait = summarize(telemetry->store_queue_wait());
  result.write = summarize(telemetry->store_write_latency());
  result.handback = summarize(telemetry->store_handback());
  auto groups = telemetry->store_group_batches().Collect().histogram;
  result.groups = static_cast<double>(groups.sample_count);
  result.batches_per_group =
      groups.sample_count ? groups.sample_sum / static_cast<double>(groups.sample_count) : 0;
  self->send_exit(run, caf::exit_reason::user_shutdown);
  self->send_exit(llm, caf::exit_reason::user_shutdown);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  stop(self, services, *store);
  std::filesystem::remove_all(dir);
  result.latencies_ms = std::move(log->latencies_ms);
  result.later_ms = std::move(log->later_ms);
  result.bytes = log->bytes;
  return result;
}

std::vector<double> parse_list(const std::string& text) {
  std::vector<double> values;
  std::stringstream in{text};
  for (std::string item; std::getline(in, item, ',');)
    values.push_back(std::stod(item));
  return values;
}

} // namespace

int main(int argc, char** argv) {
  size_t sessions = 500;
  std::vector<double> thinks{0};
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "opforge-session-bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--sessions")
      sessions = std::stoul(argv[i + 1]);
    else if (flag == "--think-ms")
      thinks = parse_list(argv[i + 1]);
    else if (flag == "--dir")
      dir = argv[i + 1];
  }
  auto templates = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
  if (!templates) {
    std::fprintf(stderr, "%s\n", render(templates.error()).c_str());
    return 1;
  }
  system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<run_result> results;
  for (auto think : thinks) {
    auto result = run_campaign(sys, *templates, sessions, think, dir);
    if (!result)
      return 1;
    const auto& r = *result;
    auto n = static_cast<double>(r.latencies_ms.size());
    uint64_t bytes = 0;
    std::string by_family;
    for (const auto& [family, count] : r.bytes) {
      bytes += count;
      char part[64];
      std::snprintf(part, sizeof part, " %s %.2f", family.c_str(), n > 0 ? count / n / 1024 : 0);
      by_family += part;
    }
    std::printf("think %.0f ms: sessions %zu succeeded %llu in %.2f s; checkpoints %zu (%.0f/s, "
                "%.2f KiB each:%s); p50 %.2f p99 %.2f max %.2f ms; after each session's first: "
                "p50 %.2f p99 %.2f ms\n",
                r.think_ms, sessions, static_cast<unsigned long long>(r.succeeded), r.seconds,
                r.latencies_ms.size(), n / r.seconds, n > 0 ? bytes / n / 1024 : 0,
                by_family.c_str(), percentile(r.latencies_ms, 0.5),
                percentile(r.latencies_ms, 0.99), percentile(r.latencies_ms, 1.0),
                percentile(r.later_ms, 0.5), percentile(r.later_ms, 0.99));
    std::printf("  store: queue wait mean %.2f (p99 <= %.2f) ms, group write+fdatasync mean %.2f "
                "(p99 <= %.2f) ms, hand-back mean %.2f (p99 <= %.2f) ms; %.0f groups of %.1f "
                "batches; peak RSS growth %.1f KiB per session\n",
                r.queue_wait.mean_ms, r.queue_wait.p99_bound_ms, r.write.mean_ms,
                r.write.p99_bound_ms, r.handback.mean_ms, r.handback.p99_bound_ms, r.groups,
                r.batches_per_group, static_cast<double>(r.rss_growth_kib) / sessions);
    std::fflush(stdout);
    results.push_back(std::move(*result));
  }
  std::printf("\n| think ms | wall s | checkpoints/s | p50 ms | p99 ms | max ms | queue wait mean "
              "ms | group write mean ms | hand-back mean ms | groups | batches/group | p99 after "
              "the first ms "
              "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool all_succeeded = true;
  for (const auto& r : results) {
    std::printf("| %.0f | %.2f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.1f | "
                "%.2f |\n",
                r.think_ms, r.seconds, static_cast<double>(r.latencies_ms.size()) / r.seconds,
                percentile(r.latencies_ms, 0.5), percentile(r.latencies_ms, 0.99),
                percentile(r.latencies_ms, 1.0), r.queue_wait.mean_ms, r.write.mean_ms,
                r.handback.mean_ms, r.groups, r.batches_per_group, percentile(r.later_ms, 0.99));
    all_succeeded = all_succeeded && r.succeeded == sessions;
  }
  return all_succeeded ? 0 : 1;
}
