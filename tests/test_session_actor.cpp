// op_session and campaign over the real store (RocksDB) with scripted endpoint and device manager,
// on CAF's test coordinator: retry delays pass in virtual time.

#include "actors/library/kernels.hpp"
#include "actors/sessions/campaign.hpp"
#include "actors/sessions/op_session.hpp"
#include "actors/store/store.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/llm_messages.hpp"
#include "messages/metrics.hpp"
#include "messages/session_messages.hpp"
#include "messages/wire.hpp"
#include "persistence/keys.hpp"
#include "tests/test_deterministic_support.hpp"
#include "tests/test_session_support.hpp"

#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::testing;
using json = nlohmann::json;

namespace {

std::string good_answer(const std::string& op, int variant = 0) {
  auto wrapper = wrapper_name(op);
  return "Here you go:\n```python\n@triton.jit\ndef k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n"
         "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
         "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + " +
         std::to_string(variant) + ", mask=offs < n)\n\n\ndef " + wrapper +
         "(input):\n    out = torch.empty_like(input)\n    k[(1,)](input, out, input.numel(), "
         "BLOCK=1024)\n    return out\n```\n";
}

using contract::outcome;
using contract::test_failure;

contract::test_result failure_result(outcome o, test_failure failure) {
  return test_verdict(o, 2, 1, std::move(failure));
}

const contract::test_result pass = test_verdict(outcome::pass, 10, 10);

class SessionActor : public DeterministicWithStore {
protected:
  void SetUp() override {
    DeterministicWithStore::SetUp();
    auto templates = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
    ASSERT_TRUE(templates) << render(templates.error());
    services.store = checkpoints;
    services.llm = sys.spawn(scripted_chat, chat);
    services.jobs = sys.spawn(scripted_jobs, jobs);
    services.templates = std::make_shared<const prompt_templates>(std::move(*templates));
    services.examples = "EXAMPLES";
  }

  void TearDown() override {
    caf::anon_send_exit(services.llm, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(services.jobs, caf::exit_reason::user_shutdown);
    DeterministicWithStore::TearDown();
  }

  campaign_spec spec(std::vector<std::string> ops, uint32_t dialogs = 3, uint32_t calls = 10) {
    campaign_spec s;
    s.campaign_id = "c1";
    s.endpoint = "scripted";
    s.model = "scripted-model";
    s.budgets.max_dialogs = dialogs;
    s.budgets.max_calls_per_dialog = calls;
    s.concurrency = 2;
    for (auto& op : ops)
      s.operators.push_back({op,
                             "",
                             "unary",
                             op + "(input) -> Tensor",
                             {"float32", "int64"},
                             {"aten::" + op, "aten::" + op + ".out"}});
    return s;
  }

  session_record record(const std::string& op, uint32_t dialogs = 3, uint32_t calls = 10) {
    auto s = spec({op}, dialogs, calls);
    return new_session(s, s.operators[0]);
  }

  session_summary run(session_record r) {
    auto session = sys.spawn(op_session, std::move(r), services);
    auto pending = self->request(session, caf::infinite, atom::run_v);
    return reply_to<session_summary>(pending);
  }

  std::optional<std::string> stored(family f, const std::string& key) {
    std::optional<std::string> value;
    store_self->request(store, caf::infinite, atom::get_v, f, key)
        .receive([&](stored_value& v) { value = std::move(v.value); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return value;
  }

  session_record stored_record(const std::string& op) {
    auto bytes = stored(family::sessions, session_key("c1", op));
    EXPECT_TRUE(bytes);
    auto decoded = decode_record(bytes ? *bytes : std::string{});
    EXPECT_TRUE(decoded) << render(decoded.error());
    return decoded ? *decoded : session_record{};
  }

  std::vector<key_value> scan(family f, const std::string& prefix) {
    std::vector<key_value> entries;
    store_self->request(store, caf::infinite, atom::scan_v, f, prefix, uint64_t{100000})
        .receive([&](std::vector<key_value>& kv) { entries = std::move(kv); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return entries;
  }

  std::shared_ptr<chat_script> chat = std::make_shared<chat_script>();
  std::shared_ptr<job_script> jobs = std::make_shared<job_script>();
  session_services services;
};

} // namespace

TEST_F(SessionActor, EveryFeedbackPathThenSuccessCheckpointedWithTheKernel) {
  chat->add("exp", chat_outcome::ok, "I think tl.exp is the way.");
  for (int i = 1; i <= 8; ++i)
    chat->add("exp", chat_outcome::ok, good_answer("exp", i));
  jobs->add_lint("exp",
                 done(contract::lint_result{
                     .ok = false,
                     .violations = {{.rule = "no_import",
                                     .line = 1,
                                     .col = 1,
                                     .text = "import os",
                                     .hint = "the harness provides torch, triton and tl"}}}));
  jobs->add_test("exp", done(failure_result(outcome::compile_error, {.compile_log = "LOG-MARK"})));
  jobs->add_test("exp", done(failure_result(outcome::runtime_error, {.message = "RUNTIME-MARK"})));
  jobs->add_test(
      "exp", done(failure_result(outcome::crash, {.message = "died", .cuda_error = "CUDA-MARK"})));
  jobs->add_test("exp",
                 done(failure_result(outcome::accuracy_error,
                                     {.diff = contract::tensor_diff{.reason = "DIFF-MARK"}})));
  jobs->add_test("exp", done(failure_result(outcome::timeout, {.message = "TIMEOUT-MARK"})));
  jobs->add_test("exp", done(failure_result(outcome::cheat_detected, {.message = "CHEAT-MARK"})));
  jobs->add_test("exp", done(pass));

  auto summary = run(record("exp"));
  EXPECT_EQ(summary.state, session_state::success);
  EXPECT_EQ(summary.llm_calls, 9u);
  EXPECT_EQ(summary.dialogs, 1u);
  EXPECT_EQ(summary.prompt_tokens, 900u);
  // The last request carried every feedback, in order, in one dialog.
  auto last = chat->last_request("exp");
  std::string dialog;
  for (const auto& m : last.messages)
    dialog += m.content;
  size_t at = 0;
  for (auto mark : {"it contains no Python code", "import os", "LOG-MARK", "RUNTIME-MARK",
                    "CUDA-MARK", "DIFF-MARK", "TIMEOUT-MARK", "CHEAT-MARK"}) {
    auto found = dialog.find(mark, at);
    ASSERT_NE(found, std::string::npos) << mark;
    at = found;
  }
  EXPECT_EQ(last.messages.size(), 17u);
  // The record, every transition and the kernel with its provenance are in the store.
  auto r = stored_record("exp");
  EXPECT_EQ(r.state, session_state::success);
  EXPECT_EQ(scan(family::events, prefix_of("c1/exp")).size(), r.revision);
  ASSERT_FALSE(summary.kernel_key.empty());
  auto kernel = stored(family::kernels, summary.kernel_key);
  ASSERT_TRUE(kernel);
  auto entry = json::from_msgpack(*kernel);
  EXPECT_EQ(entry["op"], "exp");
  EXPECT_EQ(entry["campaign_id"], "c1");
  EXPECT_EQ(entry["endpoint"], "scripted");
  EXPECT_EQ(entry["model"], "scripted-model");
  EXPECT_EQ(entry["llm_calls"], 9);
  EXPECT_EQ(entry["dialogs"], 1);
  EXPECT_EQ(entry["tests_passed"], 10);
  EXPECT_EQ(entry["toolchain"], "scripted-toolchain");
  EXPECT_EQ(entry["dtypes"], json({"float32", "int64"}));
  EXPECT_NE(entry["source"].get<std::string>().find("def exp_wrapper(input):"), std::string::npos);
  EXPECT_EQ(entry["aten_overloads"], json({"aten::exp", "aten::exp.out"}));
  EXPECT_EQ(entry["origin"], "campaign");
  EXPECT_EQ(entry["toolchain_versions"], json({{"torch", "scripted-torch"}}));
  // Its acceptance is its first validation, stored in the same checkpoint.
  auto validation = stored(family::validations,
                           validation_key(entry["hash"].get<std::string>(), "scripted-toolchain"));
  ASSERT_TRUE(validation);
  auto proof = decode_proof(*validation);
  ASSERT_TRUE(proof) << render(proof.error());
  EXPECT_EQ(proof->outcome, contract::outcome::pass);
  EXPECT_EQ(proof->tests_passed, 10);
  EXPECT_EQ(proof->toolchain, (std::map<std::string, std::string>{{"torch", "scripted-torch"}}));
  EXPECT_EQ(proof->validated_at_ms, entry["accepted_at_ms"].get<int64_t>());
}

TEST_F(SessionActor, AKernelIsRecordedForTheDtypesItPassed) {
  chat->add("exp", chat_outcome::ok, good_answer("exp"));
  auto verdict = pass;
  verdict.per_dtype = {
      {"float32", {.run = 10, .passed = 10, .outcome = contract::dtype_outcome::pass}},
      {"int64",
       {.outcome = contract::dtype_outcome::skipped,
        .reason = "exp has no CPU reference for int64"}}};
  jobs->add_test("exp", done(verdict));
  auto summary = run(record("exp"));
  ASSERT_EQ(summary.state, session_state::success) << summary.end_reason;
  auto kernel = stored(family::kernels, summary.kernel_key);
  ASSERT_TRUE(kernel);
  auto entry = json::from_msgpack(*kernel);
  EXPECT_EQ(entry["dtypes"], json::array({"float32"}));
  EXPECT_EQ(entry["skipped_dtypes"], json({{"int64", "exp has no CPU reference for int64"}}));
}

TEST_F(SessionActor, FaultsAreRetriedAndNeverCounted) {
  chat->add("exp", chat_outcome::endpoint_fault, "HTTP 503");
  chat->add("exp", chat_outcome::ok, good_answer("exp"));
  jobs->add_test("exp",
                 job_reply{contract::job_status::failed, {}, "worker could not import torch", {}});
  jobs->add_test("exp", job_reply{contract::job_status::done,
                                  {},
                                  {},
                                  caf::make_error(errc::worker_lost, "worker died")});
  jobs->add_test("exp", done(pass));
  auto summary = run(record("exp", 1, 1));
  EXPECT_EQ(summary.state, session_state::success) << summary.end_reason;
  EXPECT_EQ(summary.llm_calls, 1u);
  EXPECT_EQ(summary.faults, 3u);
  EXPECT_EQ(chat->calls("exp"), 2u);
  EXPECT_EQ(jobs->count("test"), 3u);
}

TEST_F(SessionActor, LongLogsGoThroughTheSummarizer) {
  services.summarizer = sys.spawn([]() -> summarizer_actor::behavior_type {
    return {[](atom::summarize, summary_request& request) {
      return summary_result{"SUMMARY of " + std::to_string(request.log.size()) + " chars",
                            summary_method::deterministic,
                            request.log.size(),
                            {},
                            {}};
    }};
  });
  services.summarize_over_chars = 400;
  for (int i = 1; i <= 4; ++i)
    chat->add("exp", chat_outcome::ok, good_answer("exp", i));
  jobs->add_test(
      "exp", done(failure_result(outcome::compile_error, {.compile_log = std::string(5000, 'x')})));
  jobs->add_test(
      "exp", done(failure_result(outcome::runtime_error,
                                 {.message = "RUNTIME-MARK", .backtrace = std::string(401, 'y')})));
  jobs->add_test("exp", done(failure_result(outcome::crash, {.message = "died",
                                                             .backtrace = std::string(400, 'z')})));
  jobs->add_test("exp", done(pass));
  EXPECT_EQ(run(record("exp")).state, session_state::success);
  // The feedback prompts: the user messages that follow an answer.
  std::vector<std::string> feedback;
  const auto& messages = chat->last_request("exp").messages;
  for (size_t i = 1; i < messages.size(); ++i)
    if (messages[i - 1].role == "assistant")
      feedback.push_back(messages[i].content);
  ASSERT_EQ(feedback.size(), 3u);
  EXPECT_NE(feedback[0].find("SUMMARY of 5000 chars"), std::string::npos);
  EXPECT_EQ(feedback[0].find("xxxxxxxxxx"), std::string::npos);
  EXPECT_NE(feedback[1].find("SUMMARY of 401 chars"), std::string::npos);
  EXPECT_NE(feedback[1].find("RUNTIME-MARK"), std::string::npos);
  EXPECT_EQ(feedback[1].find("yyyyyyyyyy"), std::string::npos);
  // A log of exactly the threshold is fed back as it is.
  EXPECT_NE(feedback[2].find(std::string(400, 'z')), std::string::npos);
  caf::anon_send_exit(services.summarizer, caf::exit_reason::user_shutdown);
}

// With acceptance.confirmations 2 a pass is tested again on another host before the kernel is
// accepted; a host that fails it is fed back like any verdict, saying that the hosts disagreed.
TEST_F(SessionActor, APassIsConfirmedOnAnotherHostAndDisagreementIsReported) {
  services.confirmations = 2;
  auto on = [](const std::string& host, const contract::test_result& verdict) {
    auto reply = done(verdict);
    reply.host = host;
    return reply;
  };
  chat->add("exp", chat_outcome::ok, good_answer("exp", 1));
  chat->add("exp", chat_outcome::ok, good_answer("exp", 2));
  jobs->add_test("exp", on("a", pass));
  jobs->add_test("exp", on("b", failure_result(outcome::runtime_error, {.message = "max abs 3"})));
  jobs->add_test("exp", on("b", pass));
  jobs->add_test("exp", on("c", pass));
  auto summary = run(record("exp"));
  EXPECT_EQ(summary.state, session_state::success) << summary.end_reason;
  EXPECT_EQ(summary.llm_calls, 2u);
  auto feedback = chat->last_request("exp").messages.back().content;
  EXPECT_NE(feedback.find("the hosts disagree: it passed on a, but on b: max abs 3"),
            std::string::npos)
      << feedback;
  std::vector<std::vector<std::string>> avoided;
  {
    std::lock_guard guard{jobs->mutex};
    for (const auto& job : jobs->jobs)
      if (job.kind == contract::job_kind::test)
        avoided.push_back(job.avoid_hosts);
  }
  EXPECT_EQ(avoided, (std::vector<std::vector<std::string>>{{}, {"a"}, {}, {"b"}}));
  EXPECT_EQ(stored_record("exp").verdict.hosts.confirmed_on, (std::vector<std::string>{"b", "c"}));
}

TEST_F(SessionActor, ContextExhaustionStartsANewDialogFromTheLatestKernel) {
  chat->add("exp", chat_outcome::ok, good_answer("exp", 41));
  chat->add("exp", chat_outcome::context_exhausted, "maximum context length is 8192 tokens");
  chat->add("exp", chat_outcome::ok, good_answer("exp", 42));
  jobs->add_test("exp", done(failure_result(outcome::accuracy_error, {.diff = values_differ(1)})));
  jobs->add_test("exp", done(pass));
  auto summary = run(record("exp"));
  EXPECT_EQ(summary.state, session_state::success);
  EXPECT_EQ(summary.dialogs, 2u);
  EXPECT_EQ(summary.llm_calls, 2u);
  auto last = chat->last_request("exp");
  ASSERT_EQ(last.messages.size(), 1u);
  EXPECT_NE(last.messages[0].content.find("existing Triton implementation"), std::string::npos);
  EXPECT_NE(last.messages[0].content.find("+ 41"), std::string::npos);
}

TEST_F(SessionActor, BudgetExhaustionFailsWithoutAKernel) {
  for (int i = 0; i < 4; ++i)
    chat->add("exp", chat_outcome::ok, "no code");
  auto summary = run(record("exp", 2, 2));
  EXPECT_EQ(summary.state, session_state::failed);
  EXPECT_EQ(summary.end_reason, "budget spent: 2 dialogs of at most 2 calls (4 calls in all)");
  EXPECT_TRUE(summary.kernel_key.empty());
  EXPECT_TRUE(scan(family::kernels, "").empty());
  EXPECT_EQ(stored_record("exp").state, session_state::failed);
}

TEST_F(SessionActor, ResumedSessionNeverAsksForARecordedAnswerAgain) {
  chat->add("exp", chat_outcome::ok, good_answer("exp"));
  // The test job is held: the session is killed while it waits for the verdict.
  auto first = sys.spawn(op_session, record("exp"), services);
  self->send(first, atom::run_v);
  run_until_idle();
  ASSERT_NE(jobs->count("test"), 0u);
  self->send_exit(first, caf::exit_reason::kill);
  run_until_idle();
  auto r = stored_record("exp");
  ASSERT_EQ(r.state, session_state::test);
  jobs->add_test("exp", done(pass));
  // Restored from the store, it asks for the test again and never for the answer.
  auto summary = run(r);
  EXPECT_EQ(summary.state, session_state::success);
  EXPECT_EQ(chat->calls("exp"), 1u);
  EXPECT_EQ(summary.llm_calls, 1u);
  EXPECT_EQ(jobs->count("lint"), 1u);
  EXPECT_EQ(jobs->count("test"), 2u); // the one the killed session waited for, and its repeat
}

TEST_F(SessionActor, CancelEndsTheSessionAndCancelsItsRequest) {
  // Nothing scripted: the chat request is held.
  auto session = sys.spawn(op_session, record("exp"), services);
  auto pending = self->request(session, caf::infinite, atom::run_v);
  run_until_idle();
  ASSERT_NE(chat->calls("exp"), 0u);
  self->send(session, atom::cancel_v);
  auto summary = reply_to<session_summary>(pending);
  EXPECT_EQ(summary.state, session_state::failed);
  EXPECT_EQ(summary.end_reason, "cancelled: by request");
  std::lock_guard guard{chat->mutex};
  ASSERT_EQ(chat->cancelled.size(), 1u);
  EXPECT_EQ(chat->cancelled[0], chat->requests[0].request_id);
}

TEST_F(SessionActor, CampaignRunsEveryOperatorAndResumesWhatWasUnfinished) {
  for (auto op : {"abs", "neg", "sigmoid"}) {
    chat->add(op, chat_outcome::ok, good_answer(op));
    jobs->add_test(op,
                   done(op == std::string{"neg"} ? failure_result(outcome::timeout, {}) : pass));
  }
  chat->add("neg", chat_outcome::ok, good_answer("neg", 2));
  jobs->add_test("neg", done(pass));
  auto s = spec({"abs", "neg", "sigmoid"});
  auto c = sys.spawn(campaign, s, services, std::vector<session_record>{});
  auto pending = self->request(c, caf::infinite, atom::run_v);
  auto status = reply_to<campaign_status>(pending);
  EXPECT_EQ(status.state, contract::campaign_state::done);
  EXPECT_EQ(status.operators, 3u);
  EXPECT_EQ(status.succeeded, 3u);
  EXPECT_EQ(status.failed, 0u);
  EXPECT_EQ(status.llm_calls, 4u);
  EXPECT_EQ(status.finished.size(), 3u);
  auto stored_campaign = stored(family::campaigns, "c1");
  ASSERT_TRUE(stored_campaign);
  auto decoded = decode_campaign(*stored_campaign);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->state, contract::campaign_state::done);
  EXPECT_EQ(decoded->spec.operators.size(), 3u);
  // Restored with its finished sessions, a campaign counts them and runs nothing again.
  std::vector<session_record> restored;
  for (const auto& kv : scan(family::sessions, prefix_of("c1")))
    restored.push_back(*decode_record(kv.value));
  ASSERT_EQ(restored.size(), 3u);
  auto again = sys.spawn(campaign, s, services, restored);
  auto resumed = self->request(again, caf::infinite, atom::run_v);
  status = reply_to<campaign_status>(resumed);
  EXPECT_EQ(status.succeeded, 3u);
  EXPECT_EQ(chat->calls("neg"), 2u);
}

// A repair is tested where its kernel regressed: every test job of the campaign's sessions names
// the campaign's toolchain; lint jobs, which need no device, do not.
TEST_F(SessionActor, TestJobsArePinnedToTheCampaignsFingerprint) {
  services.fingerprint = "1a1c5f2a38e568a5";
  chat->add("abs", chat_outcome::ok, good_answer("abs"));
  jobs->add_test("abs", done(failure_result(outcome::timeout, {})));
  chat->add("abs", chat_outcome::ok, good_answer("abs", 1));
  jobs->add_test("abs", done(pass));
  auto summary = run(record("abs"));
  EXPECT_EQ(summary.state, session_state::success);
  std::lock_guard guard{jobs->mutex};
  size_t tests = 0;
  for (const auto& job : jobs->jobs) {
    EXPECT_EQ(job.fingerprint, job.kind == contract::job_kind::test ? "1a1c5f2a38e568a5" : "")
        << job.id;
    tests += job.kind == contract::job_kind::test;
  }
  EXPECT_EQ(tests, 2u);
}

TEST_F(SessionActor, CancelledCampaignCancelsItsRunningSessionAndStartsNoOther) {
  auto s = spec({"abs", "neg", "sigmoid"});
  s.concurrency = 1;
  auto c = sys.spawn(campaign, s, services, std::vector<session_record>{});
  auto pending = self->request(c, caf::infinite, atom::run_v);
  run_until_idle();
  ASSERT_NE(chat->calls("abs"), 0u); // nothing scripted: the first session waits for its answer
  self->send(c, atom::cancel_v);
  auto status = reply_to<campaign_status>(pending);
  EXPECT_EQ(status.state, contract::campaign_state::cancelled);
  ASSERT_EQ(status.finished.size(), 1u);
  EXPECT_EQ(status.finished[0].end_reason, "cancelled: by request");
  EXPECT_EQ(status.failed, 1u);
  EXPECT_EQ(chat->calls("neg") + chat->calls("sigmoid"), 0u);
  auto stored_campaign = stored(family::campaigns, "c1");
  ASSERT_TRUE(stored_campaign);
  EXPECT_EQ(decode_campaign(*stored_campaign)->state, contract::campaign_state::cancelled);
}
