// The demo cassette end to end: a campaign over the real store, the real llm_endpoint actor
// speaking HTTP to the replay server serving config/demo/cassette.jsonl, and either
// - a scripted device manager whose verdicts are what the real linter and harness said about each
//   demo answer on the interpreter (config/demo/README.md), or
// - the real device manager with real Python workers (a linter and an interpreter device), and
//   there also with the real summarizer condensing the runtime traceback of a failed answer.

#include "actors/fleet/spawn_device_manager.hpp"
#include "actors/library/kernels.hpp"
#include "actors/llm/llm_endpoint.hpp"
#include "actors/llm/replay_launcher.hpp"
#include "actors/llm/summarizer.hpp"
#include "actors/sessions/campaign.hpp"
#include "actors/store/store.hpp"
#include "devices/supervisor.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/session_messages.hpp"
#include "messages/wire.hpp"
#include "persistence/keys.hpp"
#include "tests/test_real_workers.hpp"
#include "tests/test_session_support.hpp"
#include "tests/test_store_support.hpp"

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::testing;
using json = nlohmann::json;

namespace {

// What the linter and the harness said about each demo answer on the interpreter.
job_reply demo_verdict(const device_job& job, const json& request) {
  auto source = request.at("source").get<std::string>();
  if (job.kind == contract::job_kind::lint) {
    if (source.find("torch.clamp_min") == std::string::npos)
      return done(clean_lint());
    return done(contract::lint_result{
        .ok = false,
        .violations = {{.rule = "fallback",
                        .line = 17,
                        .col = 16,
                        .text = "torch.clamp_min",
                        .hint = "`torch.clamp_min` computes with torch on the host: that is a "
                                "fallback, not a kernel."}},
        .gate_outcome = contract::outcome::cheat_detected,
        .gate_check = "fallback"});
  }
  if (source.find("BLOCK_SIZE=1000") != std::string::npos)
    // On CUDA this is a CompilationError; the interpreter raises it when the kernel runs, and the
    // harness reports what it saw.
    return done(test_verdict(
        contract::outcome::runtime_error, 1, 0,
        contract::test_failure{
            .dtype = "bfloat16",
            .message = "InterpreterError: ValueError(\"arange's range must be a power of 2\")",
            .backtrace = "File \"candidate.py\", line 3, in abs_kernel"}));
  if (source.find("1.0 / (1.0 + tl.exp(x))") != std::string::npos)
    return done(test_verdict(contract::outcome::accuracy_error, 1, 0,
                             contract::test_failure{.dtype = "bfloat16",
                                                    .sample = "Tensor[bfloat16](20, 20)",
                                                    .diff = values_differ(0.98, 399, 400)}));
  return done(test_verdict(contract::outcome::pass, 5, 5));
}

class DemoCampaign : public ::testing::Test {
protected:
  virtual std::string cassette() const { return "config/demo/cassette.jsonl"; }

  void SetUp() override {
    replay_server::options opts;
    opts.python = OPFORGE_PYTHON;
    opts.worker_dir = worker_source();
    opts.cassette = std::string{OPFORGE_SOURCE_DIR} + "/" + cassette();
    opts.hit_log = (dir.path() / "hits.jsonl").string();
    auto started = replay_server::start(opts);
    ASSERT_TRUE(started) << render(started.error());
    server = std::move(*started);
    auto spawned = spawn_store(sys, dir.db(), telemetry);
    ASSERT_TRUE(spawned) << render(spawned.error());
    store = *spawned;
    endpoint_config endpoint;
    endpoint.name = "demo";
    endpoint.kind = endpoint_kind::replay;
    server->serve(endpoint);
    auto templates = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
    ASSERT_TRUE(templates) << render(templates.error());
    services.store = store;
    services.llm = sys.spawn(llm_endpoint, endpoint, telemetry);
    services.telemetry = telemetry;
    services.templates = std::make_shared<const prompt_templates>(std::move(*templates));
    services.examples = "EXAMPLES";
    spec.campaign_id = "demo";
    spec.endpoint = "demo";
    spec.concurrency = 4;
    spec.budgets.context_window_tokens = endpoint.context_window;
    spec.budgets.reply_reserve_tokens = endpoint.max_tokens;
    for (auto op : {"nn.functional.relu", "abs", "sigmoid", "neg"})
      spec.operators.push_back({op,
                                "",
                                "elementwise",
                                std::string{op} + "(input) -> Tensor",
                                {"bfloat16", "float16", "float32", "int32", "int64"}});
  }

  void TearDown() override {
    if (workers)
      workers->stop();
    if (manager)
      self->request(*manager, caf::infinite, atom::shutdown_v)
          .receive([](atom::ok) {}, [](const caf::error&) {});
    if (services.summarizer)
      self->send_exit(services.summarizer, caf::exit_reason::user_shutdown);
    self->send_exit(services.llm, caf::exit_reason::user_shutdown);
    if (store)
      self->request(store, caf::infinite, atom::shutdown_v)
          .receive([](atom::ok) {}, [](const caf::error&) {});
  }

  // The real device manager with a linter and an interpreter worker serves the sessions' jobs.
  void start_real_workers() {
    device_manager_config config;
    config.listen = "tcp://127.0.0.1:*";
    auto spawned = spawn_device_manager(sys, config, telemetry);
    ASSERT_TRUE(spawned) << render(spawned.error());
    manager = *spawned;
    std::string bound;
    self->request(*manager, caf::infinite, atom::status_v)
        .receive([&](device_manager_status& status) { bound = status.endpoint; },
                 [&](const caf::error& err) { FAIL() << render(err); });
    auto started = supervisor::start(
        real_workers({{"none", 1, 1, "lint"}, {"interpreter", 1, 2, "device"}}, bound));
    ASSERT_TRUE(started) << render(started.error());
    workers = std::move(*started);
    services.device_kind = "interpreter";
    services.jobs = *manager;
  }

  campaign_status run_campaign() {
    campaign_status status;
    self->request(sys.spawn(campaign, spec, services, std::vector<session_record>{}), caf::infinite,
                  atom::run_v)
        .receive([&](campaign_status& s) { status = std::move(s); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return status;
  }

  // Runs the demo campaign and checks that it converged as the cassette was written to.
  void expect_convergence() {
    auto status = run_campaign();
    EXPECT_EQ(status.succeeded, 4u);
    std::map<std::string, uint32_t> calls;
    for (const auto& s : status.finished) {
      EXPECT_EQ(s.state, session_state::success) << s.op << ": " << s.end_reason;
      calls[s.op] = s.llm_calls;
    }
    EXPECT_EQ(calls, (std::map<std::string, uint32_t>{
                         {"abs", 2}, {"neg", 1}, {"nn.functional.relu", 2}, {"sigmoid", 2}}));
    EXPECT_EQ(first_outcome("nn.functional.relu"), "cheat_detected"); // a fallback to torch
    EXPECT_EQ(first_outcome("abs"), "runtime_error");
    EXPECT_EQ(first_outcome("sigmoid"), "accuracy_error");
    EXPECT_EQ(first_outcome("neg"), "pass");
    // Every answer of the cassette was served once, over HTTP.
    EXPECT_EQ(answers_served(), 7u);
  }

  session_record stored_session(const std::string& op) {
    session_record record;
    self->request(store, caf::infinite, atom::get_v, family::sessions, session_key("demo", op))
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

  // The session's transitions, FROM->TO in order, from its event log.
  std::vector<std::string> visited(const session_record& record) {
    std::vector<std::string> out;
    for (uint64_t revision = 1; revision <= record.revision; ++revision)
      self->request(store, caf::infinite, atom::get_v, family::events,
                    event_key(record.session_id, revision))
          .receive(
              [&](stored_value& v) {
                auto t = decode_transition(v.value.value_or(""));
                ASSERT_TRUE(t) << render(t.error());
                out.push_back(std::string{to_string(t->from)} + "->" + to_string(t->to));
              },
              [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return out;
  }

  bool in_library(const std::string& op, const std::string& source) {
    bool found = false;
    self->request(store, caf::infinite, atom::get_v, family::kernels, kernel_key(op, source))
        .receive([&](stored_value& v) { found = v.value.has_value(); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return found;
  }

  size_t answers_served() {
    std::ifstream hits{(dir.path() / "hits.jsonl").string()};
    std::string line;
    size_t served = 0;
    while (std::getline(hits, line))
      served += !line.empty();
    return served;
  }

  std::string first_outcome(const std::string& op) {
    auto record = stored_session(op);
    return record.history.empty() ? std::string{} : to_string(record.history.front().outcome);
  }

  test::temp_dir dir;
  std::unique_ptr<replay_server> server;
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::shared_ptr<metrics> telemetry = std::make_shared<metrics>("e2e");
  store_actor store;
  session_services services;
  campaign_spec spec;
  std::optional<device_manager_actor> manager;
  std::unique_ptr<supervisor> workers;
};

} // namespace

TEST_F(DemoCampaign, ConvergesThroughTheRealClientWithScriptedVerdicts) {
  auto jobs = std::make_shared<job_script>();
  jobs->reply_for = demo_verdict;
  services.jobs = sys.spawn(scripted_jobs, jobs);
  expect_convergence();
  // The progress gauges end where the campaign did: everything decided, nothing left to run.
  EXPECT_EQ(telemetry->campaign_operators("demo", "succeeded").Value(), 4);
  EXPECT_EQ(telemetry->campaign_operators("demo", "failed").Value(), 0);
  EXPECT_EQ(telemetry->campaign_operators("demo", "running").Value(), 0);
  EXPECT_EQ(telemetry->campaign_operators("demo", "waiting").Value(), 0);
  EXPECT_EQ(telemetry->sessions_ended("SUCCESS").Value(), 4);
  self->send_exit(services.jobs, caf::exit_reason::user_shutdown);
}

TEST_F(DemoCampaign, ConvergesOnRealWorkersOnTheInterpreter) {
  start_real_workers();
  expect_convergence();
}

// The demo's first `abs` answer launches `tl.arange(0, 1000)`; the interpreter raises when the
// kernel runs, and the harness reports the whole Python traceback through the interpreter's
// frames, longer than the summarizer's threshold. The next prompt must carry its summary.
TEST_F(DemoCampaign, LongRuntimeTracebackIsSummarizedBeforeTheNextPrompt) {
  start_real_workers();
  summarizer_config summary; // deterministic, with the default threshold
  summary.max_chars = 1200;
  summary.context_lines = 4;
  services.summarizer =
      sys.spawn(summarizer, summary, std::string{}, llm_endpoint_actor{}, telemetry);
  services.summarize_over_chars = summary.summarize_over_chars;
  spec.operators = {{"abs", "", "elementwise", "abs(input) -> Tensor", {"float32"}}};

  auto status = run_campaign();
  ASSERT_EQ(status.finished.size(), 1u);
  EXPECT_EQ(status.finished.front().state, session_state::success)
      << status.finished.front().end_reason;
  auto record = stored_session("abs");
  ASSERT_GE(record.history.size(), 2u);
  EXPECT_EQ(record.history.front().outcome, contract::attempt_outcome::runtime_error);
  ASSERT_GE(record.messages.size(), 3u);
  const auto& feedback = record.messages[2];
  EXPECT_EQ(feedback.role, "user");
  EXPECT_NE(feedback.content.find("arange's range must be a power of 2"), std::string::npos)
      << feedback.content;
  EXPECT_NE(feedback.content.find("omitted ...]"), std::string::npos) << feedback.content;
  EXPECT_EQ(telemetry->summaries("deterministic").Value(), 1);
}

namespace {

// The optimize stage's cassette (config/demo/optimize): `square` first squares 32 elements per
// program, correct but slow, then 4096. On the interpreter the timer measures no kernel, so the
// tests check the stage's logic (states, versions, budget), never which version is faster: the
// H200 run shows real speed.
class OptimizeCampaign : public DemoCampaign {
protected:
  std::string cassette() const override { return "config/demo/optimize/cassette.jsonl"; }

  void SetUp() override {
    DemoCampaign::SetUp();
    spec.campaign_id = "demo";
    spec.operators = {{"square", "", "elementwise", "square(input) -> Tensor", {"float32"}}};
    spec.budgets.optimize = true;
    spec.budgets.optimize_calls = 1;
    spec.budgets.optimize_target_speedup = 1e9; // never reached: the stage spends its call
  }

  // The record ended as the stage should: both answers proved and timed, the fastest kept, both
  // in the library, the stage's one call spent.
  void expect_optimized(const session_record& record) {
    EXPECT_EQ(record.state, session_state::success) << record.end_reason;
    ASSERT_EQ(record.versions.size(), 2u);
    for (const auto& v : record.versions) {
      EXPECT_TRUE(v.benchmarked);
      EXPECT_EQ(v.timer, logic_only_timer);
      EXPECT_FALSE(v.timings.empty()) << v.timing_error;
      EXPECT_TRUE(in_library("square", v.source));
    }
    EXPECT_NE(record.versions[0].source.find("BLOCK_SIZE=32)"), std::string::npos);
    EXPECT_NE(record.versions[1].source.find("BLOCK_SIZE=4096"), std::string::npos);
    EXPECT_EQ(record.proposal, record.versions[*fastest_version(record)].source);
    EXPECT_EQ(record.optimize_calls_used, 1u);
    EXPECT_EQ(record.total_calls, 2u);
    EXPECT_NE(record.end_reason.find("its 1 optimize calls are spent"), std::string::npos)
        << record.end_reason;
    auto states = visited(record);
    EXPECT_EQ(std::count(states.begin(), states.end(), "TEST->OPTIMIZE"), 2)
        << ::testing::PrintToString(states);
    EXPECT_EQ(states.back(), "OPTIMIZE->SUCCESS");
    EXPECT_NE(std::find(states.begin(), states.end(), "PROMPT->GENERATE"), states.end());
    EXPECT_EQ(answers_served(), 2u) << "no recorded answer is asked for twice";
  }
};

} // namespace

TEST_F(OptimizeCampaign, KeepsTheFastestProvedVersionOnRealWorkers) {
  start_real_workers();
  auto status = run_campaign();
  ASSERT_EQ(status.finished.size(), 1u);
  EXPECT_EQ(status.finished.front().state, session_state::success);
  auto record = stored_session("square");
  expect_optimized(record);
  EXPECT_EQ(status.finished.front().kernel_key, kernel_key("square", record.proposal));
}

// A daemon that stops while a session waits in OPTIMIZE resumes it from its checkpoint: the
// benchmark is asked again, the recorded answer never.
TEST_F(OptimizeCampaign, ResumesMidOptimizeFromItsCheckpoint) {
  auto jobs = std::make_shared<job_script>();
  jobs->add_test("square", done(test_verdict(contract::outcome::pass, 5, 5)));
  services.jobs = sys.spawn(scripted_jobs, jobs); // holds the benchmark job
  auto first = sys.spawn(campaign, spec, services, std::vector<session_record>{});
  self->send(first, atom::run_v);
  session_record stopped;
  for (int i = 0; i < 600 && stopped.state != session_state::optimize; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
    stopped = stored_session("square");
  }
  ASSERT_EQ(stopped.state, session_state::optimize);
  ASSERT_EQ(stopped.versions.size(), 1u);
  EXPECT_EQ(jobs->count("benchmark"), 1u);
  self->send_exit(first, caf::exit_reason::kill);
  self->send_exit(services.jobs, caf::exit_reason::user_shutdown);

  start_real_workers();
  campaign_status status;
  self->request(sys.spawn(campaign, spec, services, std::vector<session_record>{stopped}),
                caf::infinite, atom::run_v)
      .receive([&](campaign_status& s) { status = std::move(s); },
               [&](const caf::error& err) { ADD_FAILURE() << render(err); });
  ASSERT_EQ(status.finished.size(), 1u);
  expect_optimized(stored_session("square"));
}
