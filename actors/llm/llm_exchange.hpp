#pragma once

// The pure half of an llm_endpoint: what one HTTP exchange means for its request (outcome,
// retryability, usage, the server's words for an error), token estimates and the token bucket
// behind the rate limits. No actor, no I/O: each piece is tested on its own.

#include "config/endpoint_config.hpp"
#include "messages/llm_messages.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace opforge {

/// A rough token count for text the server did not count: four bytes per token.
uint64_t estimate_tokens(std::string_view text);

/// The prompt tokens of a chat, estimated, including each message's framing.
uint64_t estimate_prompt_tokens(const std::vector<chat_message>& messages);

/// True when an error body says the prompt does not fit the model's context (OpenAI's
/// context_length_exceeded, vLLM/SGLang "maximum context length", llama.cpp "exceeds the available
/// context size", Ollama "input length exceeds the context length", Anthropic "prompt is too
/// long").
bool says_context_exceeded(std::string_view body);

/// Retry-After as a delay: delta-seconds or an HTTP date. Empty when absent or unreadable.
std::optional<std::chrono::milliseconds> parse_retry_after(const std::string& value);

/// What one HTTP attempt means for its request.
struct attempt_verdict {
  chat_outcome outcome = chat_outcome::endpoint_fault;
  bool retryable = false;   // worth another attempt (transport, 408, 409, 429, 5xx)
  bool endpoint_ok = false; // the endpoint answered sensibly: a success for the breaker
  bool unreachable = false; // no HTTP answer at all: only listing the models can tell it is back
  std::string reason; // short label for metrics: "ok", "transport", "http_429", "garbage", ...
  std::string error;
  std::string content;
  std::string finish_reason;
  token_usage usage;
  std::optional<std::chrono::milliseconds> retry_after;
};

/// Reads one finished attempt. `window_limited` says max_tokens was cut down to fit the context
/// window, so that a "length" finish means the window is full rather than the answer too long.
attempt_verdict classify_exchange(const http_exchange& x, uint32_t context_window,
                                  uint64_t prompt_estimate, bool window_limited);

/// The wait before retry `attempts` (1 for the first retry's): uniform in [0, min(cap, base *
/// 2^(attempts-1))], "full jitter", so that callers failed together do not retry together.
std::chrono::milliseconds full_jitter_backoff(std::chrono::milliseconds base,
                                              std::chrono::milliseconds cap, uint32_t attempts,
                                              std::mt19937_64& rng);

/// "0.3 s", "30 s": a configured duration as error texts name it.
std::string seconds_text(std::chrono::milliseconds duration);

/// The body of a chat completion request: the endpoint's model and sampling settings, its
/// extra_body merged last.
std::string chat_body(const endpoint_config& cfg, const std::vector<chat_message>& messages,
                      uint64_t max_tokens);

/// `auth` (the endpoint's own headers) plus the X-Opforge-* headers naming the request.
std::vector<std::string> request_headers(std::vector<std::string> auth,
                                         const chat_request& request);

/// `text` with every occurrence of `secret` replaced by "[redacted]" (nothing when it is empty).
std::string redact_secret(const std::string& secret, std::string text);

/// One cassette line for an attempt: the request, the response (`response_body`, already
/// redacted), how it went, and when. `index` counts the operator's recorded exchanges.
std::string cassette_line(const chat_request& request, uint64_t index, const std::string& body,
                          const http_exchange& x, const std::string& response_body,
                          const attempt_verdict& verdict);

/// Continuous-refill token bucket; a rate of 0 means unlimited.
class token_bucket {
public:
  using clock = std::chrono::steady_clock;
  token_bucket(double per_minute, clock::time_point now);
  /// Takes `cost` if the bucket holds it, or if it is full (so a cost above capacity still goes).
  bool try_take(double cost, clock::time_point now);
  /// Returns unused tokens (or takes more, when `amount` is negative).
  void adjust(double amount);
  /// How long until `cost` could be taken.
  clock::duration wait_for(double cost, clock::time_point now) const;

private:
  void refill(clock::time_point now);
  double capacity_;
  double per_second_;
  double level_;
  clock::time_point last_;
};

} // namespace opforge
