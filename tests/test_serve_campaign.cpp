// The generation loop through the real binary: `opforge serve` with its default local workers (one
// interpreter device worker and one lint worker, real Python) and the demo's recorded answers,
// driven by `opforge run`, `attach`, `sessions` and `show`. The daemon is then killed with SIGKILL
// in the middle of a campaign and restarted: every session resumes from its checkpoint, no recorded
// answer is asked for again, and the results equal those of an uninterrupted run.

#include "actors/library/kernels.hpp"
#include "actors/sessions/op_session.hpp"
#include "actors/sessions/session_machine.hpp"
#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/chromium_support.hpp"
#include "tests/cli_test_support.hpp"

#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::cli_testing;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

// Starting the workers imports torch and triton, and the interpreter runs every test sample: a
// campaign takes seconds to a minute on a busy machine. Bounds only keep a hang from stalling CI.
constexpr auto campaign_bound = std::chrono::milliseconds{240s};

const std::vector<std::string> demo_operators{"abs", "neg", "nn.functional.relu", "sigmoid"};

const std::string demo_cassette = std::string{OPFORGE_SOURCE_DIR} + "/config/demo/cassette.jsonl";

// What a session ended as: the values an interrupted campaign must reproduce.
struct session_result {
  std::string state;
  uint32_t llm_calls = 0;
  std::string first_outcome;
  std::string kernel_key;

  bool operator==(const session_result&) const = default;
};

void PrintTo(const session_result& r, std::ostream* os) {
  *os << "{" << r.state << ", " << r.llm_calls << " calls, first " << r.first_outcome << ", kernel "
      << r.kernel_key << "}";
}

// The demo cassette's hand-written answers: `abs` first fails at run time, `neg` passes at once,
// `relu` first falls back to PyTorch (cheat_detected, check fallback) and `sigmoid` first computes
// wrong values.
const std::map<std::string, std::pair<uint32_t, std::string>> demo_script{
    {"abs", {2, "runtime_error"}},
    {"neg", {1, "pass"}},
    {"nn.functional.relu", {2, "cheat_detected"}},
    {"sigmoid", {2, "accuracy_error"}}};

// Every session record in the store of a daemon that is not running, by operator.
std::map<std::string, session_record> stored_sessions(const fs::path& data_dir) {
  std::map<std::string, session_record> out;
  auto db = open_rocksdb_store(data_dir / "store");
  if (!db) {
    ADD_FAILURE() << "cannot open the store: " << render(db.error());
    return out;
  }
  auto err = (*db)->scan(family::sessions, "", [&](std::string_view, std::string_view value) {
    auto record = decode_record(value);
    if (!record) {
      ADD_FAILURE() << render(record.error());
      return false;
    }
    out.emplace(record->op, std::move(*record));
    return true;
  });
  EXPECT_FALSE(err) << render(err);
  EXPECT_FALSE((*db)->close());
  return out;
}

std::map<std::string, session_result> results(const fs::path& data_dir) {
  std::map<std::string, session_result> out;
  for (const auto& [op, record] : stored_sessions(data_dir))
    out[op] = {std::string{to_string(record.state)}, record.total_calls,
               record.history.empty() ? "" : to_string(record.history.front().outcome),
               summarize(record).kernel_key};
  return out;
}

struct hit {
  std::string op;
  int index;
  auto operator<=>(const hit&) const = default;
};

// The replay server's hit log: one line per request it received.
std::vector<hit> hits(const fs::path& log) {
  std::vector<hit> out;
  std::ifstream in{log};
  for (std::string line; std::getline(in, line);) {
    auto entry = json::parse(line);
    out.push_back({entry.at("operator"), entry.at("index")});
  }
  return out;
}

// The fields of /proc/PID/stat after the command name: state, ppid, pgrp...; empty when gone.
std::vector<std::string> proc_stat(pid_t pid) {
  auto text = slurp("/proc/" + std::to_string(pid) + "/stat");
  auto end = text.rfind(')');
  if (end == std::string::npos)
    return {};
  std::istringstream fields{text.substr(end + 1)};
  return {std::istream_iterator<std::string>{fields}, std::istream_iterator<std::string>{}};
}

// A process that exited is gone, even while it waits as a zombie for a parent that never reaps.
bool running(const std::vector<std::string>& stat) {
  return !stat.empty() && stat[0] != "Z" && stat[0] != "X";
}

// Fields of proc_stat() that processes are selected by.
constexpr size_t parent_field = 1;
constexpr size_t group_field = 2;

// The running processes whose proc_stat() `field` is `value`.
std::set<pid_t> running_with(size_t field, pid_t value) {
  std::set<pid_t> out;
  for (const auto& entry : fs::directory_iterator{"/proc"}) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    auto stat = proc_stat(std::stoi(name));
    if (running(stat) && std::stoi(stat[field]) == value)
      out.insert(std::stoi(name));
  }
  return out;
}

// Polls `done` until it holds or `bound` passes; whether it held.
template <class Predicate>
bool eventually(Predicate done, std::chrono::milliseconds bound = process_bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

class ServeCampaign : public CliTest {
protected:
  void SetUp() override {
    CliTest::SetUp();
    // The demo endpoint is what serve starts when no LLM is configured.
    ::unsetenv("OPFORGE_LLM_URL");
    // The default local workers, on a private socket so that suites can run side by side.
    write("demo.yaml", "workers: {listen: '" + workers_endpoint() + "'}\n");
    // The same answers behind a slow endpoint, so that a campaign is still running when it is
    // killed. Naming endpoints replaces the demo, so campaigns name their operators.
    write("slow.yaml", "workers: {listen: '" + workers_endpoint() +
                           "'}\nllm: {endpoints: [{name: demo, kind: replay, cassette: '" +
                           demo_cassette + "', replay_latency_ms: 1500}]}\n");
  }

  // Starts `opforge serve` with `config_file` on `data_dir` and waits until it answers.
  void serve_on(const fs::path& data_dir, const std::string& config_file) {
    daemon = spawn({"serve", "--config", (dir / config_file).string(), "--data-dir",
                    data_dir.string(), "--metrics-listen", ""},
                   dir / "serve.out", dir / "serve.err");
    ASSERT_TRUE(eventually([&] {
      return opforge(data_dir, {"status"}).code == 0 || ::waitpid(daemon, nullptr, WNOHANG) != 0;
    })) << "serve never answered: "
        << slurp(dir / "serve.err");
    ASSERT_EQ(::waitpid(daemon, nullptr, WNOHANG), 0)
        << "serve exited: " << slurp(dir / "serve.err");
  }

  // Runs an opforge client command against the daemon on `data_dir`.
  outcome opforge(const fs::path& data_dir, std::vector<std::string> args,
                  std::chrono::milliseconds bound = process_bound) {
    args.insert(args.end(), {"--data-dir", data_dir.string()});
    auto pid = spawn(args, dir / "cli.out", dir / "cli.err");
    int code = wait_for(pid, bound);
    return {code, slurp(dir / "cli.out"), slurp(dir / "cli.err")};
  }

  // Stops the daemon cleanly, so that its store can be read.
  void shut_down(const fs::path& data_dir) {
    EXPECT_EQ(opforge(data_dir, {"shutdown"}).code, 0);
    EXPECT_EQ(wait_for_daemon(), 0) << slurp(dir / "serve.err");
  }

  // Serves `data_dir` with the demo configuration and runs the demo campaign to its end.
  void run_demo(const fs::path& data_dir) {
    serve_on(data_dir, "demo.yaml");
    auto run = opforge(data_dir, {"run"}, campaign_bound);
    ASSERT_EQ(run.code, 0) << run.out << run.err << slurp(dir / "serve.err");
    for (const auto& op : demo_operators)
      EXPECT_THAT(run.out, HasSubstr("  PASS  " + op + "  (")) << run.out;
    EXPECT_THAT(run.out, HasSubstr("4 of 4 operators passed")) << run.out;
  }
};

void expect_demo_results(const std::map<std::string, session_result>& got) {
  ASSERT_EQ(got.size(), demo_script.size());
  for (const auto& [op, expected] : demo_script) {
    const auto& result = got.at(op);
    EXPECT_EQ(result.state, "SUCCESS") << op;
    EXPECT_EQ(result.llm_calls, expected.first) << op;
    EXPECT_EQ(result.first_outcome, expected.second) << op;
    EXPECT_THAT(result.kernel_key, ::testing::StartsWith(op)) << op;
  }
}

} // namespace

TEST_F(ServeCampaign, TheDemoCampaignRunsEndToEndAndIsNotRepeated) {
  auto data_dir = dir / "demo";
  ASSERT_NO_FATAL_FAILURE(run_demo(data_dir));

  auto sessions = opforge(data_dir, {"sessions"});
  ASSERT_EQ(sessions.code, 0) << sessions.err;
  std::istringstream lines{sessions.out};
  std::map<std::string, std::string> state_of;
  std::string line;
  std::getline(lines, line); // the header
  while (std::getline(lines, line)) {
    std::istringstream fields{line};
    std::string op, campaign, state;
    fields >> op >> campaign >> state;
    state_of[op] = state;
  }
  EXPECT_EQ(state_of, (std::map<std::string, std::string>{{"abs", "SUCCESS"},
                                                          {"neg", "SUCCESS"},
                                                          {"nn.functional.relu", "SUCCESS"},
                                                          {"sigmoid", "SUCCESS"}}))
      << sessions.out;

  // `abs` first fails at run time; the feedback quotes the error, the second answer is accepted.
  auto show = opforge(data_dir, {"show", "abs"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, HasSubstr("TEST -> FEEDBACK      test: runtime_error (")) << show.out;
  EXPECT_THAT(show.out, HasSubstr("arange's range must be a power of 2")) << show.out;
  EXPECT_THAT(show.out, HasSubstr("TEST -> SUCCESS       passed ")) << show.out;
  EXPECT_THAT(show.out, HasSubstr("accepted kernel:\n    @triton.jit\n    def abs_kernel("))
      << show.out;

  // The accepted kernels are the library, each with what the catalog says it serves and the
  // toolchain its worker announced.
  auto kernels = opforge(data_dir, {"kernels", "--json"});
  ASSERT_EQ(kernels.code, 0) << kernels.err;
  auto library = json::parse(kernels.out);
  std::set<std::string> listed;
  for (const auto& k : library.at("kernels")) {
    listed.insert(k.at("operator").get<std::string>());
    EXPECT_EQ(k.at("version"), 1) << k;
    EXPECT_EQ(k.at("current"), true) << k;
    EXPECT_EQ(k.at("device_kind"), "interpreter") << k;
    EXPECT_EQ(k.at("provenance").at("origin"), "campaign") << k;
    EXPECT_EQ(k.at("provenance").at("endpoint"), "demo") << k;
    // As the worker's catalog names them: torch's OpOverload names, e.g. aten.relu.default.
    auto name = k.at("op").get<std::string>();
    EXPECT_EQ(k.at("aten_overloads"),
              json({"aten." + name.substr(name.rfind('.') + 1) + ".default"}))
        << k;
    ASSERT_EQ(k.at("proofs").size(), 1u) << k;
    EXPECT_EQ(k.at("proofs")[0].at("outcome"), "pass") << k;
    EXPECT_TRUE(k.at("proofs")[0].at("toolchain").contains("torch")) << k;
  }
  EXPECT_EQ(listed, std::set<std::string>(demo_operators.begin(), demo_operators.end()));
  auto source = opforge(data_dir, {"kernels", "abs", "--source"});
  ASSERT_EQ(source.code, 0) << source.err;
  EXPECT_THAT(source.out, HasSubstr("@triton.jit\ndef abs_kernel(")) << source.out;

  // Each recorded answer was asked for once.
  auto served = hits(data_dir / "replay-demo.jsonl");
  EXPECT_EQ(std::multiset<hit>(served.begin(), served.end()),
            (std::multiset<hit>{{"abs", 0},
                                {"abs", 1},
                                {"neg", 0},
                                {"nn.functional.relu", 0},
                                {"nn.functional.relu", 1},
                                {"sigmoid", 0},
                                {"sigmoid", 1}}));

  // Every operator has a kernel now: the campaign is rejected once the catalog is read.
  auto again = opforge(data_dir, {"run"}, campaign_bound);
  EXPECT_EQ(again.code, 1) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr(" rejected: nothing to do: ")) << again.out;
  for (const auto& op : demo_operators)
    EXPECT_THAT(again.out, HasSubstr(op + ": already has an accepted kernel")) << again.out;

  // The demo endpoint has answers for its own operators only.
  auto other = opforge(data_dir, {"run", "add"});
  EXPECT_EQ(other.code, 1);
  EXPECT_EQ(other.err, "opforge: operator 'add': endpoint 'demo' replays recorded answers only for "
                       "abs, neg, nn.functional.relu, sigmoid; configure an LLM endpoint "
                       "(llm.endpoints, or OPFORGE_LLM_URL) for others\n");
  EXPECT_EQ(hits(data_dir / "replay-demo.jsonl").size(), served.size());

  shut_down(data_dir);
  expect_demo_results(results(data_dir));
}

TEST_F(ServeCampaign, AKilledDaemonResumesItsCampaignToTheSameResults) {
  ASSERT_NO_FATAL_FAILURE(run_demo(dir / "uninterrupted"));
  shut_down(dir / "uninterrupted");
  auto expected = results(dir / "uninterrupted");
  expect_demo_results(expected);

  auto data_dir = dir / "crashed";
  auto hit_log = data_dir / "replay-demo.jsonl";
  serve_on(data_dir, "slow.yaml");
  std::vector<std::string> run_args{"run", "--detach", "--json"};
  run_args.insert(run_args.end(), demo_operators.begin(), demo_operators.end());
  auto submitted = opforge(data_dir, run_args);
  ASSERT_EQ(submitted.code, 0) << submitted.out << submitted.err;
  auto campaign_id = json::parse(submitted.out).at("campaign_id").get<std::string>();

  // Four first requests, then one asking for a second answer: that session has recorded its first
  // answer, and the others still wait for theirs (1.5 s each), so the campaign is mid-way.
  ASSERT_TRUE(eventually([&] { return hits(hit_log).size() >= 5; }, campaign_bound))
      << slurp(dir / "serve.err");
  auto workers = json::parse(opforge(data_dir, {"workers", "--json"}).out).at("workers");
  auto children = running_with(parent_field, daemon);
  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  ASSERT_EQ(wait_for_daemon(), 128 + SIGKILL);

  // Nothing the daemon started outlives it: the local workers (each leads its process group) and
  // the replay server stop when their parent dies.
  ASSERT_EQ(workers.size(), 2u) << workers;
  for (const auto& worker : workers) {
    pid_t group = worker.at("pid");
    EXPECT_TRUE(children.count(group)) << "worker " << group << " is not a child of the daemon";
    EXPECT_TRUE(eventually([&] { return running_with(group_field, group).empty(); }))
        << "worker " << group << "'s process group outlived the daemon";
  }
  ASSERT_EQ(children.size(), workers.size() + 1) << "expected the workers and a replay server";
  for (auto child : children)
    EXPECT_TRUE(eventually([&] { return !running(proc_stat(child)); }))
        << "child " << child << " outlived the daemon";

  auto at_kill = stored_sessions(data_dir);
  auto served_before = hits(hit_log).size();
  ASSERT_EQ(at_kill.size(), demo_operators.size());
  uint32_t recorded = 0;
  bool all_ended = true;
  for (const auto& [op, record] : at_kill) {
    EXPECT_EQ(record.campaign_id, campaign_id);
    recorded += record.total_calls;
    all_ended = all_ended && (record.state == session_state::success);
  }
  ASSERT_GT(recorded, 0u) << "no answer was recorded before the kill";
  ASSERT_FALSE(all_ended) << "the campaign ended before the kill";

  serve_on(data_dir, "slow.yaml");
  auto attached = opforge(data_dir, {"attach", campaign_id}, campaign_bound);
  EXPECT_EQ(attached.code, 0) << attached.out << attached.err << slurp(dir / "serve.err");
  EXPECT_THAT(attached.out, HasSubstr("campaign " + campaign_id + " done")) << attached.out;
  auto campaigns = json::parse(opforge(data_dir, {"campaigns", "--json"}).out).at("campaigns");
  ASSERT_EQ(campaigns.size(), 1u) << campaigns;
  EXPECT_EQ(campaigns[0].at("campaign_id"), campaign_id);
  EXPECT_EQ(campaigns[0].at("state"), "done");
  shut_down(data_dir);

  auto resumed = results(data_dir);
  EXPECT_EQ(resumed, expected);
  // After the restart each session asked for exactly the answers it had not recorded, once each.
  auto served = hits(hit_log);
  std::multiset<hit> asked_after(served.begin() + static_cast<ptrdiff_t>(served_before),
                                 served.end());
  std::multiset<hit> missing;
  for (const auto& [op, record] : at_kill)
    for (auto index = record.total_calls; index < resumed.at(op).llm_calls; ++index)
      missing.insert({op, static_cast<int>(index)});
  EXPECT_EQ(asked_after, missing);
}

// The JSON lines of `run --json` or `attach --json`, each parsed.
std::vector<json> json_lines(const std::string& out) {
  std::vector<json> events;
  std::istringstream lines{out};
  for (std::string line; std::getline(lines, line);) {
    auto event = json::parse(line, nullptr, false);
    EXPECT_FALSE(event.is_discarded()) << "not JSON: " << line;
    if (!event.is_discarded())
      events.push_back(std::move(event));
  }
  return events;
}

// Where the first event of `kind` (about `op`, for operator and session events) is; events.size()
// when there is none.
size_t first(const std::vector<json>& events, const std::string& kind, const std::string& op = "") {
  for (size_t i = 0; i < events.size(); ++i)
    if (events[i].at("event") == kind && (op.empty() || events[i].value("operator", "") == op))
      return i;
  return events.size();
}

// Beside the default interpreter worker: a device kind neither the worker's registry defines nor
// a connected worker announced is refused at once, naming the kinds there are, and stores
// nothing; a registered kind no connected worker serves (cuda) is accepted, and `run`, `status`
// and `campaigns` say that it waits for a worker of that kind.
TEST_F(ServeCampaign, AKindNoWorkerCouldServeIsRefusedAndOneNoneServesWaits) {
  auto data_dir = dir / "k";
  serve_on(data_dir, "demo.yaml");
  auto live_interpreter = [&] {
    auto status = json::parse(opforge(data_dir, {"status", "--json"}).out);
    return status.at("workers")
               .at("connected")
               .value("interpreter", json::object())
               .value("idle", 0) > 0;
  };
  ASSERT_TRUE(eventually(live_interpreter)) << slurp(dir / "serve.err");

  auto refused = opforge(data_dir, {"run", "abs", "--device", "tpu"});
  EXPECT_EQ(refused.code, 1);
  EXPECT_EQ(refused.err, "opforge: device kind 'tpu': no connected worker announced it and the "
                         "worker's registry has no such kind (known kinds: interpreter, cuda)\n");
  EXPECT_EQ(refused.out, "");
  auto campaigns = opforge(data_dir, {"campaigns", "--json"});
  EXPECT_EQ(json::parse(campaigns.out).at("campaigns"), json::array()) << campaigns.out;

  // Followed as `run` follows it, until the wait is said; Ctrl-C detaches.
  auto follower = spawn({"run", "abs", "--device", "cuda", "--data-dir", data_dir.string()},
                        dir / "follow.out", dir / "follow.err");
  const std::string waits =
      "no worker of kind cuda is connected; the campaign waits for one (1 job queued for it)\n";
  EXPECT_TRUE(eventually([&] {
    return slurp(dir / "follow.out").find(waits) != std::string::npos;
  })) << slurp(dir / "follow.out")
      << slurp(dir / "follow.err");
  ASSERT_EQ(::kill(follower, SIGINT), 0);
  EXPECT_EQ(wait_for(follower), 0) << slurp(dir / "follow.err");
  EXPECT_THAT(slurp(dir / "follow.out"), ::testing::StartsWith("campaign "));

  auto status = opforge(data_dir, {"status", "--json"});
  auto workers = json::parse(status.out).at("workers");
  EXPECT_EQ(workers.at("unserved"), (json{{"cuda", 1}})) << status.out;
  EXPECT_EQ(workers.at("queued"), 1) << status.out;
  auto text = opforge(data_dir, {"status"});
  EXPECT_THAT(text.out, HasSubstr(" queued, 0 running, ")) << text.out;
  EXPECT_THAT(text.out, HasSubstr(" lost; no worker of kind cuda is connected: 1 job waits for "
                                  "one\n"))
      << text.out;
  campaigns = opforge(data_dir, {"campaigns", "--json"});
  auto listed = json::parse(campaigns.out).at("campaigns");
  ASSERT_EQ(listed.size(), 1u) << campaigns.out;
  EXPECT_EQ(listed[0].at("state"), "resolving");
  EXPECT_EQ(listed[0].at("device_kind"), "cuda");
  EXPECT_EQ(listed[0].at("unserved_jobs"), 1);

  auto id = listed[0].at("campaign_id").get<std::string>();
  EXPECT_EQ(opforge(data_dir, {"cancel", id}).code, 0);
  status = opforge(data_dir, {"status", "--json"});
  EXPECT_EQ(json::parse(status.out).at("workers").at("unserved"), json::object()) << status.out;
  shut_down(data_dir);
}

// `run --json` streams a campaign's events as JSON lines in order; the next campaign names the
// operators it skipped as already covered, in text and in JSON; and the report over both, with a
// failing verdict stored for one of their kernels on another toolchain, lists that regression and
// Chromium draws it (OPFORGE_REPORT_SCREENSHOT keeps the screenshot: bench/results/report.png).
TEST_F(ServeCampaign, JsonEventsSkippedOperatorsAndARegression) {
  auto data_dir = dir / "e";
  serve_on(data_dir, "demo.yaml");
  auto streamed = opforge(data_dir, {"run", "abs", "neg", "--json"}, campaign_bound);
  ASSERT_EQ(streamed.code, 0) << streamed.out << streamed.err << slurp(dir / "serve.err");
  auto events = json_lines(streamed.out);
  ASSERT_GE(events.size(), 6u) << streamed.out;
  EXPECT_EQ(events.front().at("event"), "submitted");
  EXPECT_EQ(events.front().at("endpoint"), "demo");
  EXPECT_EQ(events.front().at("device_kind"), "interpreter");
  auto id = events.front().at("campaign").get<std::string>();
  for (const auto& e : events)
    EXPECT_EQ(e.at("campaign"), id) << e;
  auto resolved = first(events, "resolved");
  ASSERT_LT(resolved, events.size()) << streamed.out;
  EXPECT_EQ(events[resolved].at("operator_ids"), json({"abs", "neg"}));
  EXPECT_EQ(events[resolved].at("covered"), json::array());
  // Before it resolved: resolving and, if the local interpreter worker was still starting, the
  // wait for it; its arrival follows, before or after.
  for (size_t i = 1; i < resolved; ++i)
    EXPECT_THAT(events[i].at("event").get<std::string>(), ::testing::AnyOf("resolving", "device"))
        << events[i];
  std::vector<bool> waits;
  for (const auto& e : events)
    if (e.at("event") == "device") {
      EXPECT_EQ(e.at("device_kind"), "interpreter");
      waits.push_back(e.at("waiting").get<bool>());
    }
  EXPECT_TRUE(waits.empty() || waits == std::vector<bool>({true, false})) << streamed.out;
  // Each operator: its sessions' states while it ran, then how it ended, as the demo script says.
  for (const auto& op : {"abs", "neg"}) {
    auto ended = first(events, "operator", op);
    ASSERT_LT(ended, events.size()) << op << ": " << streamed.out;
    const auto& e = events[ended];
    EXPECT_EQ(e.at("passed"), true) << e;
    EXPECT_EQ(e.at("state"), "SUCCESS") << e;
    EXPECT_EQ(e.at("llm_calls"), demo_script.at(op).first) << e;
    EXPECT_EQ(e.at("dialogs"), 1) << e;
    EXPECT_THAT(e.at("reason").get<std::string>(), ::testing::StartsWith("passed ")) << e;
    EXPECT_THAT(e.at("kernel_key").get<std::string>(), ::testing::StartsWith(op)) << e;
    for (size_t i = 0; i < events.size(); ++i)
      if (events[i].at("event") == "session" && events[i].at("operator") == op) {
        EXPECT_GT(i, resolved);
        EXPECT_LT(i, ended);
        EXPECT_THAT(events[i].at("state").get<std::string>(),
                    ::testing::AnyOf("PROMPT", "GENERATE", "LINT", "TEST"));
      }
  }
  const auto& progress = events[events.size() - 2];
  EXPECT_EQ(progress.at("event"), "progress");
  EXPECT_EQ(progress.at("succeeded"), 2);
  EXPECT_EQ(progress.at("running"), 0);
  EXPECT_EQ(events.back(), json({{"event", "finished"},
                                 {"campaign", id},
                                 {"state", "done"},
                                 {"error", ""},
                                 {"endpoint", "demo"},
                                 {"operators", 2},
                                 {"succeeded", 2},
                                 {"failed", 0},
                                 {"llm_calls", 3},
                                 {"prompt_tokens", events.back().at("prompt_tokens")},
                                 {"completion_tokens", events.back().at("completion_tokens")},
                                 {"faults", 0},
                                 {"created_ms", events.back().at("created_ms")},
                                 {"ended_ms", events.back().at("ended_ms")}}));
  EXPECT_GT(events.back().at("prompt_tokens").get<int64_t>(), 0);
  EXPECT_GE(events.back().at("ended_ms"), events.back().at("created_ms"));

  // The demo's other two operators run; the two that passed are named as skipped.
  auto text = opforge(data_dir, {"run"}, campaign_bound);
  ASSERT_EQ(text.code, 0) << text.out << text.err;
  EXPECT_THAT(text.out, HasSubstr("\nresolved: 2 operators to run; skipped 2 already covered (an "
                                  "accepted kernel in the library): abs, neg\n"))
      << text.out;
  EXPECT_THAT(text.out, HasSubstr("  PASS  nn.functional.relu  (2 LLM calls, 1 dialogs): passed"));
  EXPECT_THAT(text.out, HasSubstr("  PASS  sigmoid  (2 LLM calls, 1 dialogs): passed"));
  auto attached = opforge(data_dir, {"attach", "--json"});
  ASSERT_EQ(attached.code, 0) << attached.out << attached.err;
  auto again = json_lines(attached.out);
  ASSERT_EQ(again.size(), 5u) << attached.out;
  EXPECT_EQ(again[0].at("event"), "resolved");
  auto ran = again[0].at("operator_ids").get<std::vector<std::string>>(); // in catalog order
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ(ran, (std::vector<std::string>{"nn.functional.relu", "sigmoid"}));
  EXPECT_EQ(again[0].at("covered"), json({"abs", "neg"}));
  EXPECT_EQ(again[1].at("event"), "operator");
  EXPECT_EQ(again[2].at("event"), "operator");
  EXPECT_EQ(again[3].at("event"), "progress");
  EXPECT_EQ(again[4].at("event"), "finished");
  EXPECT_EQ(again[4].at("succeeded"), 2);

  // abs's kernel fails on another toolchain, one that differs in its Triton.
  auto listed = json::parse(opforge(data_dir, {"kernels", "abs", "--json"}).out).at("kernels");
  ASSERT_EQ(listed.size(), 1u) << listed;
  auto accepted = listed[0].at("proofs").at(0);
  auto old_triton = accepted.at("toolchain").at("triton").get<std::string>();
  shut_down(data_dir);
  contract::toolchain_proof broken;
  broken.fingerprint = "ffffffffffffffff";
  broken.device_kind = "interpreter";
  broken.toolchain = accepted.at("toolchain").get<std::map<std::string, std::string>>();
  broken.toolchain["triton"] = "3.5.1";
  broken.outcome = contract::outcome::compile_error;
  broken.tests_run = 1;
  broken.validated_at_ms = accepted.at("validated_at_ms").get<int64_t>() + 1000;
  broken.detail = "stored by test_serve_campaign";
  {
    auto db = open_rocksdb_store(data_dir / "store");
    ASSERT_TRUE(db) << render(db.error());
    ASSERT_FALSE((*db)->write({{add_validation(listed[0].at("hash").get<std::string>(), broken)}}));
    ASSERT_FALSE((*db)->close());
  }
  serve_on(data_dir, "demo.yaml");
  auto html = dir / "report.html", numbers = dir / "report.json";
  auto reported =
      opforge(data_dir, {"report", "--all", "--html", html.string(), "--json", numbers.string()});
  ASSERT_EQ(reported.code, 0) << reported.err;
  auto report = json::parse(slurp(numbers));
  EXPECT_EQ(report.at("regressions"), json({{{"device_kind", "interpreter"},
                                             {"fingerprint", "ffffffffffffffff"},
                                             {"change", "triton " + old_triton + " -> 3.5.1"},
                                             {"kernels", 1},
                                             {"operators", {"abs"}}}}));
  EXPECT_EQ(report.at("curves").size(), 3u);
  EXPECT_EQ(report.at("passed").size(), 4u);
  auto shot = dir / "report.png";
  auto img = chromium_testing::screenshot(html, shot);
  // The regression's bar, in its own colour.
  EXPECT_GT(chromium_testing::pixels_of(img, 0xff7f0e), 1000u);
  chromium_testing::keep_screenshot(shot);
}

namespace {

// Every campaign record in the store of a daemon that is not running, by id.
std::map<std::string, stored_campaign> stored_campaigns(const fs::path& data_dir) {
  std::map<std::string, stored_campaign> out;
  auto db = open_rocksdb_store(data_dir / "store");
  if (!db) {
    ADD_FAILURE() << "cannot open the store: " << render(db.error());
    return out;
  }
  auto err = (*db)->scan(family::campaigns, "", [&](std::string_view key, std::string_view value) {
    auto campaign = decode_campaign(value);
    if (!campaign) {
      ADD_FAILURE() << render(campaign.error());
      return false;
    }
    out.emplace(std::string{key}, std::move(*campaign));
    return true;
  });
  EXPECT_FALSE(err) << render(err);
  EXPECT_FALSE((*db)->close());
  return out;
}

} // namespace

// A daemon with no worker: a submitted campaign stays resolving, its catalog job queued.
class ServeWithoutWorkers : public ServeCampaign {
protected:
  void SetUp() override {
    ServeCampaign::SetUp();
    write("noworkers.yaml", "local_workers: []\nworkers: {listen: '" + workers_endpoint() + "'}\n");
  }

  int64_t queued(const fs::path& data_dir) {
    auto status = opforge(data_dir, {"status", "--json"});
    EXPECT_EQ(status.code, 0) << status.err;
    return json::parse(status.out).at("workers").at("queued").get<int64_t>();
  }

  json listed(const fs::path& data_dir) {
    auto campaigns = opforge(data_dir, {"campaigns", "--json"});
    EXPECT_EQ(campaigns.code, 0) << campaigns.err;
    return json::parse(campaigns.out).at("campaigns");
  }

  // Submits `abs` and returns its id once its catalog job waits in the queue.
  std::string submit(const fs::path& data_dir) {
    auto submitted = opforge(data_dir, {"run", "abs", "--detach", "--json"});
    EXPECT_EQ(submitted.code, 0) << submitted.out << submitted.err;
    EXPECT_TRUE(eventually([&] { return queued(data_dir) == 1; })) << slurp(dir / "serve.err");
    return json::parse(submitted.out).at("campaign_id").get<std::string>();
  }
};

// Killed with SIGKILL and then shut down while it resolves, the campaign is in the store each
// time, resolves again after each restart, and once a worker serves its kind it runs to its end.
TEST_F(ServeWithoutWorkers, ACampaignKilledWhileResolvingResolvesAgain) {
  auto data_dir = dir / "r";
  serve_on(data_dir, "noworkers.yaml");
  auto id = submit(data_dir);
  ASSERT_EQ(::kill(daemon, SIGKILL), 0);
  ASSERT_EQ(wait_for_daemon(), 128 + SIGKILL);
  auto at_kill = stored_campaigns(data_dir);
  ASSERT_EQ(at_kill.size(), 1u);
  const auto& stored = at_kill.begin()->second;
  EXPECT_EQ(at_kill.begin()->first, id);
  EXPECT_EQ(stored.state, contract::campaign_state::resolving);
  EXPECT_EQ(stored.request.names, std::vector<std::string>{"abs"});
  EXPECT_EQ(stored.spec.device_kind, "interpreter");
  EXPECT_FALSE(stored.request.dtypes.empty()) << "the defaults are stored with the request";

  serve_on(data_dir, "noworkers.yaml");
  EXPECT_TRUE(eventually([&] { return queued(data_dir) == 1; })) << slurp(dir / "serve.err");
  auto campaigns = listed(data_dir);
  ASSERT_EQ(campaigns.size(), 1u) << campaigns;
  EXPECT_EQ(campaigns[0].at("campaign_id"), id);
  EXPECT_EQ(campaigns[0].at("state"), "resolving");
  shut_down(data_dir);
  EXPECT_EQ(stored_campaigns(data_dir).at(id).state, contract::campaign_state::resolving);

  serve_on(data_dir, "demo.yaml");
  auto attached = opforge(data_dir, {"attach", id}, campaign_bound);
  EXPECT_EQ(attached.code, 0) << attached.out << attached.err << slurp(dir / "serve.err");
  EXPECT_THAT(attached.out, HasSubstr("  PASS  abs  (")) << attached.out;
  EXPECT_THAT(attached.out, HasSubstr("campaign " + id + " done")) << attached.out;
  shut_down(data_dir);
  EXPECT_EQ(stored_campaigns(data_dir).at(id).state, contract::campaign_state::done);
  auto sessions = stored_sessions(data_dir);
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions.at("abs").state, session_state::success);
}

// Cancelled while it resolves, the campaign's catalog job leaves the queue at once, the store
// says cancelled, and a restarted daemon does not resolve it again.
TEST_F(ServeWithoutWorkers, ACancelledResolvingCampaignLeavesTheQueue) {
  auto data_dir = dir / "c";
  serve_on(data_dir, "noworkers.yaml");
  auto id = submit(data_dir);
  auto cancelled = opforge(data_dir, {"cancel", id});
  EXPECT_EQ(cancelled.code, 0) << cancelled.out << cancelled.err;
  EXPECT_EQ(queued(data_dir), 0);
  auto campaigns = listed(data_dir);
  ASSERT_EQ(campaigns.size(), 1u) << campaigns;
  EXPECT_EQ(campaigns[0].at("state"), "cancelled");
  shut_down(data_dir);
  EXPECT_EQ(stored_campaigns(data_dir).at(id).state, contract::campaign_state::cancelled);

  serve_on(data_dir, "noworkers.yaml");
  campaigns = listed(data_dir);
  ASSERT_EQ(campaigns.size(), 1u) << campaigns;
  EXPECT_EQ(campaigns[0].at("state"), "cancelled");
  std::this_thread::sleep_for(1s); // time enough for a resumed resolve to queue its job
  EXPECT_EQ(queued(data_dir), 0);
}
