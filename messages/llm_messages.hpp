#pragma once

// Messages between sessions, the llm_endpoint actors and the summarizer. None of them ever holds an
// API key: keys live only in the endpoint actor's state and in the HTTP thread's request headers.

#include "messages/enum_names.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>
#include <caf/timespan.hpp>

namespace opforge {

/// What became of a chat request. None of these is a candidate failure: a session never blames
/// the kernel under test for anything but `ok` and `truncated` answers.
enum class chat_outcome : uint8_t {
  ok,                // the model answered and stopped on its own
  context_exhausted, // the prompt does not fit the window (configured, or the server said so)
  truncated,         // the answer hit max_tokens (finish_reason "length")
  endpoint_fault,    // transport errors, garbage, bad statuses, exhausted retries, open breaker
  cancelled,         // cancelled by the caller or by the endpoint shutting down
  // The endpoint refused this request for good (a 4xx other than 401, 403, 408, 409, 429 and a
  // context error, e.g. a replay cassette that holds no such answer): asking again gets the same.
  rejected,
};

/// "ok", "context_exhausted", ... (`to_string`).
template <>
struct contract::enum_traits<chat_outcome> {
  static constexpr std::string_view label = "chat_outcome";
  static constexpr std::array<std::string_view, 6> names{
      "ok", "context_exhausted", "truncated", "endpoint_fault", "cancelled", "rejected"};
  static_assert(names.size() - 1 == static_cast<size_t>(chat_outcome::rejected));
};

/// One message of an OpenAI-style chat.
struct chat_message {
  std::string role; // "system", "user" or "assistant"
  std::string content;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_message& x) {
  return f(caf::meta::type_name("chat_message"), x.role, x.content);
}

/// One completion asked of an endpoint. `request_id` must be unique among the requests its sender
/// has open at that endpoint; `atom::cancel` from the same sender names it.
struct chat_request {
  uint64_t request_id = 0;
  std::string campaign_id;
  std::string session_id;
  std::string op; // the operator the session works on; the replay server matches answers by it
  // How many answers the session has received before this request: a replay server serves the
  // answer at this position, so a session resumed after a crash gets the answer it waited for.
  uint32_t answer_index = 0;
  std::vector<chat_message> messages;
  uint32_t max_tokens = 0; // 0: the endpoint's configured max_tokens
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_request& x) {
  return f(caf::meta::type_name("chat_request"), x.request_id, x.campaign_id, x.session_id, x.op,
           x.answer_index, x.messages, x.max_tokens);
}

/// Tokens of one answer, or summed over many. `estimated` is set when any part was estimated from
/// the text because the server reported no usage.
struct token_usage {
  uint64_t prompt = 0;
  uint64_t completion = 0;
  uint64_t reasoning = 0; // part of `completion` when the server reports it
  bool estimated = false;

  token_usage& operator+=(const token_usage& other) {
    prompt += other.prompt;
    completion += other.completion;
    reasoning += other.reasoning;
    estimated = estimated || other.estimated;
    return *this;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_usage& x) {
  return f(caf::meta::type_name("token_usage"), x.prompt, x.completion, x.reasoning, x.estimated);
}

/// The one reply to a chat_request.
struct chat_result {
  uint64_t request_id = 0;
  chat_outcome outcome = chat_outcome::endpoint_fault;
  std::string content; // the answer; also set for `truncated`
  std::string finish_reason;
  token_usage usage;
  uint32_t attempts = 0;   // HTTP attempts made (0: answered without asking the server)
  caf::timespan latency{}; // from acceptance to reply, queueing and backoff included
  std::string error;       // what went wrong, for every outcome but `ok`
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_result& x) {
  return f(caf::meta::type_name("chat_result"), x.request_id, x.outcome, x.content, x.finish_reason,
           x.usage, x.attempts, x.latency, x.error);
}

/// Whether an endpoint answers, as its actor saw the latest attempts. An endpoint is `failing`
/// from its first failed attempt after a success, and `down` once that has lasted `outage_after`
/// without a success in between; one success makes it `up` again.
enum class endpoint_state : uint8_t { up, failing, down };

/// "up", "failing" or "down" (`to_string`).
template <>
struct contract::enum_traits<endpoint_state> {
  static constexpr std::string_view label = "endpoint_state";
  static constexpr std::array<std::string_view, 3> names{"up", "failing", "down"};
  static_assert(names.size() - 1 == static_cast<size_t>(endpoint_state::down));
};

struct endpoint_health {
  std::string name;
  endpoint_state state = endpoint_state::up;
  std::string breaker;          // "closed", "open" or "half_open"
  std::string last_error;       // of the latest failed attempt; kept once it is up again
  int64_t failing_since_ms = 0; // wall clock of the first failure since the last success; 0: up
  int64_t last_error_ms = 0;    // wall clock of `last_error`
  int64_t outage_after_ms = 0;  // how long failing lasts before it is down
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, endpoint_health& x) {
  return f(caf::meta::type_name("endpoint_health"), x.name, x.state, x.breaker, x.last_error,
           x.failing_since_ms, x.last_error_ms, x.outage_after_ms);
}

/// What `atom::status` tells about an endpoint.
struct endpoint_status {
  std::string name;
  std::string model;
  std::string breaker;      // "closed", "open" or "half_open"
  uint32_t concurrency = 0; // requests it sends at once (its configured limit)
  uint32_t in_flight = 0;
  uint32_t queued = 0;      // accepted, waiting for a slot, a rate token or the breaker probe
  uint32_t backing_off = 0; // waiting for a retry
  double retry_budget = 0;  // retries the endpoint may still spend
  uint64_t retries = 0;     // retries spent since start
  std::map<std::string, uint64_t> requests; // finished requests by outcome
  token_usage total;
  std::map<std::string, token_usage> by_campaign;
  std::map<std::string, token_usage> by_session;
  endpoint_health health;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, endpoint_status& x) {
  return f(caf::meta::type_name("endpoint_status"), x.name, x.model, x.breaker, x.concurrency,
           x.in_flight, x.queued, x.backing_off, x.retry_budget, x.retries, x.requests, x.total,
           x.by_campaign, x.by_session, x.health);
}

/// One finished HTTP attempt, sent by the endpoint's HTTP thread to the endpoint actor.
struct http_exchange {
  uint64_t ticket = 0; // the endpoint's own key for the request, never reused
  uint32_t attempt = 0;
  long status = 0;             // HTTP status; 0 when the transfer failed
  std::string transport_error; // curl's words when the transfer failed
  std::string body;
  std::string retry_after; // the Retry-After header, verbatim
  caf::timespan elapsed{};
  // Not the end of the transfer but a notice that no byte of the response came within its
  // first-byte timeout; the transfer goes on, and its end follows as an exchange of its own.
  bool stalled = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, http_exchange& x) {
  return f(caf::meta::type_name("http_exchange"), x.ticket, x.attempt, x.status, x.transport_error,
           x.body, x.retry_after, x.elapsed, x.stalled);
}

/// A compiler log (or traceback) to condense for a feedback prompt.
struct summary_request {
  std::string session_id;
  std::string op;
  std::string log;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, summary_request& x) {
  return f(caf::meta::type_name("summary_request"), x.session_id, x.op, x.log);
}

/// How a summary was made.
enum class summary_method : uint8_t {
  raw,                    // summarization is off: the log as given
  deterministic,          // short enough after pre-processing, or the LLM step is disabled
  llm,                    // the summarizer's endpoint condensed the pre-processed log
  deterministic_fallback, // the LLM step failed; `error` says why
};

/// "raw", "deterministic", ... (`to_string`).
template <>
struct contract::enum_traits<summary_method> {
  static constexpr std::string_view label = "summary_method";
  static constexpr std::array<std::string_view, 4> names{"raw", "deterministic", "llm",
                                                         "deterministic_fallback"};
  static_assert(names.size() - 1 == static_cast<size_t>(summary_method::deterministic_fallback));
};

struct summary_result {
  std::string text;
  summary_method method = summary_method::deterministic;
  uint64_t original_chars = 0;
  token_usage usage; // spent by the LLM step
  std::string error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, summary_result& x) {
  return f(caf::meta::type_name("summary_result"), x.text, x.method, x.original_chars, x.usage,
           x.error);
}

} // namespace opforge
