#include "actors/llm/llm_exchange.hpp"

#include "messages/utc_time.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <curl/curl.h>
#include <nlohmann/json.hpp>

namespace opforge {

namespace {

using namespace std::chrono_literals;

// OpenAI's finish_reason for an answer cut off by max_tokens (or by the context window): the
// server's word, read only here; what it means goes on as chat_outcome::truncated or
// context_exhausted.
constexpr std::string_view openai_finish_length = "length";

bool contains_case_insensitive(std::string_view haystack, std::string_view needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                     [](char a, char b) {
                       return std::tolower(static_cast<unsigned char>(a)) ==
                              std::tolower(static_cast<unsigned char>(b));
                     }) != haystack.end();
}

// The first `limit` bytes of a body, for an error message.
std::string excerpt(std::string_view body, size_t limit = 300) {
  std::string out{body.substr(0, limit)};
  for (auto& c : out)
    if (c == '\n' || c == '\r')
      c = ' ';
  if (body.size() > limit)
    out += "...";
  return out;
}

// The server's own words for an error: {"error": {"message": ...}} (OpenAI, llama.cpp),
// {"error": "..."} (Ollama), {"message": ...} (vLLM), else the start of the body.
std::string error_text(const std::string& body) {
  auto json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_object() && json.contains("error")) {
    const auto& error = json["error"];
    if (error.is_string())
      return error.get<std::string>();
    if (error.is_object() && error.contains("message") && error["message"].is_string())
      return error["message"].get<std::string>();
  }
  for (auto key : {"message", "detail"}) // vLLM and SGLang; FastAPI-based servers
    if (json.is_object() && json.contains(key) && json[key].is_string())
      return json[key].get<std::string>();
  return excerpt(body);
}

uint64_t count_field(const nlohmann::json& object, const char* key) {
  auto found = object.find(key);
  if (found == object.end() || !found->is_number())
    return 0;
  return found->get<uint64_t>();
}

std::string iso8601_now() {
  auto now = unix_ms_now();
  char millis[8];
  std::snprintf(millis, sizeof millis, ".%03dZ", static_cast<int>(now % 1000));
  return format_utc(now, "%Y-%m-%dT%H:%M:%S") + millis;
}

// Header values come from operator names; a newline would let them forge headers.
std::string header_safe(std::string value) {
  std::replace_if(
      value.begin(), value.end(), [](char c) { return c == '\r' || c == '\n'; }, ' ');
  return value;
}

} // namespace

// -- pure pieces --------------------------------------------------------------------------------

uint64_t estimate_tokens(std::string_view text) {
  return (text.size() + 3) / 4;
}

uint64_t estimate_prompt_tokens(const std::vector<chat_message>& messages) {
  uint64_t total = 3; // the assistant turn's priming
  for (const auto& message : messages)
    total += estimate_tokens(message.content) + 4; // role and separators
  return total;
}

bool says_context_exceeded(std::string_view body) {
  static constexpr std::string_view phrases[] = {
      "context_length_exceeded",            // OpenAI error code
      "maximum context length",             // OpenAI, vLLM, SGLang messages
      "exceeds the available context size", // llama.cpp server
      "exceeds the context length",         // Ollama
      "longer than the model's context length",
      "context window",
      "prompt is too long",
  };
  return std::any_of(std::begin(phrases), std::end(phrases), [&](std::string_view phrase) {
    return contains_case_insensitive(body, phrase);
  });
}

std::optional<std::chrono::milliseconds> parse_retry_after(const std::string& value) {
  if (value.empty())
    return std::nullopt;
  char* end = nullptr;
  auto seconds = std::strtod(value.c_str(), &end);
  if (end != value.c_str() && *end == '\0' && std::isfinite(seconds))
    return std::chrono::milliseconds{std::llround(std::max(seconds, 0.0) * 1000)};
  auto when = curl_getdate(value.c_str(), nullptr);
  if (when < 0)
    return std::nullopt;
  auto delta = std::chrono::system_clock::from_time_t(when) - std::chrono::system_clock::now();
  return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(delta), 0ms);
}

attempt_verdict classify_exchange(const http_exchange& x, uint32_t context_window,
                                  uint64_t prompt_estimate, bool window_limited) {
  attempt_verdict v;
  if (!x.transport_error.empty()) {
    v.retryable = true;
    v.unreachable = true;
    v.reason = "transport";
    v.error = x.transport_error;
    return v;
  }
  if (x.status < 200 || x.status >= 300) {
    v.error = "HTTP " + std::to_string(x.status) + ": " + error_text(x.body);
    v.reason = "http_" + std::to_string(x.status);
    if (x.status >= 400 && x.status < 500 && says_context_exceeded(x.body)) {
      v.outcome = chat_outcome::context_exhausted;
      v.endpoint_ok = true;
      return v;
    }
    v.retryable = x.status == 408 || x.status == 409 || x.status == 429 || x.status >= 500;
    v.retry_after = parse_retry_after(x.retry_after);
    // The endpoint understood the request and refused it: asking again gets the same refusal.
    // 401 and 403 say the endpoint is misconfigured, which another endpoint may not be.
    if (x.status >= 400 && x.status < 500 && !v.retryable && x.status != 401 && x.status != 403) {
      v.outcome = chat_outcome::rejected;
      v.endpoint_ok = true;
    }
    return v;
  }
  auto json = nlohmann::json::parse(x.body, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    v.reason = "garbage";
    v.error = "the response is not a JSON object: " + excerpt(x.body);
    return v;
  }
  auto choices = json.find("choices");
  if (choices == json.end() || !choices->is_array() || choices->empty() ||
      !(*choices)[0].is_object() || !(*choices)[0].contains("message") ||
      !(*choices)[0]["message"].is_object()) {
    v.reason = "garbage";
    v.error = "the response has no choices[0].message: " + excerpt(x.body);
    return v;
  }
  const auto& choice = (*choices)[0];
  const auto& message = choice["message"];
  if (auto content = message.find("content"); content != message.end() && content->is_string())
    v.content = content->get<std::string>();
  if (auto finish = choice.find("finish_reason"); finish != choice.end() && finish->is_string())
    v.finish_reason = finish->get<std::string>();
  auto usage = json.find("usage");
  if (usage != json.end() && usage->is_object() && usage->contains("prompt_tokens")) {
    v.usage.prompt = count_field(*usage, "prompt_tokens");
    v.usage.completion = count_field(*usage, "completion_tokens");
    v.usage.reasoning = count_field(*usage, "reasoning_tokens");
    if (auto details = usage->find("completion_tokens_details");
        details != usage->end() && details->is_object())
      v.usage.reasoning = std::max(v.usage.reasoning, count_field(*details, "reasoning_tokens"));
  } else {
    std::string reasoning;
    if (auto text = message.find("reasoning_content"); text != message.end() && text->is_string())
      reasoning = text->get<std::string>();
    v.usage.prompt = prompt_estimate;
    v.usage.reasoning = estimate_tokens(reasoning);
    v.usage.completion = estimate_tokens(v.content) + v.usage.reasoning;
    v.usage.estimated = true;
  }
  v.endpoint_ok = true;
  if (v.finish_reason == openai_finish_length) {
    auto full = v.usage.prompt + v.usage.completion >= context_window;
    v.outcome = full || window_limited ? chat_outcome::context_exhausted : chat_outcome::truncated;
    v.reason = to_string(v.outcome);
    v.error = full || window_limited ? "the answer filled the context window of " +
                                           std::to_string(context_window) + " tokens"
                                     : "the answer hit max_tokens";
    return v;
  }
  v.outcome = chat_outcome::ok;
  v.reason = "ok";
  return v;
}

std::chrono::milliseconds full_jitter_backoff(std::chrono::milliseconds base,
                                              std::chrono::milliseconds cap, uint32_t attempts,
                                              std::mt19937_64& rng) {
  auto ceiling = std::min<int64_t>(cap.count(), base.count() << (attempts - 1));
  return std::chrono::milliseconds{
      std::uniform_int_distribution<int64_t>{0, std::max<int64_t>(ceiling, 0)}(rng)};
}

std::string seconds_text(std::chrono::milliseconds duration) {
  char out[32];
  std::snprintf(out, sizeof out, "%g s", std::chrono::duration<double>{duration}.count());
  return out;
}

std::string chat_body(const endpoint_config& cfg, const std::vector<chat_message>& messages,
                      uint64_t max_tokens) {
  nlohmann::json body{
      {"model", cfg.model}, {"max_tokens", max_tokens}, {"temperature", cfg.temperature},
      {"top_p", cfg.top_p}, {"stream", false},          {"messages", nlohmann::json::array()}};
  for (const auto& message : messages)
    body["messages"].push_back({{"role", message.role}, {"content", message.content}});
  body.update(cfg.extra_body);
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> request_headers(std::vector<std::string> auth,
                                         const chat_request& request) {
  auth.push_back("X-Opforge-Operator: " + header_safe(request.op));
  auth.push_back("X-Opforge-Request: " + std::to_string(request.request_id));
  auth.push_back("X-Opforge-Answer: " + std::to_string(request.answer_index));
  return auth;
}

std::string redact_secret(const std::string& secret, std::string text) {
  if (secret.empty())
    return text;
  for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at))
    text.replace(at, secret.size(), "[redacted]");
  return text;
}

std::string cassette_line(const chat_request& request, uint64_t index, const std::string& body,
                          const http_exchange& x, const std::string& response_body,
                          const attempt_verdict& verdict) {
  nlohmann::json line;
  line["operator"] = request.op;
  line["index"] = index;
  line["request"] = nlohmann::json::parse(body, nullptr, false);
  auto response = nlohmann::json::parse(response_body, nullptr, false);
  if (response.is_discarded())
    line["response"] = response_body;
  else
    line["response"] = std::move(response);
  line["status"] = x.status;
  if (!x.retry_after.empty())
    line["retry_after"] = x.retry_after;
  if (!x.transport_error.empty())
    line["transport_error"] = x.transport_error;
  line["latency_ms"] = std::chrono::duration<double, std::milli>{x.elapsed}.count();
  line["outcome"] = verdict.retryable ? std::string{"retryable"} : to_string(verdict.outcome);
  line["attempt"] = x.attempt;
  line["recorded_at"] = iso8601_now();
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// -- token bucket -------------------------------------------------------------------------------

token_bucket::token_bucket(double per_minute, clock::time_point now)
    : capacity_{per_minute}, per_second_{per_minute / 60}, level_{per_minute}, last_{now} {}

void token_bucket::refill(clock::time_point now) {
  std::chrono::duration<double> elapsed = now - last_;
  level_ = std::min(capacity_, level_ + elapsed.count() * per_second_);
  last_ = now;
}

bool token_bucket::try_take(double cost, clock::time_point now) {
  if (capacity_ <= 0)
    return true;
  refill(now);
  if (level_ < std::min(cost, capacity_))
    return false;
  level_ -= cost;
  return true;
}

void token_bucket::adjust(double amount) {
  if (capacity_ > 0)
    level_ = std::min(capacity_, level_ + amount);
}

token_bucket::clock::duration token_bucket::wait_for(double cost, clock::time_point now) const {
  std::chrono::duration<double> elapsed = now - last_;
  auto level = std::min(capacity_, level_ + elapsed.count() * per_second_);
  auto missing = std::min(cost, capacity_) - level;
  if (capacity_ <= 0 || missing <= 0)
    return clock::duration::zero();
  return std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>{missing / per_second_});
}

} // namespace opforge
