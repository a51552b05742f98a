// LLM outages through the real binary: `opforge serve` with its default local workers (an
// interpreter device worker and a lint worker, real Python), endpoints on loopback (a port nothing
// listens on, and the real replay server with the demo's recorded answers), driven by `opforge run`
// and `attach`. One case per promise: an endpoint down longer than llm.outage_after shows its state
// and last error; a campaign fails over to its next endpoint and completes there; a replay server
// killed with SIGKILL is started again and the campaign finishes; a cassette without the answer a
// session asks for ends that session FAILED, saying so, instead of leaving it in GENERATE.
// (Test names stay short: the data directory, named after the test, holds the control socket,
// whose path may not exceed 107 bytes.)

#include "actors/sessions/op_session.hpp"
#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/cli_test_support.hpp"
#include "tests/loopback_http_server.hpp"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

using namespace opforge;
using namespace opforge::cli_testing;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

// Starting the workers imports torch and triton, and the interpreter runs every test sample.
// Bounds only keep a hang from stalling CI.
constexpr auto campaign_bound = std::chrono::milliseconds{240s};

const std::string demo_cassette = std::string{OPFORGE_SOURCE_DIR} + "/config/demo/cassette.jsonl";

// A loopback port that nothing listens on: bound once by the kernel's choice, then released.
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0)
    ADD_FAILURE() << "cannot pick a loopback port";
  ::close(fd);
  return ntohs(address.sin_port);
}

template <class Predicate>
bool eventually(Predicate done, std::chrono::milliseconds bound = process_bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

// The live children of `parent` whose command line mentions `word`.
std::set<pid_t> children_running(pid_t parent, const std::string& word) {
  std::set<pid_t> out;
  for (const auto& entry : fs::directory_iterator{"/proc"}) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    auto stat = slurp(entry.path() / "stat");
    auto end = stat.rfind(')');
    if (end == std::string::npos)
      continue;
    std::istringstream fields{stat.substr(end + 1)};
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent || state == "Z" || state == "X")
      continue;
    if (slurp(entry.path() / "cmdline").find(word) != std::string::npos)
      out.insert(std::stoi(name));
  }
  return out;
}

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

class LlmOutage : public CliTest {
protected:
  // A configuration with the default local workers, llm.outage_after of 1 s and `endpoints`
  // (YAML flow maps).
  void configure(const std::string& endpoints) {
    write("outage.yaml", "workers: {listen: '" + workers_endpoint() +
                             "'}\nllm: {outage_after: 1s, endpoints: [" + endpoints + "]}\n");
  }

  // An endpoint on a port nothing listens on: every attempt fails at once.
  std::string dead_endpoint() const {
    return "{name: dead, base_url: 'http://127.0.0.1:" + std::to_string(closed_port()) +
           "/v1', model: nobody, max_attempts: 1, connect_timeout: 500ms}";
  }

  // A short breaker pause: requests cut off by a killed server open it, and the default 30 s
  // would only make the test wait.
  static std::string replay_endpoint(const std::string& name, const std::string& cassette,
                                     int latency_ms = 0) {
    return "{name: " + name + ", kind: replay, cassette: '" + cassette +
           "', replay_latency_ms: " + std::to_string(latency_ms) + ", breaker_open_for: 2s}";
  }

  void serve_outage() {
    daemon = spawn({"serve", "--config", (dir / "outage.yaml").string(), "--data-dir",
                    data.string(), "--metrics-listen", ""},
                   dir / "serve.out", dir / "serve.err");
    ASSERT_TRUE(eventually([&] {
      return opforge({"status"}).code == 0 || ::waitpid(daemon, nullptr, WNOHANG) != 0;
    })) << "serve never answered: "
        << slurp(dir / "serve.err");
    ASSERT_EQ(::waitpid(daemon, nullptr, WNOHANG), 0)
        << "serve exited: " << slurp(dir / "serve.err");
  }

  outcome opforge(std::vector<std::string> args, std::chrono::milliseconds bound = process_bound,
                  const std::string& out = "cli") {
    args.insert(args.end(), {"--data-dir", data.string()});
    auto pid = spawn(args, dir / (out + ".out"), dir / (out + ".err"));
    int code = wait_for(pid, bound);
    return {code, slurp(dir / (out + ".out")), slurp(dir / (out + ".err"))};
  }

  // Submits a campaign without following it; its id.
  std::string submit(std::vector<std::string> args) {
    args.insert(args.begin(), {"run", "--detach", "--json", "--dtypes", "float32"});
    auto submitted = opforge(args);
    EXPECT_EQ(submitted.code, 0) << submitted.out << submitted.err;
    return json::parse(submitted.out, nullptr, false).value("campaign_id", std::string{});
  }

  void shut_down() {
    EXPECT_EQ(opforge({"shutdown"}).code, 0);
    EXPECT_EQ(wait_for_daemon(), 0) << slurp(dir / "serve.err");
  }
};

} // namespace

TEST_F(LlmOutage, DownEndpointShowsStateAndLastError) {
  configure(dead_endpoint());
  ASSERT_NO_FATAL_FAILURE(serve_outage());
  auto id = submit({"--endpoint", "dead", "abs"});
  ASSERT_FALSE(id.empty());

  // `attach` follows the campaign (it never ends by itself: its only endpoint is dead).
  auto attach =
      spawn({"attach", id, "--data-dir", data.string()}, dir / "attach.out", dir / "attach.err");
  EXPECT_TRUE(eventually(
      [&] { return slurp(dir / "attach.out").find("endpoint dead down") != std::string::npos; },
      campaign_bound))
      << slurp(dir / "attach.out") << slurp(dir / "serve.err");

  auto cancelled = opforge({"cancel", id});
  EXPECT_EQ(cancelled.code, 0) << cancelled.err;
  EXPECT_EQ(wait_for(attach, campaign_bound), 1);
  auto followed = slurp(dir / "attach.out");
  // One line for the outage, with how long it lasted, the breaker, and curl's words.
  EXPECT_THAT(followed, ::testing::ContainsRegex(
                            "\nendpoint dead down: failing for 00:00:[0-9][0-9] \\(breaker "
                            "(open|closed|half_open)\\); last error: [^\n]*[Cc]onnect"))
      << followed;
  EXPECT_EQ(followed.find("endpoint dead down"), followed.rfind("endpoint dead down")) << followed;
  EXPECT_THAT(followed, HasSubstr("campaign " + id + " cancelled")) << followed;
  // The session never got an answer: its faults were retried, none counted against a candidate.
  EXPECT_THAT(followed, HasSubstr("  FAIL  abs  (0 LLM calls, 1 dialogs): cancelled: by request"))
      << followed;
  EXPECT_THAT(slurp(dir / "serve.err"), HasSubstr("llm dead: down: every attempt for "));
  shut_down();
}

TEST_F(LlmOutage, FailsOverToTheNextEndpoint) {
  configure(dead_endpoint() + ", " + replay_endpoint("replayed", demo_cassette));
  ASSERT_NO_FATAL_FAILURE(serve_outage());
  auto run = opforge({"run", "--dtypes", "float32", "--endpoint", "dead,replayed", "abs", "neg"},
                     campaign_bound);
  ASSERT_EQ(run.code, 0) << run.out << run.err << slurp(dir / "serve.err");
  EXPECT_THAT(run.out, HasSubstr("(endpoint dead, device ")) << run.out;
  EXPECT_THAT(run.out, HasSubstr("\nendpoint dead down: failing for ")) << run.out;
  EXPECT_THAT(run.out, HasSubstr("  PASS  abs  (2 LLM calls")) << run.out;
  EXPECT_THAT(run.out, HasSubstr("  PASS  neg  (1 LLM calls")) << run.out;
  EXPECT_THAT(run.out, HasSubstr("2 of 2 operators passed")) << run.out;

  // The move is a transition of its own, saying from where to where and why.
  auto show = opforge({"show", "neg"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, ::testing::ContainsRegex(
                            "GENERATE -> GENERATE +failover from endpoint dead to replayed: "
                            "endpoint dead down for [0-9]+ s: "))
      << show.out;
  shut_down();

  // The records say where each session went, so a resumed session would ask there again, and the
  // accepted kernels name the endpoint that wrote them.
  auto sessions = stored_sessions(data);
  ASSERT_EQ(sessions.size(), 2u);
  for (const auto& [op, record] : sessions) {
    EXPECT_EQ(record.endpoint, "replayed") << op;
    EXPECT_EQ(record.model, "replay") << op;
    EXPECT_EQ(to_string(record.state), std::string{"SUCCESS"}) << op;
  }
}

TEST_F(LlmOutage, HungEndpointFailsOver) {
  // Accepts every connection and never answers: no error ever comes, only silence.
  opforge::testing::loopback_server silent{true, "", std::chrono::milliseconds{0}};
  configure("{name: hung, base_url: '" + silent.url() +
            "', model: nobody, first_byte_timeout: 500ms, breaker_open_for: 60s}, " +
            replay_endpoint("replayed", demo_cassette));
  ASSERT_NO_FATAL_FAILURE(serve_outage());
  auto started = std::chrono::steady_clock::now();
  auto run =
      opforge({"run", "--dtypes", "float32", "--endpoint", "hung,replayed", "neg"}, campaign_bound);
  auto took = std::chrono::steady_clock::now() - started;
  ASSERT_EQ(run.code, 0) << run.out << run.err << slurp(dir / "serve.err");
  EXPECT_THAT(run.out, HasSubstr("\nendpoint hung down: ")) << run.out;
  EXPECT_THAT(run.out, HasSubstr("  PASS  neg  (1 LLM calls")) << run.out;
  // Seconds, not the 600 s total timeout times three attempts of a silent server.
  EXPECT_LT(took, 120s);
  auto show = opforge({"show", "neg"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, ::testing::ContainsRegex(
                            "GENERATE -> GENERATE +failover from endpoint hung to replayed: "
                            "endpoint hung down for [0-9]+ s: "))
      << show.out;
  // status names the hung endpoint's state and why.
  auto status = opforge({"status", "--json"});
  ASSERT_EQ(status.code, 0) << status.err;
  auto endpoints = json::parse(status.out).at("llm").at("endpoints");
  auto hung = std::find_if(endpoints.begin(), endpoints.end(),
                           [](const json& e) { return e.value("name", "") == "hung"; });
  ASSERT_NE(hung, endpoints.end()) << endpoints.dump(2);
  EXPECT_EQ(hung->value("state", ""), "down") << hung->dump(2);
  EXPECT_THAT(hung->value("last_error", ""), HasSubstr("hung: no first byte after 0.5 s"))
      << hung->dump(2);
  shut_down();
}

TEST_F(LlmOutage, KilledReplayServerIsRestarted) {
  configure(replay_endpoint("replayed", demo_cassette, 1500));
  ASSERT_NO_FATAL_FAILURE(serve_outage());
  auto servers = children_running(daemon, "opforge_replay");
  ASSERT_EQ(servers.size(), 1u);
  auto first = *servers.begin();

  auto id = submit({"--endpoint", "replayed", "abs", "neg"});
  ASSERT_FALSE(id.empty());
  // A request is under way (each takes 1.5 s): the kill cuts it off.
  auto hit_log = data / "replay-replayed.jsonl";
  ASSERT_TRUE(eventually([&] { return !slurp(hit_log).empty(); }, campaign_bound))
      << slurp(dir / "serve.err");
  ASSERT_EQ(::kill(first, SIGKILL), 0);

  pid_t second = 0;
  EXPECT_TRUE(eventually([&] {
    auto now = children_running(daemon, "opforge_replay");
    second = now.size() == 1 && !now.count(first) ? *now.begin() : 0;
    return second != 0;
  })) << slurp(dir / "serve.err");

  auto attached = opforge({"attach", id}, campaign_bound);
  EXPECT_EQ(attached.code, 0) << attached.out << attached.err << slurp(dir / "serve.err");
  EXPECT_THAT(attached.out, HasSubstr("campaign " + id + " done")) << attached.out;
  EXPECT_THAT(attached.out, HasSubstr("2 of 2 operators passed")) << attached.out;
  auto log = slurp(dir / "serve.err");
  EXPECT_THAT(log, HasSubstr("(pid " + std::to_string(first) +
                             ") was killed by signal 9 (Killed); starting it again on port "))
      << log;
  EXPECT_THAT(log, HasSubstr("running again (pid " + std::to_string(second) + ", port ")) << log;
  EXPECT_EQ(children_running(daemon, "opforge_replay"), std::set<pid_t>{second});
  shut_down();
}

TEST_F(LlmOutage, ExhaustedCassetteFailsTheSession) {
  // Only the first answer for `abs`, which fails its test: the session then asks for answer #1.
  std::ifstream demo{demo_cassette};
  std::string first;
  std::getline(demo, first);
  ASSERT_EQ(json::parse(first).at("operator"), "abs");
  auto cassette = write("short.jsonl", first + "\n");
  configure(replay_endpoint("short", cassette.string()));
  ASSERT_NO_FATAL_FAILURE(serve_outage());

  auto run = opforge({"run", "--dtypes", "float32", "--endpoint", "short", "abs"}, campaign_bound);
  // A campaign that ends with an operator failed says so in its exit code (README).
  EXPECT_EQ(run.code, 3) << run.out << run.err << slurp(dir / "serve.err");
  EXPECT_THAT(run.out,
              HasSubstr("  FAIL  abs  (1 LLM calls, 1 dialogs): the endpoint refused the request "
                        "for good: rejected: HTTP 404: cassette short.jsonl holds no answer #1 "
                        "for operator 'abs'\n"))
      << run.out;
  EXPECT_THAT(run.out, HasSubstr("campaign ")) << run.out;
  EXPECT_THAT(run.out, HasSubstr(" done\n  0 of 1 operators passed")) << run.out;
  // Asked once: a refusal is not retried.
  auto hits = slurp(data / "replay-short.jsonl");
  EXPECT_EQ(std::count(hits.begin(), hits.end(), '\n'), 2) << hits;
  shut_down();
}
