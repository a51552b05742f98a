// The budgets that stop waste: campaigns.same_failure_limit (a dialog whose answers fail the same
// way N times in a row ends early, a session whose dialogs all did ends) and campaign_spec's
// max_tokens (no LLM call starts once the campaign's tokens reach it).
// - the session machine alone, and resumed from its checkpoint in a real RocksDB store;
// - campaigns over the real store and the real llm_endpoint speaking HTTP to the replay server,
//   serving a cassette of identical non-answers written here.

#include "actors/llm/llm_endpoint.hpp"
#include "actors/llm/replay_launcher.hpp"
#include "actors/sessions/campaign.hpp"
#include "actors/sessions/repeated_failure.hpp"
#include "actors/store/store.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/system_config.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/test_store_support.hpp"

#include <fstream>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace opforge;
using json = nlohmann::json;

namespace {

const std::string non_answer = "I would rather not write code today.";

std::string answer(int n) {
  return "```python\n@triton.jit\ndef neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n"
         "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
         "    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=offs < n) + " +
         std::to_string(n) +
         ", mask=offs < n)\n\n\ndef neg_wrapper(input):\n    out = torch.empty_like(input)\n"
         "    neg_kernel[(1,)](input, out, input.numel(), BLOCK=1024)\n    return out\n```\n";
}

contract::test_result failed(contract::outcome outcome, std::string message) {
  return {.outcome = outcome,
          .tests_run = 3,
          .tests_passed = 1,
          .failure = contract::test_failure{.dtype = "float32", .message = std::move(message)}};
}

session_record fresh(uint32_t limit) {
  session_record r;
  r.session_id = "c1/neg";
  r.campaign_id = "c1";
  r.op = "neg";
  r.wrapper = "neg_wrapper";
  r.dtypes = {"float32"};
  r.budgets.max_dialogs = 3;
  r.budgets.max_calls_per_dialog = 15;
  r.budgets.same_failure_limit = limit;
  return r;
}

class RepeatedFailure : public ::testing::Test {
protected:
  RepeatedFailure() {
    auto loaded = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
    EXPECT_TRUE(loaded) << render(loaded.error());
    templates = std::move(*loaded);
  }

  void keep(step_result result) {
    EXPECT_FALSE(result.transitions.empty()) << "the event was ignored";
    for (auto& t : result.transitions)
      transitions.push_back(std::move(t));
    record = std::move(result.record);
  }

  void feed(const session_event& event) { keep(step(record, event, context)); }

  // One answer that parses and lints clean, and its test verdict.
  void tested(int n, const contract::test_result& verdict) {
    feed(llm_answered{answer(n), false, 0, 0});
    feed(lint_finished{contract::lint_result{.ok = true}});
    feed(test_finished{verdict});
  }

  bool any_transition(const std::string& detail) const {
    return std::any_of(transitions.begin(), transitions.end(),
                       [&](const auto& t) { return t.detail == detail; });
  }

  prompt_templates templates;
  session_context context{templates, "EXAMPLES"};
  session_record record;
  std::vector<session_transition> transitions;
};

} // namespace

TEST_F(RepeatedFailure, IdenticalNonAnswersEndEachDialogAtTheLimitAndThenTheSession) {
  record = fresh(4);
  keep(start(record, context));
  for (int call = 1; call <= 12; ++call) {
    ASSERT_EQ(record.state, session_state::generate) << "call " << call;
    EXPECT_EQ(record.dialog, static_cast<uint32_t>((call - 1) / 4 + 1)) << "call " << call;
    feed(llm_answered{non_answer, false, 0, 0});
  }
  EXPECT_EQ(record.state, session_state::failed);
  EXPECT_EQ(record.total_calls, 12u);
  EXPECT_EQ(record.end_reason.rfind("repeated failure: format_error x 4 in each of 3 dialogs (12 "
                                    "calls in all; the last: format, ",
                                    0),
            0u)
      << record.end_reason;
  EXPECT_TRUE(any_transition("dialog 1 failed the same way 4 times in a row"));
  EXPECT_TRUE(any_transition("dialog 2 failed the same way 4 times in a row"));
}

TEST_F(RepeatedFailure, OffTheSessionSpendsItsWholeBudget) {
  record = fresh(0);
  keep(start(record, context));
  while (record.state == session_state::generate)
    feed(llm_answered{non_answer, false, 0, 0});
  EXPECT_EQ(record.total_calls, 45u);
  EXPECT_EQ(record.end_reason, "budget spent: 3 dialogs of at most 15 calls (45 calls in all)");
}

TEST_F(RepeatedFailure, OnlyTheSameOutcomeAndDetailInARowCount) {
  using contract::outcome;
  record = fresh(3);
  keep(start(record, context));
  auto accuracy = failed(outcome::accuracy_error, "values differ");
  tested(1, accuracy);
  tested(2, accuracy);
  tested(3, failed(outcome::runtime_error, "IndexError: out of range")); // breaks the run
  tested(4, accuracy);
  tested(5, accuracy);
  tested(6, failed(outcome::accuracy_error, "values differ at 7 elements")); // another detail
  tested(7, accuracy);
  tested(8, accuracy);
  EXPECT_EQ(same_failure_streak(record, 1), 2u);
  EXPECT_EQ(record.dialog, 1u);
  tested(9, accuracy);
  EXPECT_EQ(record.dialog, 2u) << "three accuracy failures on float32 in a row";
  EXPECT_EQ(record.calls_in_dialog, 0u);
  // The new dialog starts from the latest kernel; a pass ends it as always.
  EXPECT_NE(record.messages[0].content.find("+ 9, mask"), std::string::npos);
  tested(10, contract::test_result{.outcome = outcome::pass, .tests_run = 3, .tests_passed = 3});
  EXPECT_EQ(record.state, session_state::success);
}

TEST_F(RepeatedFailure, ADialogThatDidNotRepeatMakesTheEndBudgetSpent) {
  record = fresh(2);
  record.budgets.max_dialogs = 2;
  record.budgets.max_calls_per_dialog = 3;
  keep(start(record, context));
  tested(1, failed(contract::outcome::accuracy_error, "values differ"));
  tested(2, failed(contract::outcome::runtime_error, "IndexError"));
  tested(3, failed(contract::outcome::accuracy_error, "values differ"));
  ASSERT_EQ(record.dialog, 2u) << "the first dialog used its 3 calls";
  feed(llm_answered{non_answer, false, 0, 0});
  feed(llm_answered{non_answer, false, 0, 0});
  EXPECT_EQ(record.state, session_state::failed);
  EXPECT_EQ(record.end_reason, "budget spent: 2 dialogs of at most 3 calls (5 calls in all)");
}

// The streak is read from the recorded history, which every checkpoint stores with the state:
// a session resumed from RocksDB after a crash goes on counting where it stood.
TEST_F(RepeatedFailure, ResumedFromTheStoreItCountsOnWhereItStood) {
  test::temp_dir dir;
  record = fresh(4);
  keep(start(record, context));
  feed(llm_answered{non_answer, false, 0, 0});
  feed(llm_answered{non_answer, false, 0, 0});
  feed(llm_answered{non_answer, false, 0, 0});
  {
    auto db = open_rocksdb_store(dir.db());
    ASSERT_TRUE(db) << render(db.error());
    ASSERT_FALSE((*db)->write(checkpoint(record, transitions, 1)));
    ASSERT_FALSE((*db)->close());
  }
  auto db = open_rocksdb_store(dir.db());
  ASSERT_TRUE(db) << render(db.error());
  auto bytes = (*db)->get(family::sessions, session_key("c1", "neg"));
  ASSERT_TRUE(bytes && *bytes) << "the checkpoint is stored";
  auto restored = decode_record(**bytes);
  ASSERT_TRUE(restored) << render(restored.error());
  EXPECT_EQ(restored->budgets.same_failure_limit, 4u);
  EXPECT_EQ(same_failure_streak(*restored, 1), 3u);
  record = std::move(*restored);
  transitions.clear();
  feed(llm_answered{non_answer, false, 0, 0});
  EXPECT_EQ(record.dialog, 2u) << "the fourth identical failure, the first after the restart";
  EXPECT_TRUE(any_transition("dialog 1 failed the same way 4 times in a row"));
  EXPECT_FALSE((*db)->close());
}

namespace {

// Campaigns over the real store, the real HTTP client and the replay server. Every answer of
// the cassette is the same non-answer and reports 1000 prompt and 20 completion tokens.
class WasteBudgets : public ::testing::Test {
protected:
  void SetUp() override {
    auto cassette = dir.path() / "non-answers.jsonl";
    {
      std::ofstream out{cassette};
      for (auto op : {"neg", "abs"})
        for (int i = 0; i < 45; ++i) {
          json response{
              {"id", std::string{op} + "-" + std::to_string(i)},
              {"object", "chat.completion"},
              {"model", "waste-test"},
              {"choices",
               json::array({{{"index", 0},
                             {"finish_reason", "stop"},
                             {"message", {{"role", "assistant"}, {"content", non_answer}}}}})},
              {"usage", {{"prompt_tokens", 1000}, {"completion_tokens", 20}}}};
          out << json{{"index", i},
                      {"label", "written by test_budgets, not from a model"},
                      {"operator", op},
                      {"status", 200},
                      {"response", response}}
                     .dump()
              << '\n';
        }
    }
    replay_server::options opts;
    opts.python = OPFORGE_PYTHON;
    opts.worker_dir = std::string{OPFORGE_SOURCE_DIR} + "/worker";
    opts.cassette = cassette.string();
    opts.hit_log = (dir.path() / "hits.jsonl").string();
    auto started = replay_server::start(opts);
    ASSERT_TRUE(started) << render(started.error());
    server = std::move(*started);
    auto spawned = spawn_store(sys, dir.db(), telemetry);
    ASSERT_TRUE(spawned) << render(spawned.error());
    store = *spawned;
    endpoint_config endpoint;
    endpoint.name = "replay";
    endpoint.kind = endpoint_kind::replay;
    server->serve(endpoint);
    auto templates = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
    ASSERT_TRUE(templates) << render(templates.error());
    services.store = store;
    services.llm = sys.spawn(llm_endpoint, endpoint, telemetry);
    services.templates = std::make_shared<const prompt_templates>(std::move(*templates));
    services.examples = "EXAMPLES";
    spec.campaign_id = "waste";
    spec.endpoint = "replay";
    spec.concurrency = 1;
    spec.budgets.max_dialogs = 3;
    spec.budgets.max_calls_per_dialog = 15;
    spec.budgets.context_window_tokens = endpoint.context_window;
    spec.budgets.reply_reserve_tokens = endpoint.max_tokens;
  }

  void TearDown() override {
    if (services.llm)
      self->send_exit(services.llm, caf::exit_reason::user_shutdown);
    if (store)
      self->request(store, caf::infinite, atom::shutdown_v)
          .receive([](atom::ok) {}, [](const caf::error&) {});
  }

  void add(const std::string& op) {
    spec.operators.push_back({op, "", "elementwise", op + "(input) -> Tensor", {"float32"}});
  }

  campaign_status run_campaign() {
    campaign_status status;
    self->request(sys.spawn(campaign, spec, services, std::vector<session_record>{}), caf::infinite,
                  atom::run_v)
        .receive([&](campaign_status& s) { status = std::move(s); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return status;
  }

  session_record stored_session(const std::string& op) {
    session_record record;
    self->request(store, caf::infinite, atom::get_v, family::sessions, session_key("waste", op))
        .receive(
            [&](stored_value& v) {
              auto decoded = decode_record(v.value.value_or(""));
              EXPECT_TRUE(decoded) << op << ": " << render(decoded.error());
              if (decoded)
                record = std::move(*decoded);
            },
            [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return record;
  }

  stored_campaign stored_campaign_record() {
    stored_campaign out;
    self->request(store, caf::infinite, atom::get_v, family::campaigns, std::string{"waste"})
        .receive(
            [&](stored_value& v) {
              auto decoded = decode_campaign(v.value.value_or(""));
              EXPECT_TRUE(decoded) << render(decoded.error());
              if (decoded)
                out = std::move(*decoded);
            },
            [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return out;
  }

  size_t answers_served() {
    std::ifstream hits{(dir.path() / "hits.jsonl").string()};
    size_t served = 0;
    for (std::string line; std::getline(hits, line);)
      served += !line.empty();
    return served;
  }

  test::temp_dir dir;
  std::unique_ptr<replay_server> server;
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::shared_ptr<metrics> telemetry = std::make_shared<metrics>("budgets");
  store_actor store;
  session_services services;
  campaign_spec spec;
};

} // namespace

TEST_F(WasteBudgets, IdenticalNonAnswersStopAfterTheLimitInEachDialogNotTheWholeBudget) {
  spec.budgets.same_failure_limit = 4;
  add("neg");
  auto status = run_campaign();
  ASSERT_EQ(status.finished.size(), 1u);
  const auto& neg = status.finished[0];
  EXPECT_EQ(neg.state, session_state::failed);
  EXPECT_EQ(neg.llm_calls, 12u);
  EXPECT_EQ(neg.end_reason.rfind("repeated failure: format_error x 4 in each of 3 dialogs", 0), 0u)
      << neg.end_reason;
  EXPECT_EQ(answers_served(), 12u) << "12 HTTP answers, not 45";
  auto record = stored_session("neg");
  EXPECT_EQ(record.end_reason, neg.end_reason) << "the checkpoint says why it stopped";
  EXPECT_EQ(record.history.size(), 12u);
  EXPECT_EQ(status.prompt_tokens, 12000u);
}

TEST_F(WasteBudgets, WithTheRuleOffTheSameCassetteSpendsAllFortyFiveCalls) {
  spec.budgets.same_failure_limit = 0;
  add("neg");
  auto status = run_campaign();
  ASSERT_EQ(status.finished.size(), 1u);
  EXPECT_EQ(status.finished[0].llm_calls, 45u);
  EXPECT_EQ(answers_served(), 45u);
}

TEST_F(WasteBudgets, ATokenBudgetStopsNewCallsAndEverySessionSaysWhy) {
  spec.budgets.same_failure_limit = 0;
  spec.max_tokens = 3000;
  add("neg");
  add("abs");
  auto status = run_campaign();
  EXPECT_EQ(status.state, contract::campaign_state::done);
  EXPECT_EQ(status.failed, 2u);
  ASSERT_EQ(status.finished.size(), 2u);
  const auto reason = "token budget spent: 3060 tokens used of the campaign's 3000";
  // neg's three answers reach the budget; abs, started after, never asks.
  EXPECT_EQ(status.finished[0].op, "neg");
  EXPECT_EQ(status.finished[0].llm_calls, 3u);
  EXPECT_EQ(status.finished[0].end_reason, reason);
  EXPECT_EQ(status.finished[1].op, "abs");
  EXPECT_EQ(status.finished[1].llm_calls, 0u);
  EXPECT_EQ(status.finished[1].end_reason, reason);
  EXPECT_EQ(answers_served(), 3u);
  EXPECT_EQ(status.error, reason) << "the campaign reports it";
  auto stored = stored_campaign_record();
  EXPECT_EQ(stored.error, reason);
  EXPECT_EQ(stored.spec.max_tokens, 3000u);
  EXPECT_EQ(stored_session("abs").end_reason, reason);
}
