// The events `run` and `attach` find in successive `campaign` replies, and their two renderings:
// the text display of a log and JSON lines. The replies are shaped as the control server writes
// them (messages/PROTOCOL.md, `campaign`); test_serve_campaign drives the real binary.

#include "apps/campaign_events.hpp"

#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

json session(const std::string& op, const std::string& state, uint32_t calls,
             const std::string& end_reason = "") {
  return {{"session_id", "c1/" + op},
          {"op", op},
          {"variant", ""},
          {"operator", op},
          {"state", state},
          {"end_reason", end_reason},
          {"dialogs", 1},
          {"llm_calls", calls},
          {"faults", 0},
          {"prompt_tokens", 100 * calls},
          {"completion_tokens", 10 * calls},
          {"kernel_key", state == "SUCCESS" ? op + "@k" : ""},
          {"endpoint", "ep"}};
}

json endpoint(const std::string& state) {
  return {{"name", "ep"},
          {"state", state},
          {"breaker", state == "up" ? "closed" : "open"},
          {"last_error", "connection refused"},
          {"failing_since_ms", state == "up" ? 0 : 1764000000000},
          {"last_error_ms", 1764000000000},
          {"outage_after_ms", 60000}};
}

// A campaign over abs and neg that left sigmoid out as covered, at some point of its run.
json campaign(const std::string& state, json active, json finished, json endpoints) {
  uint64_t succeeded = 0, failed = 0, calls = 0;
  for (const auto& s : finished) {
    (s.at("state") == "SUCCESS" ? succeeded : failed) += 1;
    calls += s.at("llm_calls").get<uint64_t>();
  }
  json states = json::object();
  for (const auto& s : active) {
    states[s.at("state").get<std::string>()] =
        states.value(s.at("state").get<std::string>(), 0) + 1;
    calls += s.at("llm_calls").get<uint64_t>();
  }
  auto ended = state != "running" && state != "resolving";
  return {{"campaign_id", "c1"},
          {"state", state},
          {"error", ""},
          {"endpoint", "ep"},
          {"device_kind", "interpreter"},
          {"created_ms", 1764000000000},
          {"ended_ms", ended ? 1764000042000 : 0},
          {"operators", state == "resolving" ? 0 : 2},
          {"waiting", state == "resolving" ? 0 : 2 - succeeded - failed - active.size()},
          {"running", active.size()},
          {"succeeded", succeeded},
          {"failed", failed},
          {"states", states},
          {"llm_calls", calls},
          {"prompt_tokens", 100 * calls},
          {"completion_tokens", 10 * calls},
          {"faults", 0},
          {"operator_ids", state == "resolving" ? json::array() : json{"abs", "neg"}},
          {"covered", state == "resolving" ? json::array() : json{"sigmoid"}},
          {"finished", finished},
          {"active", active},
          {"endpoints", endpoints}};
}

// The replies a follower polls, in order: resolving, both running, the endpoint down, neg failed
// and the endpoint up again, an unchanged poll, abs passed and the campaign done.
std::vector<json> replies() {
  auto neg_failed = session("neg", "FAILED", 3, "budget spent: 1 dialogs of at most 3 calls");
  return {campaign("resolving", json::array(), json::array(), json::array()),
          campaign("running", {session("abs", "GENERATE", 0), session("neg", "GENERATE", 0)},
                   json::array(), {endpoint("up")}),
          campaign("running", {session("abs", "TEST", 1), session("neg", "GENERATE", 2)},
                   json::array(), {endpoint("down")}),
          campaign("running", {session("abs", "TEST", 1)}, {neg_failed}, {endpoint("up")}),
          campaign("running", {session("abs", "TEST", 1)}, {neg_failed}, {endpoint("up")}),
          campaign("done", json::array(),
                   {neg_failed, session("abs", "SUCCESS", 2, "passed 8 tests on float32")},
                   json::array())};
}

std::vector<json> all_events() {
  campaign_watch seen;
  std::vector<json> events;
  for (const auto& reply : replies())
    for (auto& e : campaign_events(reply, seen))
      events.push_back(std::move(e));
  return events;
}

std::vector<std::string> kinds(const std::vector<json>& events) {
  std::vector<std::string> out;
  for (const auto& e : events)
    out.push_back(e.at("event"));
  return out;
}

} // namespace

TEST(CampaignEvents, EachChangeOnceInOrder) {
  auto events = all_events();
  EXPECT_EQ(kinds(events),
            (std::vector<std::string>{"resolving", "resolved", "session", "session", "progress",
                                      "endpoint", "session", "progress", "endpoint", "operator",
                                      "progress", "operator", "progress", "finished"}));
  EXPECT_EQ(events[1], json({{"event", "resolved"},
                             {"campaign", "c1"},
                             {"endpoint", "ep"},
                             {"device_kind", "interpreter"},
                             {"operator_ids", {"abs", "neg"}},
                             {"covered", {"sigmoid"}}}));
  EXPECT_EQ(events[2].at("operator"), "abs");
  EXPECT_EQ(events[2].at("state"), "GENERATE");
  EXPECT_EQ(events[3].at("operator"), "neg");
  // abs moved on to TEST; neg, still in GENERATE, says nothing new.
  EXPECT_EQ(events[6].at("operator"), "abs");
  EXPECT_EQ(events[6].at("state"), "TEST");
  EXPECT_EQ(events[6].at("llm_calls"), 1);
  EXPECT_EQ(events[5].at("state"), "down");
  EXPECT_EQ(events[5].at("last_error"), "connection refused");
  EXPECT_EQ(events[8].at("state"), "up");
  EXPECT_EQ(events[9], json({{"event", "operator"},
                             {"campaign", "c1"},
                             {"operator", "neg"},
                             {"passed", false},
                             {"state", "FAILED"},
                             {"reason", "budget spent: 1 dialogs of at most 3 calls"},
                             {"dialogs", 1},
                             {"llm_calls", 3},
                             {"faults", 0},
                             {"prompt_tokens", 300},
                             {"completion_tokens", 30},
                             {"endpoint", "ep"},
                             {"kernel_key", ""}}));
  EXPECT_EQ(events[10].at("failed"), 1);
  EXPECT_EQ(events[10].at("running"), 1);
  EXPECT_EQ(events[11].at("passed"), true);
  EXPECT_EQ(events[11].at("kernel_key"), "abs@k");
  EXPECT_EQ(events[13], json({{"event", "finished"},
                              {"campaign", "c1"},
                              {"state", "done"},
                              {"error", ""},
                              {"endpoint", "ep"},
                              {"operators", 2},
                              {"succeeded", 1},
                              {"failed", 1},
                              {"llm_calls", 5},
                              {"prompt_tokens", 500},
                              {"completion_tokens", 50},
                              {"faults", 0},
                              {"created_ms", 1764000000000},
                              {"ended_ms", 1764000042000}}));
}

// Attaching to a campaign that has ended: what it ran, how each operator ended, the end.
TEST(CampaignEvents, AnEndedCampaignAtOnce) {
  campaign_watch seen;
  auto events = campaign_events(replies().back(), seen);
  EXPECT_EQ(kinds(events),
            (std::vector<std::string>{"resolved", "operator", "operator", "progress", "finished"}));
  // A rejected one was never resolved.
  campaign_watch other;
  auto rejected = campaign("rejected", json::array(), json::array(), json::array());
  rejected["error"] = "nothing to do: abs: already has an accepted kernel";
  events = campaign_events(rejected, other);
  ASSERT_EQ(kinds(events), (std::vector<std::string>{"finished"}));
  EXPECT_EQ(events[0].at("error"), "nothing to do: abs: already has an accepted kernel");
}

TEST(CampaignEvents, JsonLinesAreTheEventsOnePerLine) {
  std::ostringstream out;
  campaign_display display{out, campaign_display::mode::json_lines};
  auto events = all_events();
  for (const auto& e : events)
    display.show(e);
  display.redraw();
  std::istringstream lines{out.str()};
  size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    ASSERT_LT(n, events.size());
    EXPECT_EQ(json::parse(line), events[n]);
  }
  EXPECT_EQ(n, events.size());
}

// The follower reads each event's kind back from the word it wrote. A kind it does not know shows
// nothing, and neither does a session change, which only the progress line counts.
TEST(CampaignEvents, KindsReadBackAndTheUnknownShowNothing) {
  for (const auto& e : all_events())
    EXPECT_EQ(to_string(event_kind(e).value()), e.at("event"));
  EXPECT_EQ(event_kind(detached_event("c1")), campaign_event::detached);
  EXPECT_EQ(event_kind({{"event", "stalled"}}), std::nullopt);
  EXPECT_EQ(event_kind(json::object()), std::nullopt);
  std::ostringstream out;
  campaign_display display{out, campaign_display::mode::log};
  display.show({{"event", "stalled"}, {"campaign", "c1"}});
  display.show({{"event", "session"}, {"campaign", "c1"}, {"operator", "abs"}});
  EXPECT_EQ(out.str(), "");
}

// A reason that quotes a log cut mid-character still makes a line of valid JSON.
TEST(CampaignEvents, JsonLinesOfABrokenCharacter) {
  std::ostringstream out;
  campaign_display display{out, campaign_display::mode::json_lines};
  display.show({{"event", "operator"}, {"campaign", "c1"}, {"reason", "error: caf\xc3"}});
  EXPECT_EQ(json::parse(out.str()).at("reason"), "error: caf\xef\xbf\xbd");
}

TEST(CampaignEvents, TheTextDisplayOfALog) {
  std::ostringstream out;
  campaign_display display{out, campaign_display::mode::log};
  display.show(submitted_event(replies()[0]));
  for (const auto& e : all_events())
    display.show(e);
  auto text = out.str();
  EXPECT_THAT(text, ::testing::StartsWith(
                        "campaign c1 submitted (endpoint ep, device interpreter)\n"
                        "resolving: a worker is reading the catalog for the requested operators\n"
                        "resolved: 2 operators to run; skipped 1 already covered (an accepted "
                        "kernel in the library): sigmoid\n["));
  EXPECT_THAT(text, HasSubstr("] running: 0/2 ended (0 passed, 0 failed), 2 running (GENERATE 2), "
                              "0 waiting | LLM 0 calls, 0 tokens\n"
                              "endpoint ep down: failing for "));
  EXPECT_THAT(text, HasSubstr(" (breaker open); last error: connection refused\n"));
  EXPECT_THAT(text, HasSubstr("endpoint ep up again\n"
                              "  FAIL  neg  (3 LLM calls, 1 dialogs): budget spent: 1 dialogs of "
                              "at most 3 calls\n"));
  EXPECT_THAT(text, HasSubstr("  PASS  abs  (2 LLM calls, 1 dialogs): passed 8 tests on float32\n"
                              "[00:00:42] done: 2/2 ended (1 passed, 1 failed), 0 running, 0 "
                              "waiting | LLM 5 calls, 550 tokens\n"
                              "campaign c1 done\n"
                              "  1 of 2 operators passed and are in the kernel library; 1 failed; "
                              "5 LLM calls, 550 tokens, 0 faults retried\n"));
  // A progress line only when something changed: four changes, four lines.
  size_t progress_lines = 0;
  for (auto at = text.find("\n["); at != std::string::npos; at = text.find("\n[", at + 1))
    ++progress_lines;
  EXPECT_EQ(progress_lines, 4u);
  out.str("");
  display.show(detached_event("c1"));
  EXPECT_EQ(out.str(), "detached: campaign c1 goes on in the daemon; `opforge attach c1` follows "
                       "it again, `opforge cancel c1` stops it\n");
}

// On a terminal the progress line is drawn in place: other lines clear it and it comes back below
// them; the campaign's end keeps it.
TEST(CampaignEvents, TheTextDisplayOfATerminal) {
  std::ostringstream out;
  campaign_display display{out, campaign_display::mode::terminal};
  auto events = all_events();
  for (const auto& e : events)
    display.show(e);
  auto text = out.str();
  EXPECT_THAT(text, HasSubstr("\r\033[Kendpoint ep down: failing for "));
  EXPECT_THAT(text, HasSubstr(" 0 waiting | LLM 5 calls, 550 tokens\ncampaign c1 done\n"));
  EXPECT_EQ(text.back(), '\n');
}

// A campaign whose device kind no live worker serves says so once, and once more when a worker
// of that kind takes its jobs; a reply without `unserved_jobs` (the device manager did not
// answer) changes nothing.
TEST(CampaignEvents, JobsNoWorkerServesAreSaidOnceAndTheirWorkerToo) {
  auto resolving = campaign("resolving", json::array(), json::array(), json::array());
  resolving["device_kind"] = "cuda";
  auto waiting = resolving;
  waiting["unserved_jobs"] = 1;
  auto served = campaign("running", {session("abs", "GENERATE", 0)}, json::array(), json::array());
  served["device_kind"] = "cuda";
  served["unserved_jobs"] = 0;
  campaign_watch seen;
  std::vector<json> events;
  for (const auto& reply : {resolving, waiting, resolving, waiting, served})
    for (auto& e : campaign_events(reply, seen))
      if (e.at("event") == "device")
        events.push_back(std::move(e));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], (json{{"event", "device"},
                             {"campaign", "c1"},
                             {"device_kind", "cuda"},
                             {"waiting", true},
                             {"unserved_jobs", 1}}));
  EXPECT_EQ(events[1].at("waiting"), false);
  std::ostringstream out;
  campaign_display display{out, campaign_display::mode::log};
  for (const auto& e : events)
    display.show(e);
  EXPECT_EQ(out.str(), "no worker of kind cuda is connected; the campaign waits for one (1 job "
                       "queued for it)\n"
                       "a worker of kind cuda connected; the campaign goes on\n");
}

TEST(CampaignEvents, AConcurrencyAboveTheEndpointsIsNamed) {
  auto llm = json::parse(R"({"campaign_concurrency": 8, "endpoints": [
      {"name": "big", "concurrency": 16}, {"name": "small", "concurrency": 4}]})");
  EXPECT_EQ(concurrency_warning(llm, 64, ""),
            "concurrency 64 but endpoint big allows 16: 48 of the campaign's sessions wait for it");
  EXPECT_EQ(concurrency_warning(llm, 0, "small,big"),
            "concurrency 8 but endpoint small allows 4: 4 of the campaign's sessions wait for it");
  EXPECT_EQ(concurrency_warning(llm, 0, ""), "") << "the default 8 fits big's 16";
  EXPECT_EQ(concurrency_warning(llm, 16, "big"), "");
}
