#pragma once

// Shared by the llm_endpoint and summarizer suites: the endpoints on CAF's test coordinator, a
// spdlog capture, and the real Python replay server on loopback loaded with a cassette written by
// the test. The HTTP traffic is real; backoffs, Retry-After waits, rate-limit pauses and the
// breaker's open window pass in virtual time, and only while no transfer is under way, so that a
// reply's virtual arrival time is the time its last attempt left.

#include "actors/llm/llm_endpoint.hpp"
#include "actors/llm/replay_launcher.hpp"
#include "messages/actors.hpp"
#include "messages/errors.hpp"
#include "messages/llm_messages.hpp"
#include "messages/metrics.hpp"
#include "messages/type_ids.hpp"
#include "tests/test_coordinated_io.hpp"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
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

/// What a client actor got back for one request, and when, in virtual time.
struct llm_reply {
  uint64_t seq = 0; // which of the client's requests this answers
  std::optional<chat_result> result;
  caf::error error;
  caf::actor_clock::time_point at;
};

/// The requests a client actor sent and the replies it got, in arrival order. Touched only on the
/// test thread, where the client runs.
struct llm_client_log {
  uint64_t submitted = 0; // by the test
  uint64_t sent = 0;      // by the client
  std::vector<llm_reply> replies;
};

/// Sends requests and cancels to one endpoint on the test's behalf: the endpoint lets only the
/// sender of a request cancel it, so both must come from the same actor.
inline caf::behavior llm_client(caf::event_based_actor* self, llm_endpoint_actor endpoint,
                                std::shared_ptr<llm_client_log> log) {
  return {
      [=](atom::complete, chat_request& request) {
        auto seq = log->sent++;
        self->request(endpoint, caf::infinite, atom::complete_v, std::move(request))
            .then(
                [=](chat_result& result) {
                  log->replies.push_back({seq, std::move(result), {}, self->clock().now()});
                },
                [=](caf::error& err) {
                  log->replies.push_back({seq, std::nullopt, std::move(err), self->clock().now()});
                });
      },
      [=](atom::cancel, uint64_t request_id) { self->send(endpoint, atom::cancel_v, request_id); },
  };
}

struct llm_client_handle {
  caf::actor actor;
  std::shared_ptr<llm_client_log> log;
};

/// One request a client sent.
struct llm_ticket {
  llm_client_handle client;
  uint64_t seq = 0;
};

class LlmFixture : public CoordinatedIo {
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
    stop_endpoints(); // nothing logs into the capture after the fixture is gone
    for (auto& [id, client] : clients)
      helpers.push_back(client.actor);
    clients.clear();
    CoordinatedIo::TearDown();
  }

  ~LlmFixture() override {
    spdlog::set_default_logger(previous_logger); // the capture dies with the fixture
    std::filesystem::remove_all(dir);
  }

  /// An endpoint owes its own answer while its HTTP thread holds a transfer.
  bool io_under_way() override {
    for (const auto& endpoint : endpoints)
      if (metrics_ptr->llm_in_flight(endpoint.name).Value() > 0)
        return true;
    return false;
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
    cfg.kind = endpoint_kind::replay;
    server->serve(cfg);
    cfg.context_window = 8192;
    cfg.max_tokens = 512;
    cfg.backoff_base = std::chrono::milliseconds{10};
    cfg.backoff_cap = std::chrono::milliseconds{50};
    cfg.total_timeout = std::chrono::milliseconds{5000};
    // Health probes would race the attempts and breaker transitions that tests count; the probe's
    // own test turns them on.
    cfg.probe = endpoint_probe::off;
    return cfg;
  }

  llm_endpoint_actor spawn_endpoint(endpoint_config cfg) {
    auto name = cfg.name;
    auto endpoint = sys.spawn(llm_endpoint, std::move(cfg), metrics_ptr);
    endpoints.push_back({endpoint, name});
    clients.emplace(endpoint.id(), spawn_client(endpoint));
    return endpoint;
  }

  /// Stops the endpoints; each replies to what it still holds and joins its HTTP thread.
  void stop_endpoints() {
    for (const auto& endpoint : endpoints)
      stop(endpoint.actor);
    endpoints.clear();
  }

  /// Another sender of requests to `endpoint`.
  llm_client_handle spawn_client(const llm_endpoint_actor& endpoint) {
    auto log = std::make_shared<llm_client_log>();
    return {sys.spawn(llm_client, endpoint, log), log};
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

  /// Has `client` send `req`, and runs the actors until it is handed to the HTTP thread (or
  /// answered without one).
  llm_ticket submit(const llm_client_handle& client, chat_request req) {
    caf::anon_send(client.actor, atom::complete_v, std::move(req));
    sched.run();
    return {client, client.log->submitted++};
  }

  llm_ticket submit(const llm_endpoint_actor& endpoint, chat_request req) {
    return submit(clients.at(endpoint.id()), std::move(req));
  }

  void cancel(const llm_client_handle& client, uint64_t request_id) {
    caf::anon_send(client.actor, atom::cancel_v, request_id);
    sched.run();
  }

  void cancel(const llm_endpoint_actor& endpoint, uint64_t request_id) {
    cancel(clients.at(endpoint.id()), request_id);
  }

  /// Runs the actors until `ticket` is answered.
  llm_reply await_reply(const llm_ticket& ticket) {
    std::optional<llm_reply> found;
    drive([&] {
      for (const auto& reply : ticket.client.log->replies)
        if (reply.seq == ticket.seq)
          found = reply;
      return found.has_value();
    });
    return found.value_or(llm_reply{});
  }

  /// The result `ticket` is answered with; an error reply fails the test.
  chat_result await(const llm_ticket& ticket) {
    auto reply = await_reply(ticket);
    if (reply.error)
      ADD_FAILURE() << render(reply.error);
    return reply.result.value_or(chat_result{});
  }

  /// Sends one request and waits for its reply (an endpoint always replies).
  chat_result complete(const llm_endpoint_actor& endpoint, chat_request req) {
    return await(submit(endpoint, std::move(req)));
  }

  chat_result complete(const llm_endpoint_actor& endpoint, const std::string& op) {
    return complete(endpoint, request(op));
  }

  endpoint_status status(const llm_endpoint_actor& endpoint) {
    return ask<endpoint_status>(endpoint, atom::status_v);
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
  /// handed to the HTTP thread, not yet on the wire. The server says so only in its hit log.
  void wait_for_hits(size_t n) const {
    auto deadline = std::chrono::steady_clock::now() + io_limit;
    while (hits().size() < n) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "the replay server saw " << hits().size() << " of " << n << " requests";
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
    }
  }

  static std::string read_file(const std::filesystem::path& path) {
    std::ifstream in{path};
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  struct running_endpoint {
    llm_endpoint_actor actor;
    std::string name;
  };

  std::filesystem::path dir;
  std::ostringstream log_text;
  std::shared_ptr<spdlog::logger> previous_logger;
  std::unique_ptr<replay_server> server;
  std::shared_ptr<metrics> metrics_ptr = std::make_shared<metrics>("test");
  std::vector<running_endpoint> endpoints;
  std::map<caf::actor_id, llm_client_handle> clients; // each endpoint's own, by endpoint
  uint64_t next_id = 1;
};

} // namespace opforge::testing
