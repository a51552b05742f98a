// llm_endpoint over real HTTP on loopback, against the Python replay server: every fault mode gives
// the right outcome and retry count, the breaker opens and recovers, cancel and shutdown reply, and
// the API key never reaches a log, a result or a cassette. The endpoint runs on CAF's test
// coordinator: its waits (backoff, Retry-After, rate limit, breaker) pass in virtual time.

#include "test_llm_endpoint_support.hpp"
#include "tests/loopback_http_server.hpp"

#include <csignal>

#include <prometheus/text_serializer.h>

using namespace opforge;
using namespace opforge::testing;
using namespace std::chrono_literals;

namespace {

class LlmEndpoint : public LlmFixture {};

TEST_F(LlmEndpoint, AnswerCarriesContentUsageAndReasoningTokens) {
  auto usage = nlohmann::json{{"prompt_tokens", 120},
                              {"completion_tokens", 80},
                              {"completion_tokens_details", {{"reasoning_tokens", 50}}}};
  start_server({answer("add", "def add_kernel(): ...", "stop", usage)});
  auto endpoint = spawn_endpoint(config());
  auto result = complete(endpoint, "add");
  EXPECT_EQ(result.outcome, chat_outcome::ok) << result.error;
  EXPECT_EQ(result.content, "def add_kernel(): ...");
  EXPECT_EQ(result.finish_reason, "stop");
  EXPECT_EQ(result.usage.prompt, 120u);
  EXPECT_EQ(result.usage.completion, 80u);
  EXPECT_EQ(result.usage.reasoning, 50u);
  EXPECT_FALSE(result.usage.estimated);
  EXPECT_EQ(result.attempts, 1u);
  auto seen = hits();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]["operator"], "add");
  EXPECT_EQ(seen[0]["request"], std::to_string(result.request_id));
}

TEST_F(LlmEndpoint, UsageIsEstimatedWhenTheServerOmitsIt) {
  start_server({answer("add", std::string(400, 'x'), "stop", nullptr)});
  auto endpoint = spawn_endpoint(config());
  auto result = complete(endpoint, "add");
  EXPECT_EQ(result.outcome, chat_outcome::ok);
  EXPECT_TRUE(result.usage.estimated);
  EXPECT_EQ(result.usage.completion, 100u);
  EXPECT_GT(result.usage.prompt, 0u);
}

TEST_F(LlmEndpoint, RateLimitedAttemptWaitsForRetryAfter) {
  start_server({fault("add", "429:1"), answer("add", "ok after 429")});
  auto endpoint = spawn_endpoint(config()); // its own backoff is at most 50 ms
  auto asked = sched.clock().now();
  auto reply = await_reply(submit(endpoint, request("add")));
  ASSERT_TRUE(reply.result) << render(reply.error);
  const auto& result = *reply.result;
  EXPECT_EQ(result.outcome, chat_outcome::ok) << result.error;
  EXPECT_EQ(result.content, "ok after 429");
  EXPECT_EQ(result.attempts, 2u);
  auto seen = hits();
  ASSERT_EQ(seen.size(), 2u);
  // The first attempt left when asked and the second's answer arrived when it left (virtual
  // time stands still while a transfer is under way): between them lies the wait.
  EXPECT_GE(reply.at - asked, 1s);
  EXPECT_EQ(metrics_ptr->llm_retries("replay", "http_429").Value(), 1);
}

TEST_F(LlmEndpoint, RetryAfterBeyondTheLimitEndsTheRequest) {
  start_server({fault("add", "429:600"), answer("add", "never asked for")});
  auto endpoint = spawn_endpoint(config());
  auto result = complete(endpoint, "add");
  EXPECT_EQ(result.outcome, chat_outcome::endpoint_fault);
  EXPECT_EQ(result.attempts, 1u);
  EXPECT_NE(result.error.find("exceeds max_retry_after"), std::string::npos) << result.error;
}

TEST_F(LlmEndpoint, RetryableStatusesAreRetriedThenTheAnswerIsServed) {
  auto body = nlohmann::json{{"error", {{"message", "try again"}}}};
  start_server({http_error("a", 500, body), answer("a", "after 500"), http_error("b", 408, body),
                answer("b", "after 408"), http_error("c", 409, body), answer("c", "after 409"),
                http_error("d", 503, body), http_error("d", 502, body), answer("d", "third")});
  auto endpoint = spawn_endpoint(config());
  for (auto [op, attempts] : {std::pair{"a", 2u}, {"b", 2u}, {"c", 2u}, {"d", 3u}}) {
    auto result = complete(endpoint, op);
    EXPECT_EQ(result.outcome, chat_outcome::ok) << op << ": " << result.error;
    EXPECT_EQ(result.attempts, attempts) << op;
  }
}

TEST_F(LlmEndpoint, PersistentServerErrorsExhaustThreeAttempts) {
  start_server({fault("add", "500"), fault("add", "500"), fault("add", "500"),
                answer("add", "not reached")});
  auto endpoint = spawn_endpoint(config());
  auto result = complete(endpoint, "add");
  EXPECT_EQ(result.outcome, chat_outcome::endpoint_fault);
  EXPECT_EQ(result.attempts, 3u);
  EXPECT_NE(result.error.find("HTTP 500"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("gave up after 3 attempts"), std::string::npos) << result.error;
  EXPECT_EQ(hits().size(), 3u);
}

TEST_F(LlmEndpoint, HangAndDroppedBodiesAreTransportFaultsThatAreRetried) {
  start_server({fault("hang", "hang"), answer("hang", "after hang"), fault("drop", "drop"),
                answer("drop", "after drop")});
  auto cfg = config();
  cfg.total_timeout = 500ms;
  auto endpoint = spawn_endpoint(cfg);
  for (auto op : {"hang", "drop"}) {
    auto result = complete(endpoint, op);
    EXPECT_EQ(result.outcome, chat_outcome::ok) << op << ": " << result.error;
    EXPECT_EQ(result.content, std::string{"after "} + op);
    EXPECT_EQ(result.attempts, 2u) << op;
  }
  EXPECT_EQ(metrics_ptr->llm_retries("replay", "transport").Value(), 2);
}

TEST_F(LlmEndpoint, SlowAnswerWithinTheTimeoutIsFine) {
  start_server({fault("add", "slow:200")});
  auto endpoint = spawn_endpoint(config());
  auto result = complete(endpoint, "add");
  EXPECT_EQ(result.outcome, chat_outcome::ok) << result.error;
  EXPECT_EQ(result.content, "replayed fault answer");
  EXPECT_EQ(result.attempts, 1u);
}

TEST_F(LlmEndpoint, GarbageAndTruncatedJsonAreEndpointFaultsNotRetried) {
  start_server({fault("garbage", "garbage"), fault("truncated", "truncated"),
                answer("garbage", "unused"), answer("truncated", "unused")});
  auto endpoint = spawn_endpoint(config());
  for (auto op : {"garbage", "truncated"}) {
    auto result = complete(endpoint, op);
    EXPECT_EQ(result.outcome, chat_outcome::endpoint_fault) << op;
    EXPECT_EQ(result.attempts, 1u) << op;
    EXPECT_NE(result.error.find("not a JSON object"), std::string::npos) << result.error;
  }
}

TEST_F(LlmEndpoint, ClientErrorsAreNotRetried) {
  start_server({http_error("add", 401, {{"error", {{"message", "invalid api key"}}}})});
  auto endpoint = spawn_endpoint(config());
  auto result = complete(endpoint, "add");
  EXPECT_EQ(result.outcome, chat_outcome::endpoint_fault);
  EXPECT_EQ(result.attempts, 1u);
  EXPECT_EQ(result.error, "HTTP 401: invalid api key");
}

TEST_F(LlmEndpoint, EveryServersContextErrorIsContextExhausted) {
  std::vector<std::string> flavours{"openai", "vllm", "sglang", "llamacpp", "ollama"};
  std::vector<nlohmann::json> entries;
  for (const auto& flavour : flavours)
    entries.push_back(fault(flavour, "context:" + flavour));
  start_server(entries);
  auto endpoint = spawn_endpoint(config());
  for (const auto& flavour : flavours) {
    auto result = complete(endpoint, flavour);
    EXPECT_EQ(result.outcome, chat_outcome::context_exhausted) << flavour << ": " << result.error;
    EXPECT_EQ(result.attempts, 1u) << flavour;
  }
  EXPECT_EQ(status(endpoint).breaker, "closed"); // a context error says the server is fine
}

TEST_F(LlmEndpoint, PromptLargerThanTheWindowNeverLeaves) {
  start_server({answer("add", "unused")});
  auto cfg = config();
  cfg.context_window = 1000;
  auto endpoint = spawn_endpoint(cfg);
  auto result = complete(endpoint, request("add", std::string(8000, 'y')));
  EXPECT_EQ(result.outcome, chat_outcome::context_exhausted);
  EXPECT_EQ(result.attempts, 0u);
  EXPECT_TRUE(hits().empty());
}

TEST_F(LlmEndpoint, LengthFinishIsTruncatedOrContextExhaustedWhenTheWindowIsFull) {
  start_server(
      {answer("short", "def k(", "length", {{"prompt_tokens", 100}, {"completion_tokens", 512}}),
       answer("full", "def k(", "length", {{"prompt_tokens", 7800}, {"completion_tokens", 392}})});
  auto endpoint = spawn_endpoint(config());
  auto truncated = complete(endpoint, "short");
  EXPECT_EQ(truncated.outcome, chat_outcome::truncated);
  EXPECT_EQ(truncated.content, "def k(");
  auto full = complete(endpoint, "full");
  EXPECT_EQ(full.outcome, chat_outcome::context_exhausted);
}

TEST_F(LlmEndpoint, RequestRateLimitSpacesRequestsOnceTheBurstIsSpent) {
  start_server({answer("add", "fine")}, 0, true);
  auto cfg = config();
  cfg.requests_per_minute = 60; // a burst of 60, then one a second
  auto endpoint = spawn_endpoint(cfg);
  std::vector<llm_ticket> pending;
  for (int i = 0; i < 62; ++i)
    pending.push_back(submit(endpoint, request("add")));
  std::vector<llm_reply> replies;
  for (const auto& ticket : pending) {
    replies.push_back(await_reply(ticket));
    ASSERT_TRUE(replies.back().result) << render(replies.back().error);
    EXPECT_EQ(replies.back().result->outcome, chat_outcome::ok) << replies.back().result->error;
  }
  auto seen = hits();
  ASSERT_EQ(seen.size(), 62u);
  // The 61st and 62nd had to wait for the bucket to refill, one second each (a reply arrives,
  // in virtual time, when its request left).
  EXPECT_GE(replies[61].at - replies[0].at, 1500ms);
}

TEST_F(LlmEndpoint, BreakerOpensAfterConsecutiveFailuresAndRecoversThroughHalfOpen) {
  start_server({fault("add", "500"), fault("add", "500"), fault("add", "500"), fault("add", "500"),
                answer("add", "recovered")});
  auto cfg = config();
  cfg.max_attempts = 1;
  cfg.breaker_failures = 3;
  cfg.breaker_open_for = 1s;
  auto endpoint = spawn_endpoint(cfg);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(complete(endpoint, "add").outcome, chat_outcome::endpoint_fault);
  EXPECT_EQ(status(endpoint).breaker, "open");
  EXPECT_EQ(metrics_ptr->llm_breaker_state("replay").Value(), 2);
  auto refused = complete(endpoint, "add");
  EXPECT_EQ(refused.outcome, chat_outcome::endpoint_fault);
  EXPECT_EQ(refused.attempts, 0u);
  EXPECT_NE(refused.error.find("circuit breaker open"), std::string::npos) << refused.error;
  EXPECT_EQ(hits().size(), 3u); // the open breaker did not hammer the server

  // Once the window passes, one probe goes out; the 4th cassette entry fails it: open again.
  // Virtual time stood still since the breaker opened, and stands still while the probe is out.
  sched.advance_time(cfg.breaker_open_for);
  auto probe = complete(endpoint, "add");
  EXPECT_EQ(probe.attempts, 1u);
  EXPECT_EQ(probe.outcome, chat_outcome::endpoint_fault);
  EXPECT_EQ(status(endpoint).breaker, "open");

  sched.advance_time(cfg.breaker_open_for);
  auto recovered = complete(endpoint, "add");
  EXPECT_EQ(recovered.outcome, chat_outcome::ok) << recovered.error;
  EXPECT_EQ(recovered.content, "recovered");
  EXPECT_EQ(status(endpoint).breaker, "closed");
  EXPECT_EQ(metrics_ptr->llm_breaker_state("replay").Value(), 0);
  EXPECT_EQ(hits().size(), 5u);
}

TEST_F(LlmEndpoint, StoppedServerIsProbedDownAndBackUpWithoutAnyRequest) {
  start_server({answer("add", "served")}, 0, true);
  auto cfg = config();
  cfg.probe = endpoint_probe::models;
  cfg.probe_interval = 100ms;
  cfg.probe_interval_max = 400ms;
  cfg.outage_after = 600ms;
  cfg.max_attempts = 1;
  cfg.breaker_failures = 1;
  cfg.breaker_open_for = 1h; // only the probe can bring it back
  cfg.connect_timeout = 300ms;
  cfg.total_timeout = 300ms;
  auto endpoint = spawn_endpoint(cfg);
  ASSERT_EQ(complete(endpoint, "add").outcome, chat_outcome::ok);

  // A stopped server takes connections but never answers: the request times out.
  auto pid = server->pid();
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  auto failed = complete(endpoint, "add");
  EXPECT_EQ(failed.outcome, chat_outcome::endpoint_fault);
  auto& down = metrics_ptr->llm_down("replay");
  // A probe's transfer is real I/O that io_under_way() does not count (no request is in
  // flight): give the HTTP thread a moment to answer, else let virtual time run to the next timer.
  auto wait_for_down = [&](double value) {
    auto deadline = std::chrono::steady_clock::now() + io_limit;
    while (std::chrono::steady_clock::now() < deadline) {
      sched.take_handed_over();
      sched.run();
      if (down.Value() == value)
        break;
      if (!sched.wait_for_hand_over(std::chrono::steady_clock::now() + 50ms))
        sched.trigger_timeout();
    }
    return down.Value();
  };
  // Nothing asks the endpoint anything now: its own probes find it down...
  EXPECT_EQ(wait_for_down(1), 1);
  EXPECT_NE(log_text.str().find("llm replay: down: every attempt for"), std::string::npos)
      << log_text.str();
  EXPECT_NE(log_text.str().find("health probe: "), std::string::npos) << log_text.str();

  // ...and up again once the server answers.
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
  EXPECT_EQ(wait_for_down(0), 0);
  EXPECT_NE(log_text.str().find("llm replay: answers a health probe again"), std::string::npos)
      << log_text.str();
  EXPECT_NE(log_text.str().find("llm replay: up again after"), std::string::npos) << log_text.str();
  auto now = status(endpoint);
  EXPECT_EQ(to_string(now.health.state), "up");
  EXPECT_EQ(now.breaker, "half_open"); // the next request goes alone, as after a pause
  EXPECT_EQ(now.requests.at("ok") + now.requests.at("endpoint_fault"), 2u);

  // The next request closes the breaker.
  EXPECT_EQ(complete(endpoint, "add").outcome, chat_outcome::ok);
  EXPECT_EQ(status(endpoint).breaker, "closed");
}

TEST_F(LlmEndpoint, CancelRepliesCancelledAndAbortsTheTransfer) {
  start_server({fault("add", "hang"), answer("add", "next")});
  auto endpoint = spawn_endpoint(config());
  auto req = request("add");
  auto id = req.request_id;
  auto pending = submit(endpoint, std::move(req));
  wait_for_hits(1); // the server holds it: the cancel aborts a transfer under way
  cancel(endpoint, id);
  auto result = await(pending);
  EXPECT_EQ(result.outcome, chat_outcome::cancelled);
  EXPECT_EQ(result.request_id, id);
  auto after = status(endpoint);
  EXPECT_EQ(after.in_flight, 0u);
  EXPECT_EQ(after.requests["cancelled"], 1u);
  // The slot is free again and the same id may be reused.
  auto next = request("add");
  next.request_id = id;
  EXPECT_EQ(complete(endpoint, next).content, "next");
}

TEST_F(LlmEndpoint, DuplicateRequestIdIsRefused) {
  start_server({fault("add", "hang")});
  auto endpoint = spawn_endpoint(config());
  auto first = request("add");
  auto pending = submit(endpoint, first);
  auto duplicate = await_reply(submit(endpoint, first));
  EXPECT_FALSE(duplicate.result) << "a duplicate id was accepted";
  EXPECT_EQ(duplicate.error, errc::request_invalid) << render(duplicate.error);
  cancel(endpoint, first.request_id);
  EXPECT_EQ(await(pending).outcome, chat_outcome::cancelled);
}

TEST_F(LlmEndpoint, RequestIdsNeedOnlyBeUniquePerSender) {
  start_server({fault("add", "hang"), answer("add", "from the other sender")});
  auto endpoint = spawn_endpoint(config());
  auto mine = request("add");
  auto pending = submit(endpoint, mine);
  wait_for_hits(1); // mine took the hanging answer
  auto other = spawn_client(endpoint);
  helpers.push_back(other.actor);
  cancel(other, mine.request_id); // not theirs: ignored
  EXPECT_EQ(await(submit(other, mine)).content, "from the other sender");
  EXPECT_EQ(status(endpoint).in_flight, 1u); // mine still hangs
  cancel(endpoint, mine.request_id);
  EXPECT_EQ(await(pending).outcome, chat_outcome::cancelled);
}

TEST_F(LlmEndpoint, EveryRequestGetsExactlyOneReplyUnderMixedFaults) {
  auto body = nlohmann::json{{"error", {{"message", "overloaded"}}}};
  start_server({answer("mix", "fine"), fault("mix", "500"), fault("mix", "garbage"),
                fault("mix", "drop"), http_error("mix", 503, body), fault("mix", "context:vllm"),
                answer("mix", "fine", "length")},
               5, true);
  auto cfg = config();
  cfg.concurrency = 4;
  cfg.breaker_failures = 1000;
  auto endpoint = spawn_endpoint(cfg);
  std::vector<uint64_t> ids;
  std::vector<llm_ticket> pending;
  for (int i = 0; i < 40; ++i) {
    auto req = request("mix");
    ids.push_back(req.request_id);
    pending.push_back(submit(endpoint, std::move(req)));
  }
  std::map<uint64_t, int> replies;
  for (const auto& ticket : pending) {
    auto reply = await_reply(ticket);
    if (reply.result)
      ++replies[reply.result->request_id];
    else
      ADD_FAILURE() << render(reply.error);
  }
  ASSERT_EQ(replies.size(), ids.size());
  for (auto id : ids)
    EXPECT_EQ(replies[id], 1) << id;
  auto s = status(endpoint);
  uint64_t finished = 0;
  for (const auto& [outcome, count] : s.requests)
    finished += count;
  EXPECT_EQ(finished, ids.size());
  EXPECT_EQ(s.in_flight + s.queued + s.backing_off, 0u);
}

TEST_F(LlmEndpoint, StoppingTheEndpointRepliesToEveryHeldRequest) {
  start_server({fault("add", "hang"), fault("add", "hang")});
  auto cfg = config();
  cfg.concurrency = 1; // one in flight, one queued
  auto endpoint = spawn_endpoint(cfg);
  auto first = submit(endpoint, request("add"));
  auto second = submit(endpoint, request("add"));
  wait_for_hits(1);
  caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
  for (const auto& ticket : {first, second}) {
    auto r = await(ticket);
    EXPECT_EQ(r.outcome, chat_outcome::cancelled);
    EXPECT_NE(r.error.find("stopped"), std::string::npos) << r.error;
  }
}

TEST_F(LlmEndpoint, TokenTotalsAddUpPerSessionAndCampaign) {
  start_server({answer("add", "a"), answer("add", "b"), answer("mul", "c")});
  auto endpoint = spawn_endpoint(config());
  complete(endpoint, "add");
  complete(endpoint, "add");
  complete(endpoint, "mul");
  auto s = status(endpoint);
  EXPECT_EQ(s.total.prompt, 60u);
  EXPECT_EQ(s.total.completion, 21u);
  EXPECT_EQ(s.by_campaign["campaign-1"].prompt, 60u);
  EXPECT_EQ(s.by_session["session-add"].completion, 14u);
  EXPECT_EQ(s.by_session["session-mul"].completion, 7u);
  EXPECT_EQ(metrics_ptr->llm_tokens("replay", "prompt").Value(), 60);
  EXPECT_EQ(metrics_ptr->llm_requests("replay", "ok").Value(), 3);
  auto text = prometheus::TextSerializer{}.Serialize(metrics_ptr->registry()->Collect());
  for (auto family :
       {"opforge_llm_requests_total", "opforge_llm_request_latency_seconds",
        "opforge_llm_tokens_total", "opforge_llm_breaker_state", "opforge_llm_in_flight"})
    EXPECT_NE(text.find(family), std::string::npos) << family;
}

TEST_F(LlmEndpoint, RecordedCassetteReplaysTheSameAnswers) {
  start_server({fault("add", "429:0"), answer("add", "first"), answer("mul", "second")});
  auto cfg = config();
  cfg.record_to = (dir / "recorded.jsonl").string();
  auto endpoint = spawn_endpoint(cfg);
  EXPECT_EQ(complete(endpoint, "add").content, "first");
  EXPECT_EQ(complete(endpoint, "mul").content, "second");
  stop_endpoints(); // the HTTP thread writes what is queued before it stops

  std::vector<nlohmann::json> recorded;
  std::ifstream in{dir / "recorded.jsonl"};
  for (std::string line; std::getline(in, line);)
    recorded.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(recorded.size(), 3u); // the 429 attempt is an exchange too
  EXPECT_EQ(recorded[0]["status"], 429);
  EXPECT_EQ(recorded[0]["outcome"], "retryable");
  EXPECT_EQ(recorded[1]["operator"], "add");
  EXPECT_EQ(recorded[1]["index"], 1);
  EXPECT_EQ(recorded[1]["outcome"], "ok");
  EXPECT_EQ(recorded[1]["request"]["messages"][1]["content"], "write the kernel");
  EXPECT_TRUE(recorded[2].contains("recorded_at"));
  EXPECT_TRUE(recorded[2].contains("latency_ms"));

  // Served again from what was recorded, through the same client.
  start_server({recorded.begin(), recorded.end()});
  auto replayed = spawn_endpoint(config("again"));
  auto add = complete(replayed, "add");
  EXPECT_EQ(add.content, "first");
  EXPECT_EQ(add.attempts, 2u);
  EXPECT_EQ(complete(replayed, "mul").content, "second");
}

TEST_F(LlmEndpoint, ApiKeyNeverReachesLogsResultsOrCassettes) {
  const std::string key = "sk-opforge-test-" + std::to_string(getpid()) + "-9f8e7d";
  setenv("OPFORGE_TEST_LLM_KEY", key.c_str(), 1);
  // A server that echoes the key back, as some hosted APIs do in their 401 bodies.
  start_server({http_error("add", 401, {{"error", {{"message", "Incorrect API key: " + key}}}}),
                answer("add", "echo " + key), fault("add", "500"), fault("add", "garbage")});
  auto cfg = config();
  cfg.api_key_env = "OPFORGE_TEST_LLM_KEY";
  cfg.record_to = (dir / "recorded.jsonl").string();
  auto endpoint = spawn_endpoint(cfg);
  std::vector<chat_result> results;
  for (int i = 0; i < 3; ++i)
    results.push_back(complete(endpoint, "add"));
  auto s = status(endpoint);
  stop_endpoints();

  EXPECT_EQ(results[0].error, "HTTP 401: Incorrect API key: [redacted]");
  EXPECT_EQ(results[1].content, "echo [redacted]");
  for (const auto& r : results) {
    EXPECT_EQ(r.content.find(key), std::string::npos);
    EXPECT_EQ(r.error.find(key), std::string::npos);
  }
  for (const auto& hit : hits())
    EXPECT_TRUE(hit["authorized"].get<bool>()) << "the key was not sent";
  auto logs = log_text.str();
  EXPECT_FALSE(logs.empty());
  EXPECT_EQ(logs.find(key), std::string::npos) << logs;
  auto recorded = read_file(dir / "recorded.jsonl");
  EXPECT_FALSE(recorded.empty());
  EXPECT_EQ(recorded.find(key), std::string::npos) << recorded;
  EXPECT_EQ(recorded.find("Authorization"), std::string::npos);
  EXPECT_EQ(caf::deep_to_string(s).find(key), std::string::npos);
  unsetenv("OPFORGE_TEST_LLM_KEY");
}

// -- pure pieces ------------------------------------------------------------------------------

TEST(LlmEndpointPieces, ContextErrorsAreRecognisedAndOthersAreNot) {
  EXPECT_TRUE(says_context_exceeded(R"({"error":{"code":"context_length_exceeded"}})"));
  EXPECT_TRUE(says_context_exceeded("This model's Maximum Context Length is 4096 tokens"));
  EXPECT_TRUE(says_context_exceeded("the request exceeds the available context size"));
  EXPECT_TRUE(says_context_exceeded("prompt is too long: 210000 tokens > 200000 maximum"));
  EXPECT_FALSE(says_context_exceeded(R"({"error":{"message":"invalid api key"}})"));
  EXPECT_FALSE(says_context_exceeded("rate limit reached"));
}

TEST(LlmEndpointPieces, RetryAfterReadsSecondsAndDates) {
  EXPECT_EQ(parse_retry_after("3"), 3000ms);
  EXPECT_EQ(parse_retry_after("0.5"), 500ms);
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), 0ms); // in the past: now
  EXPECT_FALSE(parse_retry_after(""));
  EXPECT_FALSE(parse_retry_after("soon"));
}

TEST(LlmEndpointPieces, ClassifyNamesWhatWentWrong) {
  http_exchange x;
  x.transport_error = "Timeout was reached";
  auto v = classify_exchange(x, 8192, 10, false);
  EXPECT_TRUE(v.retryable);
  EXPECT_FALSE(v.endpoint_ok);
  EXPECT_EQ(v.reason, "transport");

  x = {};
  x.status = 200;
  x.body = R"({"choices": []})";
  v = classify_exchange(x, 8192, 10, false);
  EXPECT_EQ(v.outcome, chat_outcome::endpoint_fault);
  EXPECT_FALSE(v.retryable);
  EXPECT_EQ(v.reason, "garbage");

  x.body = R"({"choices":[{"message":{"content":null},"finish_reason":"length"}],
               "usage":{"prompt_tokens":10,"completion_tokens":100}})";
  EXPECT_EQ(classify_exchange(x, 8192, 10, false).outcome, chat_outcome::truncated);
  EXPECT_EQ(classify_exchange(x, 8192, 10, true).outcome, chat_outcome::context_exhausted);
  EXPECT_EQ(classify_exchange(x, 110, 10, false).outcome, chat_outcome::context_exhausted);

  x.status = 429;
  x.retry_after = "7";
  x.body = "{}";
  v = classify_exchange(x, 8192, 10, false);
  EXPECT_TRUE(v.retryable);
  EXPECT_EQ(v.retry_after, 7000ms);

  // A refusal of this request (a replay cassette without the answer) is final, and says nothing
  // bad about the endpoint; a refusal of the caller (401, 403) is the endpoint's fault.
  x = {};
  x.status = 404;
  x.body = R"({"error": {"message": "cassette c.jsonl holds no answer #1 for operator 'abs'",
                         "type": "replay_exhausted"}})";
  v = classify_exchange(x, 8192, 10, false);
  EXPECT_EQ(v.outcome, chat_outcome::rejected);
  EXPECT_FALSE(v.retryable);
  EXPECT_TRUE(v.endpoint_ok);
  EXPECT_EQ(v.error, "HTTP 404: cassette c.jsonl holds no answer #1 for operator 'abs'");
  for (long status : {400L, 422L}) {
    x.status = status;
    EXPECT_EQ(classify_exchange(x, 8192, 10, false).outcome, chat_outcome::rejected) << status;
  }
  for (long status : {401L, 403L}) {
    x.status = status;
    v = classify_exchange(x, 8192, 10, false);
    EXPECT_EQ(v.outcome, chat_outcome::endpoint_fault) << status;
    EXPECT_FALSE(v.endpoint_ok) << status;
  }
}

TEST(LlmEndpointPieces, TokenBucketLimitsAndRefills) {
  auto t0 = std::chrono::steady_clock::time_point{};
  token_bucket bucket{60, t0}; // one per second
  for (int i = 0; i < 60; ++i)
    EXPECT_TRUE(bucket.try_take(1, t0));
  EXPECT_FALSE(bucket.try_take(1, t0));
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(bucket.wait_for(1, t0)), 1000ms);
  EXPECT_FALSE(bucket.try_take(1, t0 + 500ms));
  EXPECT_TRUE(bucket.try_take(1, t0 + 1000ms));
  // A cost above capacity still goes once the bucket is full, rather than never.
  EXPECT_TRUE(bucket.try_take(600, t0 + 1000s));
  EXPECT_FALSE(bucket.try_take(1, t0 + 1000s));
  token_bucket unlimited{0, t0};
  EXPECT_TRUE(unlimited.try_take(1e9, t0));
}

TEST(LlmEndpointPieces, PromptEstimateCountsEveryMessage) {
  std::vector<chat_message> messages{{"system", std::string(40, 'a')}, {"user", "abcd"}};
  EXPECT_EQ(estimate_prompt_tokens(messages), 3u + (10 + 4) + (1 + 4));
}

} // namespace

namespace {

endpoint_config loopback_config(const std::string& name, const std::string& url) {
  endpoint_config cfg;
  cfg.name = name;
  cfg.base_url = url;
  cfg.model = "m";
  cfg.first_byte_timeout = 300ms;
  cfg.connect_timeout = 2s;
  cfg.total_timeout = 600s;
  cfg.probe = endpoint_probe::models;
  return cfg;
}

} // namespace

TEST_F(LlmEndpoint, SilentEndpointIsHungAndDownWithinTheFirstByteTimeout) {
  loopback_server silent{true, "", 0ms};
  auto endpoint = spawn_endpoint(loopback_config("quiet", silent.url()));
  auto started = std::chrono::steady_clock::now();
  auto result = complete(endpoint, "add");
  auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.outcome, chat_outcome::endpoint_fault);
  EXPECT_EQ(result.error, "endpoint quiet hung: no first byte after 0.3 s");
  EXPECT_EQ(result.attempts, 1u); // not retried into the same silence
  // The request's window, then the liveness probe's: far from 3 x 600 s.
  EXPECT_LT(took, 3s);
  auto now = status(endpoint);
  EXPECT_EQ(to_string(now.health.state), "down");
  EXPECT_EQ(now.health.last_error, "hung: no first byte after 0.3 s");
  EXPECT_EQ(now.breaker, "open");
  EXPECT_EQ(metrics_ptr->llm_down("quiet").Value(), 1);
  // Queued behind the open breaker, the next request fails at once, naming why.
  auto next = complete(endpoint, "add");
  EXPECT_EQ(next.outcome, chat_outcome::endpoint_fault);
  EXPECT_EQ(next.error, "endpoint quiet hung: no first byte after 0.3 s; circuit breaker open");
}

TEST_F(LlmEndpoint, SlowAnswerAfterItsFirstByteIsNotCut) {
  auto body = answer("add", "slow but sure")["response"].dump();
  // About 1.5 s for the whole body, five first-byte windows.
  loopback_server slow{false, body, std::chrono::milliseconds{1500 / body.size() + 1}};
  auto cfg = loopback_config("slow", slow.url());
  cfg.probe = endpoint_probe::off; // a stall alone would count as hung: none may be noticed
  auto endpoint = spawn_endpoint(cfg);
  auto result = complete(endpoint, "add");
  EXPECT_EQ(result.outcome, chat_outcome::ok) << result.error;
  EXPECT_EQ(result.content, "slow but sure");
  EXPECT_EQ(to_string(status(endpoint).health.state), "up");
}
