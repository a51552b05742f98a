#pragma once

// llm_endpoint: one actor per configured OpenAI-compatible endpoint. It owns the concurrency limit,
// the request and token rate limits, retries (full-jitter backoff honouring Retry-After, at most
// `max_attempts` per request, a retry budget per endpoint), a circuit breaker and token accounting.
// The network and the cassette file belong to its http_client thread.

#include "actors/llm/http_client.hpp"
#include "actors/llm/llm_exchange.hpp"
#include "config/endpoint_config.hpp"
#include "messages/actors.hpp"
#include "messages/llm_messages.hpp"
#include "messages/metrics.hpp"

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>

#include <caf/actor_addr.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

namespace opforge {

// -- the actor ---------------------------------------------------------------------------------

enum class breaker_state { closed, half_open, open };

template <>
struct contract::enum_traits<breaker_state> {
  static constexpr std::string_view label = "breaker_state";
  static constexpr std::array<std::string_view, 3> names{"closed", "half_open", "open"};
  static_assert(names.size() - 1 == static_cast<size_t>(breaker_state::open));
};

struct llm_endpoint_state {
  using clock = std::chrono::steady_clock;

  struct held_request {
    chat_request request;
    caf::actor_addr owner; // who sent it; only they can cancel it
    caf::typed_response_promise<chat_result> promise;
    std::string body;
    uint64_t prompt_estimate = 0;
    bool window_limited = false;
    double reserved_tokens = 0;
    uint32_t attempts = 0;
    bool in_flight = false;
    bool silent = false; // the attempt on the wire has had no byte within first_byte_timeout
    bool backing_off = false;
    clock::time_point accepted;
  };

  llm_endpoint_state(llm_endpoint_actor::stateful_pointer<llm_endpoint_state> self);
  /// Every request still held gets its one reply: cancelled, because the endpoint stopped.
  ~llm_endpoint_state();

  void init(endpoint_config config, std::shared_ptr<opforge::metrics> metrics_ptr);
  caf::result<chat_result> accept(chat_request request);
  void cancel(uint64_t request_id);
  void on_exchange(http_exchange x);
  void on_backoff_over(uint64_t ticket);
  void on_wakeup();
  void on_health_probe_due();
  /// A transfer had no byte within first_byte_timeout (http_exchange::stalled).
  void on_stall(const http_exchange& notice);
  endpoint_status status();
  /// Also logs the moment the endpoint is first seen down.
  endpoint_health health();

  static inline const char* name = "llm_endpoint";

private:
  /// The actor system's clock: steady_clock in the daemon, virtual time under the test
  /// coordinator, so that tests need not wait out a breaker window or a rate limit.
  clock::time_point now() const { return self_->clock().now(); }
  void pump();
  void start_attempt(uint64_t ticket, held_request& held);
  void finish(uint64_t ticket, chat_result result);
  void fail_queued(const std::string& why);
  void set_breaker(breaker_state next);
  void note_attempt(const attempt_verdict& verdict);
  /// The endpoint answered a request: it is up, and its breaker closes.
  void note_up();
  /// It answers again: clears the outage (and says so when it was down).
  void note_answering();
  void schedule_health_probe();
  /// Puts the health probe on the wire now (`chat` or `models`, as configured).
  void send_health_probe();
  void on_health_probe_answer(const http_exchange& x);
  /// Neither a request nor the probe got a byte within first_byte_timeout: the endpoint is hung.
  /// Its silent requests fail, the breaker opens and it counts as down until it answers again.
  void note_hung();
  /// Notes a down endpoint with nobody asking, and schedules the next probe, later.
  void probe_later();
  std::vector<std::string> auth_headers() const;
  void schedule_wakeup(clock::duration delay);

  llm_endpoint_actor::stateful_pointer<llm_endpoint_state> self_;
  endpoint_config cfg_;
  std::string api_key_; // from the environment; never logged, recorded or put in a message
  std::shared_ptr<opforge::metrics> metrics_;
  // This endpoint's children of the metric families, looked up once.
  prometheus::Gauge* in_flight_gauge_ = nullptr;
  prometheus::Gauge* breaker_gauge_ = nullptr;
  prometheus::Gauge* down_gauge_ = nullptr;
  prometheus::Histogram* latency_histogram_ = nullptr;
  prometheus::Counter* prompt_tokens_ = nullptr;
  prometheus::Counter* completion_tokens_ = nullptr;
  prometheus::Counter* reasoning_tokens_ = nullptr;
  std::unordered_map<uint64_t, held_request> held_; // by ticket
  // (sender, request_id) -> ticket: ids need only be unique per sender.
  std::map<std::pair<caf::actor_addr, uint64_t>, uint64_t> tickets_;
  std::deque<uint64_t> queue_; // tickets waiting to start an attempt
  uint64_t next_ticket_ = 1;
  uint32_t in_flight_ = 0;
  breaker_state breaker_ = breaker_state::closed;
  uint32_t consecutive_failures_ = 0;
  clock::time_point open_until_;
  bool probe_in_flight_ = false;
  // Health: since when every attempt has failed (none: the latest succeeded), and the last error.
  std::optional<clock::time_point> failing_since_;
  int64_t failing_since_ms_ = 0;
  std::string last_error_;
  int64_t last_error_ms_ = 0;
  bool down_logged_ = false;
  // Health probes (cfg_.probe) while failing, or while a request is silent: the wait before the
  // next, doubling up to probe_interval_max; whether one is scheduled; whether one is on the
  // wire (one at a time: they share a ticket).
  std::chrono::milliseconds health_probe_wait_{};
  bool health_probe_pending_ = false;
  bool health_probe_on_wire_ = false;
  bool health_probe_chats_ = false; // the one on the wire is a chat, not a GET of models
  // Whether it was seen hung (note_hung) and has not answered since: down without waiting out
  // outage_after.
  bool hung_ = false;
  // Whether the latest failure was the server not being reached (connection refused, timeout),
  // which a `models` probe can tell is over; an HTTP error needs a chat to tell.
  bool unreachable_ = false;
  std::optional<token_bucket> requests_bucket_;
  std::optional<token_bucket> tokens_bucket_;
  bool wakeup_pending_ = false;
  double retry_budget_ = 0;
  uint64_t retries_ = 0;
  std::map<std::string, uint64_t> finished_;
  token_usage total_;
  std::map<std::string, token_usage> by_campaign_;
  std::map<std::string, token_usage> by_session_;
  std::map<std::string, uint64_t> recorded_per_op_;
  std::mt19937_64 rng_;
  std::unique_ptr<http_client> http_; // last member: its thread stops before the rest goes
};

/// Spawn with `system.spawn(llm_endpoint, config, metrics)`. The API key is read from the
/// environment variable `config.api_key_env` at spawn.
llm_endpoint_actor::behavior_type
llm_endpoint(llm_endpoint_actor::stateful_pointer<llm_endpoint_state> self, endpoint_config config,
             std::shared_ptr<metrics> metrics_ptr);

} // namespace opforge
