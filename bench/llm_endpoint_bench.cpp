// Throughput of one llm_endpoint against the replay server: N requests, all submitted at once,
// through a concurrency limit C, with the server answering each after L ms. The ideal is C / L
// requests per second; the benchmark reports the measured rate as a ratio of it, how many
// requests got no reply or a reply other than ok, and the CPU time per request of this process
// (the daemon side: actors plus the HTTP thread) and of the replay server.
//
// Three clients run side by side against fresh servers:
// - "http_client only": the endpoint's HTTP thread driven directly, no actors: what the host and
//   the Python server allow, the baseline the actor layer is judged against;
// - the endpoint actor on CAF's default work-stealing scheduler, which busy-polls and naps in
//   50 us steps before it sleeps;
// - the endpoint actor on a "quiet" scheduler that goes to its condition variable at once (CAF
//   wakes it on enqueue), to show what the polling costs per request.
//
//   build/bench/llm_endpoint_bench [--requests 2000] [--concurrency 32] [--latency-ms 50]

#include "actors/llm/http_client.hpp"
#include "actors/llm/llm_endpoint.hpp"
#include "actors/llm/replay_launcher.hpp"
#include "messages/actors.hpp"
#include "messages/errors.hpp"
#include "messages/llm_messages.hpp"
#include "messages/metrics.hpp"
#include "messages/system_config.hpp"
#include "messages/type_ids.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

using namespace opforge;

namespace {

double cpu_seconds(int who) {
  rusage usage{};
  getrusage(who, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::string write_cassette(const std::filesystem::path& path) {
  nlohmann::json entry{
      {"operator", "bench"},
      {"response",
       {{"id", "chatcmpl-bench"},
        {"object", "chat.completion"},
        {"choices",
         {{{"index", 0},
           {"message", {{"role", "assistant"}, {"content", "def add_kernel(x, y): ..."}}},
           {"finish_reason", "stop"}}}},
        {"usage", {{"prompt_tokens", 900}, {"completion_tokens", 300}}}}}};
  std::ofstream{path} << entry.dump() << '\n';
  return path.string();
}

struct run_result {
  double wall = 0;
  size_t replied = 0;
  uint32_t ok = 0;
  double daemon_cpu = 0;
  double server_cpu = 0;
};

enum class client { bare_http, endpoint_default, endpoint_quiet };

const char* to_string(client kind) {
  switch (kind) {
  case client::bare_http:
    return "http_client only (no actors)";
  case client::endpoint_default:
    return "llm_endpoint, CAF default scheduler";
  case client::endpoint_quiet:
    return "llm_endpoint, quiet scheduler";
  }
  return "?";
}

chat_request make_request(uint64_t id) {
  chat_request req;
  req.request_id = id;
  req.session_id = "s" + std::to_string(id);
  req.op = "bench";
  req.messages = {{"system", std::string(2000, 's')}, {"user", std::string(1600, 'u')}};
  return req;
}

// Keeps `concurrency` posts in flight on a bare http_client until `requests` have finished.
void drive_http_client(const std::string& base_url, uint32_t requests, uint32_t concurrency,
                       run_result& out) {
  nlohmann::json body{
      {"model", "replay"}, {"max_tokens", 8192}, {"messages", nlohmann::json::array()}};
  for (const auto& message : make_request(0).messages)
    body["messages"].push_back({{"role", message.role}, {"content", message.content}});
  auto make_post = [&, text = body.dump()](uint64_t id) {
    http_post post;
    post.ticket = id;
    post.url = base_url + "/chat/completions";
    post.headers = {"X-Opforge-Operator: bench"};
    post.body = text;
    return post;
  };
  std::mutex mutex;
  std::condition_variable all_done;
  uint64_t next = 1;
  http_client* http = nullptr;
  http_client driver{[&](http_exchange x) {
                       std::lock_guard guard{mutex};
                       ++out.replied;
                       out.ok += x.status == 200;
                       if (next <= requests)
                         http->post(make_post(next++));
                       if (out.replied == requests)
                         all_done.notify_one();
                     },
                     ""};
  http = &driver;
  std::unique_lock guard{mutex};
  for (; next <= std::min<uint64_t>(concurrency, requests); ++next)
    driver.post(make_post(next));
  all_done.wait(guard, [&] { return out.replied == requests; });
}

void drive_endpoint(const std::string& base_url, uint32_t requests, uint32_t concurrency,
                    bool quiet_scheduler, run_result& out) {
  system_config cfg;
  if (quiet_scheduler) {
    cfg.set("work-stealing.aggressive-poll-attempts", 1);
    cfg.set("work-stealing.moderate-poll-attempts", 1);
  }
  caf::actor_system sys{cfg};
  endpoint_config endpoint_cfg;
  endpoint_cfg.name = "bench";
  endpoint_cfg.base_url = base_url;
  endpoint_cfg.model = "replay";
  endpoint_cfg.concurrency = concurrency;
  endpoint_cfg.context_window = 131072;
  endpoint_cfg.retry_budget_max = 0; // a retry would hide a fault from the count
  auto endpoint = sys.spawn(llm_endpoint, endpoint_cfg, std::make_shared<metrics>("bench"));
  caf::scoped_actor self{sys};
  std::vector<decltype(self->request(endpoint, caf::infinite, atom::complete_v, chat_request{}))>
      pending;
  pending.reserve(requests);
  for (uint64_t id = 1; id <= requests; ++id)
    pending.push_back(self->request(endpoint, caf::infinite, atom::complete_v, make_request(id)));
  std::set<uint64_t> replied;
  for (auto& handle : pending)
    handle.receive(
        [&](chat_result& r) {
          replied.insert(r.request_id);
          out.ok += r.outcome == chat_outcome::ok;
        },
        [&](caf::error& err) { std::fprintf(stderr, "error: %s\n", render(err).c_str()); });
  out.replied = replied.size();
  caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
}

run_result run(const replay_server::options& opts, uint32_t requests, uint32_t concurrency,
               client kind) {
  run_result out;
  auto children_before = cpu_seconds(RUSAGE_CHILDREN);
  {
    auto server = replay_server::start(opts);
    if (!server) {
      std::fprintf(stderr, "%s\n", render(server.error()).c_str());
      std::exit(1);
    }
    auto cpu_before = cpu_seconds(RUSAGE_SELF);
    auto started = std::chrono::steady_clock::now();
    if (kind == client::bare_http)
      drive_http_client((*server)->base_url(), requests, concurrency, out);
    else
      drive_endpoint((*server)->base_url(), requests, concurrency, kind == client::endpoint_quiet,
                     out);
    out.wall = std::chrono::duration<double>{std::chrono::steady_clock::now() - started}.count();
    out.daemon_cpu = cpu_seconds(RUSAGE_SELF) - cpu_before;
  } // the server is reaped here, so its CPU time shows up under RUSAGE_CHILDREN
  out.server_cpu = cpu_seconds(RUSAGE_CHILDREN) - children_before;
  return out;
}

} // namespace

int main(int argc, char** argv) {
  uint32_t requests = 2000;
  uint32_t concurrency = 32;
  uint32_t latency_ms = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    auto value = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    if (flag == "--requests")
      requests = value;
    else if (flag == "--concurrency")
      concurrency = value;
    else if (flag == "--latency-ms")
      latency_ms = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);
  auto dir = std::filesystem::temp_directory_path() / ("opforge-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  replay_server::options opts;
  opts.python = OPFORGE_PYTHON;
  opts.worker_dir = std::string{OPFORGE_SOURCE_DIR} + "/worker";
  opts.cassette = write_cassette(dir / "bench.jsonl");
  opts.latency_ms = latency_ms;
  opts.cycle = true;

  auto ideal = concurrency * 1000.0 / latency_ms;
  std::printf("requests %u, concurrency %u, latency %u ms, ideal %.1f req/s, cores %ld\n\n",
              requests, concurrency, latency_ms, ideal, sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("| client | wall s | req/s | ratio to ideal | replies | ok | lost | "
              "daemon CPU us/req | replay server CPU us/req |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  bool all_answered = true;
  for (auto kind : {client::bare_http, client::endpoint_default, client::endpoint_quiet}) {
    auto r = run(opts, requests, concurrency, kind);
    auto throughput = requests / r.wall;
    std::printf("| %s | %.3f | %.1f | %.3f | %zu | %u | %zu | %.1f | %.1f |\n", to_string(kind),
                r.wall, throughput, throughput / ideal, r.replied, r.ok, requests - r.replied,
                r.daemon_cpu / requests * 1e6, r.server_cpu / requests * 1e6);
    std::fflush(stdout);
    all_answered = all_answered && r.replied == requests && r.ok == requests;
  }
  std::filesystem::remove_all(dir);
  return all_answered ? 0 : 1;
}
