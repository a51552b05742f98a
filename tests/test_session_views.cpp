// The read-only session views over a real store. Sessions are played through the real state
// machine and written with the real checkpoint(), then read back through the store actor
// (apps/session_views) and through the real `opforge serve` and CLI (`sessions`, `show`).

#include "actors/sessions/campaign.hpp"
#include "actors/sessions/op_session.hpp"
#include "actors/sessions/prompt_templates.hpp"
#include "actors/sessions/session_machine.hpp"
#include "actors/store/store.hpp"
#include "apps/session_views.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/system_config.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/cli_test_support.hpp"
#include "tests/test_diff_support.hpp"
#include "tests/test_store_support.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

// Campaign ids as the daemon makes them: they sort in the order the campaigns were created.
const std::string older = "20261122-100000-aaaa";
const std::string newer = "20261122-110000-bbbb";

// A complete answer for `exp` whose kernel scales by `factor`, so that proposals differ.
std::string exp_answer(int factor) {
  return "Here is the kernel.\n```python\n@triton.jit\n"
         "def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n"
         "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
         "    mask = offs < n\n"
         "    x = tl.load(x_ptr + offs, mask=mask)\n"
         "    tl.store(out_ptr + offs, tl.exp(x * " +
         std::to_string(factor) +
         "), mask=mask)\n\n\n"
         "def exp_wrapper(input):\n"
         "    out = torch.empty_like(input)\n"
         "    exp_kernel[(triton.cdiv(input.numel(), 256),)](input, out, input.numel(), "
         "BLOCK=256)\n"
         "    return out\n```\n";
}

// The same for `max` (variant binary), whose wrapper is `max_wrapper`.
const std::string max_answer =
    "```python\n@triton.jit\ndef max_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):\n"
    "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    mask = offs < n\n"
    "    a = tl.load(a_ptr + offs, mask=mask)\n"
    "    b = tl.load(b_ptr + offs, mask=mask)\n"
    "    tl.store(out_ptr + offs, tl.maximum(a, b), mask=mask)\n\n\n"
    "def max_wrapper(input, other):\n"
    "    out = torch.empty_like(input)\n"
    "    max_kernel[(triton.cdiv(input.numel(), 256),)](input, other, out, input.numel(), "
    "BLOCK=256)\n"
    "    return out\n```\n";

const contract::lint_result clean_lint{.ok = true};
const contract::lint_result torch_in_wrapper{.ok = false,
                                             .violations = {{.rule = "no-torch-compute",
                                                             .line = 9,
                                                             .col = 5,
                                                             .text = "torch.exp(input)",
                                                             .hint = "compute it in Triton"}}};
const contract::test_result passed{
    .outcome = contract::outcome::pass, .tests_run = 8, .tests_passed = 8};
const contract::test_result wrong_values{
    .outcome = contract::outcome::accuracy_error,
    .tests_run = 8,
    .tests_passed = 5,
    .failure = contract::test_failure{.dtype = "float32",
                                      .message = "values differ",
                                      .diff = opforge::testing::values_differ(1.5)}};

using store_writer = std::function<void(write_batch)>;

const prompt_templates& templates() {
  static const auto loaded = [] {
    auto t = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
    if (!t)
      throw std::runtime_error{render(t.error())};
    return std::move(*t);
  }();
  return loaded;
}

// Writes campaign `campaign_id` with one operator, then plays `events` through the state machine
// from its new session, writing every step's checkpoint. Returns the final record.
session_record play(const store_writer& write, const std::string& campaign_id, operator_spec spec,
                    uint32_t max_dialogs, uint32_t max_calls,
                    const std::vector<session_event>& events) {
  campaign_spec campaign;
  campaign.campaign_id = campaign_id;
  campaign.endpoint = "replay";
  campaign.concurrency = 1;
  campaign.operators = {spec};
  campaign.budgets.max_dialogs = max_dialogs;
  campaign.budgets.max_calls_per_dialog = max_calls;
  write({{{family::campaigns, campaign_id,
           encode_campaign({campaign, contract::campaign_state::done, {}, 0})}},
         true});
  session_context context{templates(), "WORKED EXAMPLES"};
  int64_t at_ms = 1'700'000'000'000;
  auto result = start(new_session(campaign, spec), context);
  write(checkpoint(result.record, result.transitions, at_ms));
  for (const auto& event : events) {
    result = step(std::move(result.record), event, context);
    EXPECT_FALSE(result.transitions.empty()) << "an event of the script was ignored";
    write(checkpoint(result.record, result.transitions, at_ms += 1000));
  }
  return result.record;
}

const operator_spec exp_op{
    "exp", "", "elementwise", "exp(input) -> Tensor\n\nThe exponential.", {"float32", "bfloat16"}};
const operator_spec max_op{
    "max", "binary", "elementwise", "max(input, other) -> Tensor", {"float32"}};

// Three sessions in two campaigns: `exp` failed in the older one (two answers without code),
// `max/binary` passed there at once, and `exp` passed in the newer one after a lint violation and
// wrong values.
void write_sessions(const store_writer& write) {
  play(write, older, exp_op, 1, 2,
       {llm_answered{"I would use tl.exp.", false, 100, 10},
        llm_answered{"Still thinking.", false, 120, 12}});
  play(
      write, older, max_op, 3, 4,
      {llm_answered{max_answer, false, 200, 80}, lint_finished{clean_lint}, test_finished{passed}});
  play(write, newer, exp_op, 3, 4,
       {llm_answered{exp_answer(1), false, 300, 90}, lint_finished{torch_in_wrapper},
        llm_answered{exp_answer(2), false, 400, 95}, lint_finished{clean_lint},
        test_finished{wrong_values}, llm_answered{exp_answer(3), false, 500, 99},
        lint_finished{clean_lint}, test_finished{passed}});
}

class SessionViews : public ::testing::Test {
protected:
  void SetUp() override {
    auto spawned = spawn_store(sys_, dir_.db(), std::make_shared<metrics>("test"));
    ASSERT_TRUE(spawned) << render(spawned.error());
    store_ = *spawned;
  }

  void TearDown() override { caf::anon_send_exit(store_, caf::exit_reason::user_shutdown); }

  void write(write_batch batch) {
    self_->request(store_, caf::infinite, atom::write_v, std::move(batch))
        .receive([](atom::ok) {}, [](const caf::error& err) { ADD_FAILURE() << render(err); });
  }

  store_writer writer() {
    return [this](write_batch batch) { write(std::move(batch)); };
  }

  json list(const std::string& campaign = "", const std::string& state = "") {
    return list_sessions(sys_, store_, {campaign, state});
  }

  json show(const std::string& op, const std::string& campaign = "") {
    return show_session(sys_, store_, op, campaign);
  }

  test::temp_dir dir_;
  system_config cfg_;
  caf::actor_system sys_{cfg_};
  caf::scoped_actor self_{sys_};
  store_actor store_;
};

std::vector<std::string> column(const json& rows, const char* key) {
  std::vector<std::string> out;
  for (const auto& row : rows)
    out.push_back(row.at(key).get<std::string>());
  return out;
}

// The events of a `show` reply that went from `from` to `to`.
std::vector<json> moves(const json& reply, const std::string& from, const std::string& to) {
  std::vector<json> out;
  for (const auto& e : reply.at("events"))
    if ((from.empty() || e.at("from") == from) && e.at("to") == to)
      out.push_back(e);
  return out;
}

} // namespace

TEST_F(SessionViews, AnEmptyStoreListsNothingAndShowsNothing) {
  EXPECT_EQ(list(), (json{{"ok", true}, {"sessions", json::array()}, {"truncated", false}}));
  EXPECT_EQ(show("exp"), (json{{"ok", false}, {"error", "no session for operator 'exp'"}}));
}

TEST_F(SessionViews, ListsEverySessionInKeyOrderWithItsSummary) {
  write_sessions(writer());
  auto reply = list();
  ASSERT_EQ(reply["ok"], true) << reply.dump();
  EXPECT_EQ(reply["truncated"], false);
  auto sessions = reply["sessions"];
  ASSERT_EQ(sessions.size(), 3u) << reply.dump();
  EXPECT_EQ(column(sessions, "operator"), (std::vector<std::string>{"exp", "max/binary", "exp"}));
  EXPECT_EQ(column(sessions, "campaign_id"), (std::vector<std::string>{older, older, newer}));
  EXPECT_EQ(column(sessions, "state"), (std::vector<std::string>{"FAILED", "SUCCESS", "SUCCESS"}));
  EXPECT_EQ(column(sessions, "last_outcome"),
            (std::vector<std::string>{"format_error", "pass", "pass"}));
  EXPECT_EQ(sessions[0],
            (json{{"session_id", older + "/exp"},
                  {"campaign_id", older},
                  {"operator", "exp"},
                  {"op", "exp"},
                  {"variant", ""},
                  {"state", "FAILED"},
                  {"dialog", 1},
                  {"total_calls", 2},
                  {"faults", 0},
                  {"prompt_tokens", 220},
                  {"completion_tokens", 22},
                  {"last_outcome", "format_error"},
                  {"end_reason", "budget spent: 1 dialogs of at most 2 calls (2 calls in all)"}}));
  EXPECT_EQ(sessions[1]["variant"], "binary");
  EXPECT_EQ(sessions[2]["total_calls"], 3);
  EXPECT_EQ(sessions[2]["end_reason"], "passed 8 tests on float32, bfloat16");
}

TEST_F(SessionViews, FiltersByCampaignAndState) {
  write_sessions(writer());
  EXPECT_EQ(column(list(newer)["sessions"], "session_id"),
            (std::vector<std::string>{newer + "/exp"}));
  EXPECT_EQ(column(list("", "failed")["sessions"], "session_id"),
            (std::vector<std::string>{older + "/exp"}));
  EXPECT_EQ(column(list(older, "SUCCESS")["sessions"], "session_id"),
            (std::vector<std::string>{older + "/max/binary"}));
  EXPECT_EQ(list("20991231-000000-none")["sessions"], json::array());
  // A campaign id is matched whole, never as the start of a longer one.
  EXPECT_EQ(list(older.substr(0, 8))["sessions"], json::array());
  EXPECT_EQ(list("", "PARSE"),
            (json{{"ok", false},
                  {"error",
                   "unknown state 'PARSE' (one of PROMPT, GENERATE, LINT, TEST, OPTIMIZE, SUCCESS, "
                   "FAILED)"}}));
}

TEST_F(SessionViews, ShowTakesTheNewestCampaignThatHasTheOperator) {
  write_sessions(writer());
  auto newest = show("exp");
  ASSERT_EQ(newest["ok"], true) << newest.dump();
  EXPECT_EQ(newest["session"]["campaign_id"], newer);
  EXPECT_EQ(newest["session"]["state"], "SUCCESS");
  EXPECT_EQ(show("exp", older)["session"]["state"], "FAILED");
  // Only the older campaign has max/binary.
  EXPECT_EQ(show("max/binary")["session"]["campaign_id"], older);
}

TEST_F(SessionViews, ShowHasEveryPromptAnswerVerdictAndFeedback) {
  write_sessions(writer());
  auto reply = show("exp", newer);
  ASSERT_EQ(reply["ok"], true) << reply.dump();
  EXPECT_EQ(reply["truncated"], false);
  const auto& events = reply["events"];
  ASSERT_EQ(events.size(), 14u) << events.dump(1);
  for (size_t i = 0; i < events.size(); ++i)
    EXPECT_EQ(events[i]["revision"], i + 1) << "events come in order";
  EXPECT_EQ(events[0]["at_ms"], 1'700'000'000'000);

  auto opened = moves(reply, "PROMPT", "GENERATE");
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0]["detail"], "dialog 1 of 3: initial prompt");
  EXPECT_THAT(opened[0]["content"].get<std::string>(), HasSubstr("The exponential."));

  auto answers = moves(reply, "GENERATE", "PARSE");
  ASSERT_EQ(answers.size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(answers[i]["content"], exp_answer(i + 1)) << "answer " << i + 1 << " in full";

  auto verdicts = moves(reply, "", "FEEDBACK");
  ASSERT_EQ(verdicts.size(), 2u);
  EXPECT_EQ(verdicts[0]["detail"], "lint: lint_violation (no-torch-compute)");
  EXPECT_THAT(verdicts[0]["content"].get<std::string>(), HasSubstr("compute it in Triton"));
  EXPECT_EQ(verdicts[1]["detail"], "test: accuracy_error (float32: values differ)");
  EXPECT_THAT(verdicts[1]["content"].get<std::string>(), HasSubstr("max_abs_error: 1.5"));
  EXPECT_EQ(moves(reply, "TEST", "SUCCESS").at(0)["detail"], "passed 8 tests on float32, bfloat16");
  for (const auto& e : moves(reply, "PARSE", "LINT"))
    EXPECT_EQ(e["content"], "") << "only prompts, answers and feedback carry text";

  const auto& session = reply["session"];
  EXPECT_FALSE(session.contains("schema"));
  EXPECT_EQ(session["dtypes"], (json{"float32", "bfloat16"}));
  EXPECT_EQ(session["budgets"]["max_calls_per_dialog"], 4);
  EXPECT_EQ(session["total_calls"], 3);
  EXPECT_EQ(session["prompt_tokens"], 1200);
  EXPECT_EQ(session["verdict"], json::from_msgpack(contract::codec::to_bytes(passed)));
  EXPECT_EQ(session["verdict"]["outcome"], "pass");
  EXPECT_EQ(session["verdict"]["tests_run"], 8);
  EXPECT_THAT(session["proposal"].get<std::string>(), HasSubstr("tl.exp(x * 3)"));
  EXPECT_EQ(session["proposal"].get<std::string>().find("```"), std::string::npos);
  EXPECT_EQ(column(session["history"], "outcome"),
            (std::vector<std::string>{"lint_violation", "accuracy_error", "pass"}));
  EXPECT_EQ(session["history"][1]["call"], 2);
}

TEST_F(SessionViews, UnknownOperatorsAndCampaignsAreClearErrors) {
  write_sessions(writer());
  EXPECT_EQ(show("nothing")["error"], "no session for operator 'nothing'");
  EXPECT_EQ(show("exp", "20991231-000000-none")["error"],
            "no session for operator 'exp' in campaign 20991231-000000-none");
  // An OpInfo name with variants is not any one of them, but points at them.
  EXPECT_EQ(show("max")["error"], "no session for operator 'max' (sessions exist for max/binary)");
  EXPECT_EQ(show("max", newer)["error"], "no session for operator 'max' in campaign " + newer);
  EXPECT_EQ(show("")["error"], "show needs an operator id: an OpInfo name, or name/variant");
}

TEST_F(SessionViews, UnreadableEntriesAreNamedNotSkipped) {
  write_sessions(writer());
  write({{{family::sessions, session_key(newer, "zeta"), "not a record"}}});
  auto reply = list(newer);
  EXPECT_EQ(reply["ok"], false);
  EXPECT_THAT(reply["error"].get<std::string>(),
              HasSubstr("sessions entry '" + newer + "\\x00zeta' is unreadable: store_corrupt"));

  write({{{family::events, event_key(older + "/exp", 99), "\xc1"}}});
  EXPECT_THAT(show("exp", older)["error"].get<std::string>(),
              HasSubstr("is unreadable: store_corrupt: session event: "));
}

TEST_F(SessionViews, EventsWrittenBeforeContentExistedStillShow) {
  play(writer(), older, exp_op, 1, 2, {});
  auto legacy = json::to_msgpack(json{{"revision", 2},
                                      {"from", "GENERATE"},
                                      {"to", "FAILED"},
                                      {"detail", "cancelled"},
                                      {"at_ms", 5}});
  write({{{family::events, event_key(older + "/exp", 2),
           std::string{legacy.begin(), legacy.end()}}}});
  auto events = show("exp")["events"];
  ASSERT_EQ(events.size(), 2u) << events.dump();
  EXPECT_EQ(events[1], (json{{"revision", 2},
                             {"from", "GENERATE"},
                             {"to", "FAILED"},
                             {"detail", "cancelled"},
                             {"at_ms", 5},
                             {"content", ""}}));
}

// Past one page the reply names where the next starts, and the pages together list each session
// once; `show` searches campaigns past a page too.
TEST_F(SessionViews, ListingsPageThroughManySessionsAndCampaigns) {
  write_sessions(writer());
  auto record = list(newer)["sessions"][0];
  ASSERT_EQ(record["operator"], "exp");
  auto stored = self_->request(store_, caf::infinite, atom::get_v, family::sessions,
                               session_key(newer, "exp"));
  std::string bytes;
  stored.receive([&](stored_value& v) { bytes = v.value.value_or(""); },
                 [](const caf::error& err) { ADD_FAILURE() << render(err); });
  // Copies of one record under many keys of a campaign older than both: a listing reads keys.
  write_batch many;
  constexpr size_t copies = max_listed_sessions + 4;
  for (size_t i = 0; i < copies; ++i) {
    auto campaign = "20261121-" + std::to_string(100000 + i) + "-cccc";
    many.ops.push_back({family::sessions, session_key(campaign, "exp"), bytes});
    many.ops.push_back({family::campaigns, campaign, "unused"});
  }
  write(std::move(many));
  auto first = list();
  ASSERT_EQ(first["ok"], true) << first.dump().substr(0, 200);
  EXPECT_EQ(first["sessions"].size(), max_listed_sessions);
  EXPECT_EQ(first["truncated"], true);
  auto second = list_sessions(sys_, store_, {"", "", first["next"].get<std::string>()});
  EXPECT_EQ(second["truncated"], false);
  EXPECT_EQ(second.count("next"), 0u);
  EXPECT_EQ(first["sessions"].size() + second["sessions"].size(), copies + 3);
  // The last page ends with the three sessions written first, in key order.
  auto last = second["sessions"];
  ASSERT_GE(last.size(), 3u);
  EXPECT_EQ(last[last.size() - 1]["campaign_id"], newer);
  EXPECT_EQ(last[last.size() - 2]["operator"], "max/binary");
  // More campaigns than a page: `show` still finds the newest one with the operator.
  auto shown = show("exp");
  ASSERT_EQ(shown["ok"], true) << shown.dump().substr(0, 200);
  EXPECT_EQ(shown["session"]["campaign_id"], newer);
}

// -- the real daemon and CLI --------------------------------------------------------------------

namespace {

using opforge::cli_testing::CliTest;

class SessionCli : public CliTest {
protected:
  // Writes the sessions straight into the data directory's store, before the daemon opens it.
  void write_store() {
    std::filesystem::create_directories(data);
    auto db = open_rocksdb_store(data / "store");
    ASSERT_TRUE(db) << render(db.error());
    write_sessions([&db](write_batch batch) {
      if (auto err = (*db)->write(batch))
        ADD_FAILURE() << render(err);
    });
    ASSERT_FALSE((*db)->close());
  }

  cli_testing::outcome cli(std::vector<std::string> args) {
    args.insert(args.end(), {"--data-dir", data.string()});
    return run(args);
  }

  void stop() {
    EXPECT_EQ(cli({"shutdown"}).code, 0);
    EXPECT_EQ(wait_for_daemon(), 0);
  }
};

// Where `needle` starts in `text`, failing the test when it is not there.
size_t position(const std::string& text, const std::string& needle) {
  auto at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << "'" << needle << "' not in\n" << text;
  return at;
}

} // namespace

TEST_F(SessionCli, SessionsListsOneAlignedLinePerSession) {
  write_store();
  serve("");
  auto all = cli({"sessions"});
  EXPECT_EQ(all.code, 0) << all.err;
  EXPECT_EQ(all.out,
            "OPERATOR    CAMPAIGN              STATE    DIALOGS  CALLS  LAST OUTCOME  END\n"
            "exp         20261122-100000-aaaa  FAILED   1        2      format_error  budget "
            "spent: 1 dialogs of at most 2 calls (2 calls in all)\n"
            "max/binary  20261122-100000-aaaa  SUCCESS  1        1      pass          passed 8 "
            "tests on float32\n"
            "exp         20261122-110000-bbbb  SUCCESS  1        3      pass          passed 8 "
            "tests on float32, bfloat16\n");
  auto failed = cli({"sessions", "--state", "FAILED"});
  EXPECT_EQ(failed.out.substr(failed.out.find('\n') + 1).rfind("exp ", 0), 0u) << failed.out;
  EXPECT_EQ(std::count(failed.out.begin(), failed.out.end(), '\n'), 2) << failed.out;
  auto none = cli({"sessions", "--campaign", "20991231-000000-none", "--state", "FAILED"});
  EXPECT_EQ(none.code, 0);
  EXPECT_EQ(none.out, "no FAILED sessions in campaign 20991231-000000-none\n");
  auto json_reply = cli({"sessions", "--json", "--campaign", newer});
  ASSERT_EQ(json_reply.code, 0);
  EXPECT_EQ(json::parse(json_reply.out)["sessions"][0]["session_id"], newer + "/exp");
  auto bad_state = cli({"sessions", "--state", "done"});
  EXPECT_EQ(bad_state.code, 1);
  EXPECT_EQ(bad_state.err, "opforge: unknown state 'done' (one of PROMPT, GENERATE, LINT, TEST, "
                           "OPTIMIZE, SUCCESS, FAILED)\n");
  stop();
}

TEST_F(SessionCli, SessionsReadsEveryPage) {
  write_store();
  {
    auto db = open_rocksdb_store(data / "store");
    ASSERT_TRUE(db) << render(db.error());
    auto record = (*db)->get(family::sessions, session_key(newer, "exp"));
    ASSERT_TRUE(record && *record);
    write_batch many;
    for (size_t i = 0; i < max_listed_sessions + 4; ++i)
      many.ops.push_back({family::sessions,
                          session_key("20261121-" + std::to_string(100000 + i), "exp"), **record});
    ASSERT_FALSE((*db)->write(many));
    ASSERT_FALSE((*db)->close());
  }
  serve("");
  auto all = cli({"sessions", "--json"});
  ASSERT_EQ(all.code, 0) << all.err;
  auto reply = json::parse(all.out);
  EXPECT_EQ(reply["sessions"].size(), max_listed_sessions + 4 + 3);
  EXPECT_EQ(reply["truncated"], false);
  stop();
}

TEST_F(SessionCli, ShowPrintsTheWholeDialogInOrder) {
  write_store();
  serve("");
  auto shown = cli({"show", "exp"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  const auto& out = shown.out;
  EXPECT_EQ(out.rfind("operator  exp\n"
                      "campaign  20261122-110000-bbbb\n"
                      "state     SUCCESS: passed 8 tests on float32, bfloat16\n"
                      "dtypes    float32, bfloat16\n"
                      "calls     3 in 1 dialogs (budget 3 dialogs of 4 calls), 0 faults\n"
                      "tokens    1200 prompt, 284 completion\n"
                      "\n"
                      "dialog 1 of 3: initial prompt\n"
                      "  prompt:\n",
                      0),
            0u)
      << out;
  // Each step in order: the prompt, every answer in full, each verdict with its feedback.
  std::vector<std::string> steps{
      "      exp(input) -> Tensor\n",
      "  GENERATE -> PARSE     answer 1 of dialog 1\n      Here is the kernel.\n",
      "      tl.store(out_ptr + offs, tl.exp(x * 1), mask=mask)\n",
      "  PARSE -> LINT         kernels exp_kernel\n",
      "  LINT -> FEEDBACK      lint: lint_violation (no-torch-compute)\n",
      "compute it in Triton",
      "  FEEDBACK -> GENERATE  call 2 of dialog 1\n",
      "      tl.store(out_ptr + offs, tl.exp(x * 2), mask=mask)\n",
      "  LINT -> TEST          lint clean\n",
      "  TEST -> FEEDBACK      test: accuracy_error (float32: values differ)\n",
      "max_abs_error: 1.5",
      "      tl.store(out_ptr + offs, tl.exp(x * 3), mask=mask)\n",
      "  TEST -> SUCCESS       passed 8 tests on float32, bfloat16\n",
      "\naccepted kernel:\n    @triton.jit\n    def exp_kernel(",
      "    tl.store(out_ptr + offs, tl.exp(x * 3), mask=mask)\n"};
  size_t at = 0;
  for (const auto& step : steps) {
    auto found = position(out.substr(at), step);
    if (found == std::string::npos)
      break;
    at += found + step.size();
  }

  auto failed = cli({"show", "exp", "--campaign", older});
  ASSERT_EQ(failed.code, 0) << failed.err;
  position(failed.out, "state     FAILED: budget spent: 1 dialogs of at most 2 calls");
  position(failed.out, "  GENERATE -> PARSE     answer 2 of dialog 1\n      Still thinking.\n");
  position(failed.out, "  PROMPT -> FAILED      budget spent");
  EXPECT_EQ(failed.out.find("accepted kernel"), std::string::npos);

  auto as_json = cli({"show", "max/binary", "--json"});
  ASSERT_EQ(as_json.code, 0);
  auto reply = json::parse(as_json.out);
  EXPECT_EQ(reply["session"]["campaign_id"], older);
  EXPECT_EQ(reply["events"][1]["content"], max_answer);
  stop();
}

TEST_F(SessionCli, UnknownOperatorOrCampaignAndBadUsageSayWhat) {
  serve("");
  auto empty = cli({"sessions"});
  EXPECT_EQ(empty.code, 0);
  EXPECT_EQ(empty.out, "no sessions\n");
  auto unknown = cli({"show", "exp"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.out, "");
  EXPECT_EQ(unknown.err, "opforge: no session for operator 'exp'\n");
  auto elsewhere = cli({"show", "exp", "--campaign", older});
  EXPECT_EQ(elsewhere.code, 1);
  EXPECT_EQ(elsewhere.err,
            "opforge: no session for operator 'exp' in campaign 20261122-100000-aaaa\n");
  auto usage = cli({"show"});
  EXPECT_EQ(usage.code, 2);
  EXPECT_THAT(usage.err, HasSubstr("OP is required"));
  stop();
}
