#pragma once

// The `llm:` section of the daemon configuration: OpenAI-compatible endpoints and the summarizer.
//
//   llm:
//     endpoints:
//       - name: local-vllm
//         base_url: http://gpu7:8000/v1
//         model: Qwen/Qwen3-32B
//         api_key_env: VLLM_API_KEY        # the key itself is never in the file, logs or store
//         context_window: 32768
//         extra_body: {reasoning_effort: low}
//         concurrency: 16
//         requests_per_minute: 600
//       - name: replayed
//         kind: replay                     # the real client against the replay server
//         cassette: var/cassettes/run1.jsonl
//     outage_after: 60s                  # failing this long = down (each endpoint may override)
//     # each endpoint may set connect_timeout, total_timeout and first_byte_timeout (30s: silent
//     # this long, and its liveness probe too, the endpoint is hung and down at once)
//     # each endpoint may also set probe: models | chat | off, probe_interval, probe_interval_max
//     summarizer:
//       mode: llm                          # llm | deterministic | off (the "without" ablation)
//       endpoint: local-vllm
//       summarize_over_chars: 2000         # longer logs in feedback are summarized first

#include "config/resources.hpp"
#include "messages/enum_names.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace opforge {

/// How an endpoint is reached: `openai` (base_url, as configured), or `replay` (the real client
/// against a replay server the daemon starts for the endpoint's cassette; base_url comes from it).
enum class endpoint_kind : uint8_t { openai, replay };

template <>
struct contract::enum_traits<endpoint_kind> {
  static constexpr std::string_view label = "endpoint_kind";
  static constexpr std::array<std::string_view, 2> names{"openai", "replay"};
  static_assert(names.size() - 1 == static_cast<size_t>(endpoint_kind::replay));
};

/// How a failing endpoint is re-probed (endpoint_config::probe).
enum class endpoint_probe : uint8_t { models, chat, off };

template <>
struct contract::enum_traits<endpoint_probe> {
  static constexpr std::string_view label = "endpoint_probe";
  static constexpr std::array<std::string_view, 3> names{"models", "chat", "off"};
  static_assert(names.size() - 1 == static_cast<size_t>(endpoint_probe::off));
};

struct endpoint_config {
  std::string name;
  endpoint_kind kind = endpoint_kind::openai;
  std::string base_url; // up to and including /v1
  std::string model;
  std::string api_key_env; // name of the environment variable holding the key; empty: no key
  uint32_t context_window = 32768;
  uint32_t max_tokens = 8192;
  double temperature = 0.6;
  double top_p = 0.95;
  nlohmann::json extra_body = nlohmann::json::object(); // merged into every request body
  std::map<std::string, std::string> headers;           // extra HTTP headers, never logged
  uint32_t concurrency = 8;
  double requests_per_minute = 0; // 0: unlimited
  double tokens_per_minute = 0;   // 0: unlimited; counts prompt estimate plus max_tokens
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds total_timeout{600'000};
  // A request without a byte of its answer this long after it started makes the endpoint
  // suspect. Requests do not stream, so a busy server legitimately says nothing until its answer
  // is complete: a silent request therefore sends a liveness probe (`probe`, below) with the same
  // window, and only when that probe is silent too (or `probe: off`) is the endpoint hung: its
  // silent requests fail as endpoint faults ("hung: no first byte after 30 s"), the breaker opens
  // and it counts as down at once, so that campaigns fail over without waiting for
  // `total_timeout` or `outage_after`.
  std::chrono::milliseconds first_byte_timeout{30'000};
  // retries
  uint32_t max_attempts = 3; // at most 3: a dead endpoint must not be hammered
  std::chrono::milliseconds backoff_base{1'000};
  std::chrono::milliseconds backoff_cap{30'000};
  std::chrono::milliseconds max_retry_after{120'000}; // a longer Retry-After ends the request
  double retry_budget_ratio = 0.2; // each new request earns this fraction of a retry
  double retry_budget_max = 20;    // and the budget holds at most this many (it starts full)
  // circuit breaker
  uint32_t breaker_failures = 5; // consecutive failed attempts that open it
  std::chrono::milliseconds breaker_open_for{30'000};
  // An endpoint whose attempts have all failed for this long is down: `run` and `attach` say so,
  // and campaigns that may fail over move their sessions to the next endpoint. Set per endpoint,
  // or for all at once as `llm.outage_after`.
  std::chrono::milliseconds outage_after{60'000};
  // While its attempts fail, the endpoint is re-probed without waiting for a session to call it,
  // so that it is seen down, and up again, on its own: `models` (GET base_url/models, which
  // OpenAI, vLLM, SGLang, llama.cpp and Ollama serve), `chat` (a 1-token chat, for servers
  // without that route), or `off`. The first probe follows the first failure by
  // `probe_interval`; the wait doubles after each failed probe up to `probe_interval_max`. A
  // probe gives up after `connect_timeout` (or `first_byte_timeout` when shorter).
  endpoint_probe probe = endpoint_probe::models;
  std::chrono::milliseconds probe_interval{5'000};
  std::chrono::milliseconds probe_interval_max{60'000};
  // record and replay
  std::string record_to; // cassette file every exchange is appended to; empty: no recording
  std::string cassette;  // kind replay: the cassette the replay server serves
  uint32_t replay_latency_ms = 0;
};

enum class summarizer_mode : uint8_t { llm, deterministic, off };

template <>
struct contract::enum_traits<summarizer_mode> {
  static constexpr std::string_view label = "summarizer_mode";
  static constexpr std::array<std::string_view, 3> names{"llm", "deterministic", "off"};
  static_assert(names.size() - 1 == static_cast<size_t>(summarizer_mode::off));
};

struct summarizer_config {
  summarizer_mode mode = summarizer_mode::deterministic;
  std::string endpoint;               // name of the endpoint the LLM step uses (mode llm)
  size_t summarize_over_chars = 2000; // a log in feedback (compile log, traceback, crash output)
                                      // longer than this goes through the summarizer
  size_t llm_threshold_chars = 4000;  // ask the LLM only when pre-processing left more than this
  size_t max_chars = 6000;            // the deterministic summary never exceeds this
  size_t context_lines = 12;          // lines kept around the first error
  std::string prompt_file = resource_path("prompts/summary.md").string();
  uint32_t max_tokens = 1024;
};

struct llm_config {
  std::vector<endpoint_config> endpoints;
  // `llm.outage_after`: the default of every endpoint's, those not in `endpoints` included.
  std::chrono::milliseconds outage_after = endpoint_config{}.outage_after;
  summarizer_config summarizer;
};

/// Parses the `llm:` node. Errors are errc::config_invalid naming the key path, e.g.
/// "llm.endpoints[1].base_url: required". `path` is the node's own path ("llm").
caf::expected<llm_config> parse_llm_section(const YAML::Node& node, std::string path);

/// Parses "250ms", "30s", "5m", "1h" or a bare number of seconds.
caf::expected<std::chrono::milliseconds> parse_duration(const std::string& text);

/// Reads a prompt template. Blocking: call it while loading the configuration, not from an actor.
caf::expected<std::string> read_prompt_file(const std::string& path);

} // namespace opforge
