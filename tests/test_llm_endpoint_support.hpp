#pragma once

// Shared by the llm_endpoint and summarizer suites: an actor system, a spdlog capture, and the real
// Python replay server on loopback loaded with a cassette written by the test.

#include "actors/llm/llm_endpoint.hpp"
#include "actors/llm/replay_launcher.hpp"
#include "messages/actors.hpp"
#include "messages/errors.hpp"
#include "messages/llm_messages.hpp"
#include "messages/metrics.hpp"
#include "messages/system_config.hpp"
#include "messages/type_ids.hpp"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

namespace opforge::testing {

/// An OpenAI-style answer as a cassette entry.
inline nlohmann::json
answer(const std::string& op, const std::string& text, const std::string& finish_reason = "stop",
       nlohmann::json usage = {{"prompt_tokens", 20}, {"completion_tokens", 7}}) {
  nlohmann::json response{{"id", "chatcmpl-test"},
                          {"object", "chat.completion"},
                          {"choices",
                           {{{"index", 0},
                             {"message", {{"role", "assistant"}, {"content", text}}},
                             {"finish_reason", finish_reason}}}}};
  if (!usage.is_null())
    response["usage"] = std::move(usage);
  return {{"operator", op}, {"response", std::move(response)}};
}

/// A cassette entry that makes the replay server misbehave once.
inline nlohmann::json fault(const std::string& op, const std::string& mode) {
  return {{"operator", op}, {"fault", mode}};
}

/// A recorded HTTP error answer.
inline nlohmann::json http_error(const std::string& op, int status, nlohmann::json body) {
  return {{"operator", op}, {"status", status}, {"response", std::move(body)}};
}

class LlmFixture : public ::testing::Test {
protected:
  LlmFixture() {
    static std::atomic<int> counter{0};
    dir = std::filesystem::temp_directory_path() /
          ("opforge-llm-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir);
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text);
    auto logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_level(spdlog::level::trace);
    previous_logger = spdlog::default_logger();
    spdlog::set_default_logger(logger);
  }

  void TearDown() override {
    for (const auto& endpoint : endpoints) {
      caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
      self->wait_for(endpoint); // nothing logs into the capture after the fixture is gone
    }
    endpoints.clear();
  }

  ~LlmFixture() override {
    spdlog::set_default_logger(previous_logger); // the capture dies with the fixture
    std::filesystem::remove_all(dir);
  }

  /// Starts the replay server on a cassette holding `entries`.
  void start_server(const std::vector<nlohmann::json>& entries, uint32_t latency_ms = 0,
                    bool cycle = false) {
    auto cassette = dir / "cassette.jsonl";
    std::ofstream out{cassette};
    for (const auto& entry : entries)
      out << entry.dump() << '\n';
    out.close();
    replay_server::options opts;
    opts.python = OPFORGE_PYTHON;
    opts.worker_dir = std::string{OPFORGE_SOURCE_DIR} + "/worker";
    opts.cassette = cassette.string();
    opts.latency_ms = latency_ms;
    opts.hit_log = (dir / "hits.jsonl").string();
    opts.cycle = cycle;
    auto started = replay_server::start(opts);
    ASSERT_TRUE(started) << render(started.error());
    server = std::move(*started);
  }

  /// An endpoint on the replay server with quick retries, so tests wait for nothing but faults.
  endpoint_config config(const std::string& name = "replay") const {
    endpoint_config cfg;
    cfg.name = name;
    cfg.kind = "replay";
    server->serve(cfg);
    cfg.context_window = 8192;
    cfg.max_tokens = 512;
    cfg.backoff_base = std::chrono::milliseconds{10};
    cfg.backoff_cap = std::chrono::milliseconds{50};
    cfg.total_timeout = std::chrono::milliseconds{5000};
    // Health probes would race the attempts and breaker transitions that tests count; the probe's
    // own test turns them on.
    cfg.probe = "off";
    return cfg;
  }

  llm_endpoint_actor spawn_endpoint(endpoint_config cfg) {
    auto endpoint = sys.spawn(llm_endpoint, std::move(cfg), metrics_ptr);
    endpoints.push_back(endpoint);
    return endpoint;
  }

  chat_request request(const std::string& op, const std::string& text = "write the kernel") {
    chat_request req;
    req.request_id = next_id++;
    req.campaign_id = "campaign-1";
    req.session_id = "session-" + op;
    req.op = op;
    req.messages = {{"system", "You write Triton kernels."}, {"user", text}};
    return req;
  }

  /// Sends one request and waits for its reply (an endpoint always replies).
  chat_result complete(const llm_endpoint_actor& endpoint, chat_request req) {
    chat_result result;
    self->request(endpoint, caf::infinite, atom::complete_v, std::move(req))
        .receive([&](chat_result& r) { result = std::move(r); },
                 [&](caf::error& err) { ADD_FAILURE() << render(err); });
    return result;
  }

  chat_result complete(const llm_endpoint_actor& endpoint, const std::string& op) {
    return complete(endpoint, request(op));
  }

  endpoint_status status(const llm_endpoint_actor& endpoint) {
    endpoint_status result;
    self->request(endpoint, caf::infinite, atom::status_v)
        .receive([&](endpoint_status& s) { result = std::move(s); },
                 [&](caf::error& err) { ADD_FAILURE() << render(err); });
    return result;
  }

  /// What the replay server saw, one object per request.
  std::vector<nlohmann::json> hits() const {
    std::vector<nlohmann::json> out;
    std::ifstream in{dir / "hits.jsonl"};
    for (std::string line; std::getline(in, line);)
      out.push_back(nlohmann::json::parse(line));
    return out;
  }

  /// Waits until the replay server has seen `n` requests: "in flight" at the endpoint only means
  /// handed to the HTTP thread, not yet on the wire.
  void wait_for_hits(size_t n) const {
    while (hits().size() < n)
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }

  static std::string read_file(const std::filesystem::path& path) {
    std::ifstream in{path};
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::filesystem::path dir;
  std::ostringstream log_text;
  std::shared_ptr<spdlog::logger> previous_logger;
  std::unique_ptr<replay_server> server;
  std::shared_ptr<metrics> metrics_ptr = std::make_shared<metrics>("test");
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::vector<llm_endpoint_actor> endpoints;
  uint64_t next_id = 1;
};

} // namespace opforge::testing
