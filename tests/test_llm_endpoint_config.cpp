// The `llm:` configuration section: values land where they should, and every mistake is reported
// with the key path that holds it.

#include "config/endpoint_config.hpp"
#include "messages/errors.hpp"

#include <gtest/gtest.h>

using namespace opforge;
using namespace std::chrono_literals;

namespace {

caf::expected<llm_config> parse(const std::string& yaml) {
  return parse_llm_section(YAML::Load(yaml)["llm"], "llm");
}

std::string error_of(const std::string& yaml) {
  auto parsed = parse(yaml);
  if (parsed)
    return "parsed without error";
  EXPECT_EQ(parsed.error(), errc::config_invalid) << render(parsed.error());
  return render(parsed.error());
}

TEST(LlmConfig, FullSectionParses) {
  auto parsed = parse(R"(
llm:
  endpoints:
    - name: local-vllm
      base_url: http://gpu7:8000/v1/
      model: Qwen/Qwen3-32B
      api_key_env: VLLM_API_KEY
      context_window: 32768
      max_tokens: 4096
      temperature: 0.2
      extra_body: {reasoning_effort: low, top_k: 20, chat_template_kwargs: {enable_thinking: false}}
      headers: {X-Team: compilers}
      concurrency: 16
      requests_per_minute: 600
      tokens_per_minute: 2000000
      connect_timeout: 5s
      total_timeout: 15m
      backoff_base: 250ms
      breaker_open_for: 1m
      record_to: var/cassettes/run.jsonl
    - name: replayed
      kind: replay
      cassette: tests/fixtures/run.jsonl
      replay_latency_ms: 50
  summarizer:
    mode: llm
    endpoint: local-vllm
    llm_threshold_chars: 3000
    summarize_over_chars: 1500
)");
  ASSERT_TRUE(parsed) << render(parsed.error());
  ASSERT_EQ(parsed->endpoints.size(), 2u);
  const auto& vllm = parsed->endpoints[0];
  EXPECT_EQ(vllm.base_url, "http://gpu7:8000/v1"); // trailing slash dropped
  EXPECT_EQ(vllm.api_key_env, "VLLM_API_KEY");
  EXPECT_EQ(vllm.context_window, 32768u);
  EXPECT_DOUBLE_EQ(vllm.temperature, 0.2);
  EXPECT_EQ(vllm.extra_body["reasoning_effort"], "low");
  EXPECT_EQ(vllm.extra_body["top_k"], 20);
  EXPECT_EQ(vllm.extra_body["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_EQ(vllm.headers.at("X-Team"), "compilers");
  EXPECT_EQ(vllm.concurrency, 16u);
  EXPECT_EQ(vllm.connect_timeout, 5s);
  EXPECT_EQ(vllm.total_timeout, 15min);
  EXPECT_EQ(vllm.backoff_base, 250ms);
  EXPECT_EQ(vllm.breaker_open_for, 1min);
  EXPECT_EQ(vllm.max_attempts, 3u);
  const auto& replayed = parsed->endpoints[1];
  EXPECT_EQ(to_string(replayed.kind), "replay");
  EXPECT_EQ(replayed.cassette, "tests/fixtures/run.jsonl");
  EXPECT_EQ(replayed.replay_latency_ms, 50u);
  EXPECT_EQ(parsed->summarizer.mode, summarizer_mode::llm);
  EXPECT_EQ(parsed->summarizer.llm_threshold_chars, 3000u);
  EXPECT_EQ(parsed->summarizer.summarize_over_chars, 1500u);
}

TEST(LlmConfig, DefaultsNeedNoSection) {
  auto parsed = parse("llm: {}");
  ASSERT_TRUE(parsed);
  EXPECT_TRUE(parsed->endpoints.empty());
  EXPECT_EQ(parsed->summarizer.mode, summarizer_mode::deterministic);
  EXPECT_EQ(parsed->summarizer.summarize_over_chars, 2000u);
}

TEST(LlmConfig, ErrorsNameTheKeyPath) {
  // The second endpoint of a list whose first is fine, then whole sections.
  const std::string second = "llm:\n  endpoints:\n    - {name: a, base_url: 'http://h/v1', "
                             "model: m}\n    - ";
  const std::string ok = "name: b, base_url: 'http://h', model: m";
  const std::pair<std::string, std::string> cases[] = {
      {second + "{name: b, model: m}", "llm.endpoints[1].base_url: required"},
      {second + "{name: b, base_url: 'gpu7:8000', model: m}",
       "llm.endpoints[1].base_url: expected an http:// or https:// URL, got gpu7:8000"},
      {second + "{" + ok + ", temprature: 1}", "llm.endpoints[1].temprature: unknown key"},
      {second + "{" + ok + ", top_p: 3}", "llm.endpoints[1].top_p: must lie in [0, 1], got 3"},
      {second + "{" + ok + ", concurrency: 2.5}",
       "llm.endpoints[1].concurrency: expected a whole number, got 2.5"},
      {second + "{" + ok + ", total_timeout: soon}",
       "llm.endpoints[1].total_timeout: expected a duration like 500ms, 30s or 5m, got 'soon'"},
      {second + "{" + ok + ", first_byte_timeout: 0s}",
       "llm.endpoints[1].first_byte_timeout: must be positive"},
      {second + "{" + ok + ", first_byte_timeout: 11m}",
       "llm.endpoints[1].first_byte_timeout: must not be longer than total_timeout"},
      {second + "{" + ok + ", extra_body: {stream: true}}",
       "llm.endpoints[1].extra_body: must not set messages or stream"},
      {second + "{name: a, base_url: 'http://h', model: m}",
       "llm.endpoints[1].name: duplicate endpoint name a"},
      {second + "{name: b, kind: replay}", "llm.endpoints[1].cassette: required"},
      {second + "{name: b, kind: grpc}",
       "llm.endpoints[1].kind: expected openai or replay, got grpc"},
      {second + "{name: b, kind: [replay]}", "llm.endpoints[1].kind: expected openai or replay"},
      {second + "{" + ok + ", probe: {models: true}}",
       "llm.endpoints[1].probe: expected models, chat or off"},
      {second + "{" + ok + ", probe: Models}",
       "llm.endpoints[1].probe: expected models, chat or off, got Models"},
      {"llm:\n  endpoints: {name: a}\n", "llm.endpoints: expected a list"},
      {"llm:\n  summarizer: {mode: llm, endpoint: nowhere}\n",
       "llm.summarizer.endpoint: no endpoint named nowhere"},
      {"llm:\n  summarizer: {mode: sometimes}\n",
       "llm.summarizer.mode: expected llm, deterministic or off, got sometimes"},
      {"llm:\n  summarizer: {mode: [llm]}\n",
       "llm.summarizer.mode: expected llm, deterministic or off"},
      {"llm:\n  summarizer: {summarize_over_chars: -1}\n",
       "llm.summarizer.summarize_over_chars: must lie in [0, 1000000000], got -1"},
      {"llm:\n  endpoint: []\n", "llm.endpoint: unknown key"},
  };
  for (const auto& [yaml, expected] : cases)
    EXPECT_EQ(error_of(yaml), "config_invalid: " + expected) << yaml;
}

TEST(LlmConfig, OutageAfterIsSetForAllEndpointsOrForOne) {
  auto parsed = parse(R"(
llm:
  outage_after: 90s
  endpoints:
    - {name: a, base_url: "http://a/v1", model: m}
    - {name: b, base_url: "http://b/v1", model: m, outage_after: 5s}
)");
  ASSERT_TRUE(parsed) << render(parsed.error());
  EXPECT_EQ(parsed->outage_after, 90s);
  EXPECT_EQ(parsed->endpoints[0].outage_after, 90s);
  EXPECT_EQ(parsed->endpoints[1].outage_after, 5s);
  EXPECT_EQ(parse("llm: {}\n")->outage_after, 60s);
  EXPECT_EQ(error_of("llm: {outage_after: soon}\n"),
            "config_invalid: llm.outage_after: expected a duration like 500ms, 30s or 5m, got "
            "'soon'");
}

TEST(LlmConfig, HealthProbeIsChosenPerEndpoint) {
  auto parsed = parse(R"(
llm:
  endpoints:
    - {name: a, base_url: "http://a/v1", model: m}
    - {name: b, base_url: "http://b/v1", model: m, probe: chat, probe_interval: 2s,
       probe_interval_max: 30s}
)");
  ASSERT_TRUE(parsed) << render(parsed.error());
  EXPECT_EQ(to_string(parsed->endpoints[0].probe), "models");
  EXPECT_EQ(parsed->endpoints[0].probe_interval, 5s);
  EXPECT_EQ(parsed->endpoints[0].probe_interval_max, 60s);
  EXPECT_EQ(to_string(parsed->endpoints[1].probe), "chat");
  EXPECT_EQ(parsed->endpoints[1].probe_interval, 2s);
  EXPECT_EQ(parsed->endpoints[1].probe_interval_max, 30s);
  const std::string endpoint =
      "llm:\n  endpoints:\n    - {name: a, base_url: 'http://h', model: m, ";
  EXPECT_EQ(error_of(endpoint + "probe: ping}\n"),
            "config_invalid: llm.endpoints[0].probe: expected models, chat or off, got ping");
  EXPECT_EQ(error_of(endpoint + "probe_interval: 0s}\n"),
            "config_invalid: llm.endpoints[0].probe_interval: must be positive");
  EXPECT_EQ(error_of(endpoint + "probe_interval: 10s, probe_interval_max: 5s}\n"),
            "config_invalid: llm.endpoints[0].probe_interval_max: must not be shorter than "
            "probe_interval");
}

TEST(LlmConfig, DurationsReadTheirUnits) {
  EXPECT_EQ(*parse_duration("250ms"), 250ms);
  EXPECT_EQ(*parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(*parse_duration("2"), 2s);
  EXPECT_EQ(*parse_duration("1h"), 1h);
  EXPECT_FALSE(parse_duration("-1s"));
  EXPECT_FALSE(parse_duration("5 parsecs"));
}

TEST(LlmConfig, MissingPromptFileIsUnreadable) {
  auto prompt = read_prompt_file("/nonexistent/summary.md");
  ASSERT_FALSE(prompt);
  EXPECT_EQ(prompt.error(), errc::config_unreadable);
}

} // namespace
