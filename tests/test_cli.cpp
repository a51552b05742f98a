// Runs the real opforge binary: bad configurations, a CLI without a daemon, and a daemon served in
// a temporary data directory, queried and stopped through its control socket.

#include "apps/control_client.hpp"
#include "apps/control_protocol.hpp"
#include "messages/contract.hpp"
#include "messages/errors.hpp"
#include "messages/llm_messages.hpp"
#include "messages/wire.hpp"
#include "tests/cli_test_support.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <curl/curl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.hpp>

using namespace opforge::cli_testing;

namespace {

size_t append(char* data, size_t size, size_t count, void* sink) {
  static_cast<std::string*>(sink)->append(data, size * count);
  return size * count;
}

std::string http_get(const std::string& url) {
  std::string body;
  auto* curl = curl_easy_init();
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  auto rc = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  EXPECT_EQ(rc, CURLE_OK) << curl_easy_strerror(rc);
  return body;
}

// A TCP port held open by this process, so that the daemon finds it in use.
class held_port {
public:
  held_port() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 1);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~held_port() { ::close(fd_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

private:
  int fd_;
  int port_;
};

} // namespace

TEST_F(CliTest, BadConfigurationStopsServeWithOneLine) {
  auto data_dir = data.string();
  write("typo.yaml", "metrics:\n  lisen: 127.0.0.1:0\n");
  expect_bad_config({"serve", "--config", (dir / "typo.yaml").string()},
                    "DIR/typo.yaml:2: unknown key 'metrics.lisen' (did you mean "
                    "'metrics.listen'?)");
  expect_bad_config({"serve", "--config", (dir / "absent.yaml").string()},
                    "cannot read config file 'DIR/absent.yaml': No such file or directory (check "
                    "the path given to --config)");
  expect_bad_config({"serve", "--data-dir", data_dir, "--workers-listen", "5555"},
                    "--workers-listen: 'workers.listen' must be a ZeroMQ endpoint like "
                    "tcp://127.0.0.1:5555 or ipc:///path/to/socket, got '5555'");
  write("file", "");
  expect_bad_config({"serve", "--data-dir", (dir / "file" / "var").string()},
                    "data_dir 'DIR/file/var': cannot create it: Not a directory (choose another "
                    "with --data-dir or OPFORGE_DATA_DIR)");
}

// The store's own words, as one line, and the same exit code as any other failure to start.
TEST_F(CliTest, StoreThatCannotOpenStopsServeWithOneLine) {
  fs::create_directories(data);
  std::ofstream{data / "store"} << "not a database directory";
  auto result = run({"serve", "--config", (dir / "quiet.yaml").string(), "--data-dir",
                     data.string(), "--metrics-listen", ""});
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.err.rfind("opforge: " + (data / "store").string(), 0), 0u) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

TEST_F(CliTest, AddressesInUseStopServeWithOneLine) {
  held_port taken;
  expect_bad_config({"serve", "--config", (dir / "quiet.yaml").string(), "--data-dir",
                     data.string(), "--metrics-listen", taken.address()},
                    "metrics.listen '" + taken.address() +
                        "': cannot listen there (port in use, or not an address of this host) (is "
                        "another opforge running? choose another address for metrics.listen)");
  expect_bad_config({"serve", "--config", (dir / "quiet.yaml").string(), "--data-dir",
                     data.string(), "--metrics-listen", "", "--control",
                     "tcp://" + taken.address()},
                    "control.listen 'tcp://" + taken.address() +
                        "': Address already in use (is another opforge running? choose another "
                        "address for control.listen)");
}

// The device manager's own words for its socket, as one line.
TEST_F(CliTest, WorkersAddressInUseStopsServeWithOneLine) {
  held_port taken;
  auto result =
      run({"serve", "--config", (dir / "quiet.yaml").string(), "--data-dir", data.string(),
           "--metrics-listen", "", "--workers-listen", "tcp://" + taken.address()});
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.err.rfind("opforge: workers.listen 'tcp://" + taken.address() +
                                 "': cannot bind (Address already in use)",
                             0),
            0u)
      << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
}

TEST_F(CliTest, SecondDaemonOnTheSameDataDirIsRefused) {
  auto first = serve();
  ASSERT_TRUE(first.contains("pid"));
  expect_bad_config(
      {"serve", "--config", (dir / "quiet.yaml").string(), "--data-dir", data.string(),
       "--metrics-listen", ""},
      "data_dir 'DIR/var': another opforge serve (pid " + std::to_string(first["pid"].get<int>()) +
          ") uses it (stop it with `opforge shutdown`, or choose another --data-dir)");
  EXPECT_EQ(run({"shutdown", "--data-dir", data.string()}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
}

TEST_F(CliTest, ClientWithoutDaemonFailsWithOneLine) {
  for (auto* cmd : {"status", "workers", "shutdown"}) {
    auto result = run({cmd, "--data-dir", data.string()});
    EXPECT_EQ(result.code, 1) << cmd;
    EXPECT_EQ(shorten(result.err), "opforge: no daemon answers at ipc://DIR/var/control.sock "
                                   "(start one with `opforge serve`)\n")
        << cmd;
  }
  // A socket file left behind by a daemon that was killed: nobody listens on it.
  fs::create_directories(data);
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  auto path = (data / "control.sock").string();
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(fd);
  auto result = run({"status", "--data-dir", data.string()});
  EXPECT_EQ(result.code, 1);
  EXPECT_EQ(shorten(result.err), "opforge: no daemon answers at ipc://DIR/var/control.sock "
                                 "(start one with `opforge serve`)\n");
}

// `run --device` takes any kind a worker may announce; only a name out of bounds is refused,
// before any daemon is asked.
TEST_F(CliTest, RunTakesAnyBoundedDeviceKind) {
  auto refused = run({"run", "abs", "--device", "Gpu/0", "--data-dir", data.string()});
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.err.find("a device kind is 1 to 32 lowercase letters, digits, '_' or '-', "
                             "starting with a letter"),
            std::string::npos)
      << refused.err;
  auto taken = run({"run", "abs", "--device", "rocm-gfx942", "--data-dir", data.string()});
  EXPECT_EQ(taken.code, 1);
  EXPECT_EQ(shorten(taken.err), "opforge: no daemon answers at ipc://DIR/var/control.sock "
                                "(start one with `opforge serve`)\n");
}

// A model-check report as `python -m opforge_library modelcheck` writes it, missing `ops`.
std::string model_report(const std::string& model, const std::vector<std::string>& ops) {
  auto missing = nlohmann::json::array();
  for (const auto& op : ops)
    missing.push_back({{"op", op}, {"variant", ""}});
  return nlohmann::json{{"model", model},
                        {"aten_calls", {{"aten.neg.default", 2}, {"aten.add.Tensor", 9}}},
                        {"served_calls", 9},
                        {"missing_overloads", {"aten.neg.default"}},
                        {"missing_operators", missing},
                        {"max_abs_deviation", 0.0},
                        {"max_rel_deviation", 0.0},
                        {"seconds_with_library", 1.5},
                        {"seconds_without_library", 0.5}}
      .dump();
}

// `run --from-model` submits a campaign over exactly the reports' missing operators, each once
// (a file holds one report or, from `--model all`, a list of them).
TEST_F(CliTest, RunFromModelReportsSubmitsTheirMissingOperators) {
  auto gpt2 = write("gpt2.json", model_report("gpt2", {"neg", "nn.functional.relu"}));
  auto both = write("all.json", "[" + model_report("llama", {"neg", "abs"}) + "," +
                                    model_report("resnet18", {}) + "]");
  serve();

  auto submitted = run({"run", "--detach", "--json", "--from-model", gpt2.string(), "--from-model",
                        both.string(), "--data-dir", data.string()});

  ASSERT_EQ(submitted.code, 0) << submitted.err;
  auto id = nlohmann::json::parse(submitted.out).at("campaign_id").get<std::string>();
  EXPECT_NE(slurp(dir / "serve.err")
                .find("campaign " + id + " submitted: neg, nn.functional.relu, abs\n"),
            std::string::npos)
      << slurp(dir / "serve.err");
  EXPECT_EQ(run({"shutdown", "--data-dir", data.string()}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
}

// A report that is no model_report is refused before any daemon is asked, naming the file, the
// report and what is wrong.
TEST_F(CliTest, RunFromModelRefusesABadReportNamingWhatIsWrong) {
  auto unnamed = nlohmann::json::parse(model_report("gpt2", {"neg"}));
  unnamed.erase("model");
  auto list = write("list.json", "[" + model_report("gpt2", {"neg"}) + "," + unnamed.dump() + "]");
  expect_bad_config({"run", "--from-model", list.string(), "--data-dir", data.string()},
                    "--from-model DIR/list.json [1]: model_report: missing key 'model'");
  write("garbage.json", "{not json");
  expect_bad_config({"run", "--from-model", (dir / "garbage.json").string()},
                    "--from-model DIR/garbage.json: not JSON (want a modelcheck report)");
  expect_bad_config({"run", "--from-model", (dir / "absent.json").string()},
                    "--from-model DIR/absent.json: cannot read it: No such file or directory");
}

TEST_F(CliTest, ServeAnswersStatusServesMetricsAndShutsDownCleanly) {
  auto status = serve();
  EXPECT_EQ(status["ok"], true);
  EXPECT_EQ(status["data_dir"], data.string());
  EXPECT_EQ(status["control"], "ipc://" + (data / "control.sock").string());
  EXPECT_EQ(status["version"], OPFORGE_VERSION);
  EXPECT_EQ(status["store"]["path"], (data / "store").string());
  EXPECT_GE(status["store"]["schema_version"].get<int>(), 1);
  EXPECT_TRUE(status["store"]["families"].contains("sessions")) << status.dump();
  auto metrics_address = status["metrics"].get<std::string>();
  ASSERT_NE(metrics_address.find("127.0.0.1:"), std::string::npos);
  EXPECT_NE(metrics_address, "127.0.0.1:0") << "the actual port, not the requested one";

  auto human = run({"status", "--data-dir", data.string()});
  EXPECT_EQ(human.code, 0);
  EXPECT_NE(human.out.find("data dir  " + data.string()), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("http://" + metrics_address + "/metrics"), std::string::npos);
  EXPECT_NE(human.out.find("store     " + (data / "store").string() + ", schema v"),
            std::string::npos)
      << human.out;

  // With no LLM configured, the demo endpoint: as many requests at once as a campaign's sessions.
  EXPECT_NE(human.out.find("\n  llm       demo: up, breaker closed, concurrency 8, 0 in flight, "
                           "0 queued\n"),
            std::string::npos)
      << human.out;

  auto scrape = http_get("http://" + metrics_address + "/metrics");
  for (auto family : {"opforge_uptime_seconds", "opforge_queue_depth",
                      "opforge_store_write_latency_seconds", "opforge_build_info{version=\""})
    EXPECT_NE(scrape.find(family), std::string::npos) << family << " missing from\n" << scrape;

  auto stopped = run({"shutdown", "--data-dir", data.string()});
  EXPECT_EQ(stopped.code, 0) << stopped.err;
  EXPECT_EQ(stopped.out, "the daemon is shutting down\n");
  EXPECT_EQ(wait_for_daemon(), 0) << slurp(dir / "serve.err");
  EXPECT_NE(slurp(dir / "serve.err").find("stopped cleanly"), std::string::npos);
}

// `check` and `status` show each LLM endpoint with its concurrency and, when it sends fewer
// requests at once than a campaign runs sessions, how many of those wait; `status`, and `check`
// while a daemon answers, add its live state, breaker, load and last error.
TEST_F(CliTest, CheckAndStatusShowEachEndpointAndItsConcurrency) {
  write("quiet.yaml", "local_workers: []\nworkers: {listen: '" + workers_endpoint() +
                          "', allow_unauthenticated: true}\nllm: {endpoints: [{name: far, "
                          "base_url: 'http://127.0.0.1:9/v1', model: m, concurrency: 2}]}\n");
  const std::string configured =
      "llm endpoint far: m at http://127.0.0.1:9/v1, concurrency 2 (campaigns.concurrency is 8: 6 "
      "of a campaign's sessions wait for this endpoint)\n";
  const std::string live = "  llm       far: up, breaker closed, concurrency 2 (campaigns."
                           "concurrency is 8: 6 of a campaign's sessions wait for this endpoint), "
                           "0 in flight, 0 queued\n";
  std::vector<std::string> check{"check", "--config", (dir / "quiet.yaml").string(), "--data-dir",
                                 data.string()};
  auto checked = run(check);
  EXPECT_EQ(checked.code, 0) << checked.err;
  EXPECT_NE(checked.out.find(configured), std::string::npos) << checked.out;
  EXPECT_NE(shorten(checked.out)
                .find("llm endpoints live: no daemon answers at ipc://DIR/var/control.sock (start "
                      "one with `opforge serve`)\n"),
            std::string::npos)
      << checked.out;

  serve("");
  auto status = run({"status", "--json", "--data-dir", data.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  auto llm = nlohmann::json::parse(status.out).at("llm");
  EXPECT_EQ(llm.at("campaign_concurrency"), 8);
  ASSERT_EQ(llm.at("endpoints").size(), 1u) << llm;
  const auto& far = llm.at("endpoints")[0];
  EXPECT_EQ(far.at("name"), "far");
  EXPECT_EQ(far.at("model"), "m");
  EXPECT_EQ(far.at("state"), "up");
  EXPECT_EQ(far.at("breaker"), "closed");
  EXPECT_EQ(far.at("concurrency"), 2);
  EXPECT_EQ(far.at("concurrency_shortfall"), 6);
  EXPECT_EQ(far.at("in_flight"), 0);
  EXPECT_EQ(far.at("last_error"), "");
  auto human = run({"status", "--data-dir", data.string()});
  EXPECT_NE(human.out.find(live), std::string::npos) << human.out;
  checked = run(check);
  EXPECT_EQ(checked.code, 0) << checked.err;
  EXPECT_NE(checked.out.find(configured), std::string::npos) << checked.out;
  EXPECT_NE(checked.out.find("llm endpoints live (the daemon at ipc://" +
                             (data / "control.sock").string() + "):\n" + live),
            std::string::npos)
      << checked.out;
  EXPECT_EQ(run({"shutdown", "--data-dir", data.string()}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
}

TEST_F(CliTest, SigtermStopsTheDaemonCleanly) {
  serve("");
  ASSERT_GT(daemon, 0);
  ::kill(daemon, SIGTERM);
  EXPECT_EQ(wait_for_daemon(), 0);
  auto log = slurp(dir / "serve.err");
  EXPECT_NE(log.find("shutting down: received SIGTERM"), std::string::npos) << log;
}

// Garbage on the control socket gets an error reply, and the daemon keeps answering.
TEST_F(CliTest, MalformedControlRequestsGetErrorReplies) {
  serve("");
  zmq::context_t zmq;
  auto ask = [&](const std::string& bytes) {
    zmq::socket_t req{zmq, zmq::socket_type::req};
    req.set(zmq::sockopt::linger, 0);
    req.set(zmq::sockopt::rcvtimeo, 30000);
    req.connect("ipc://" + (data / "control.sock").string());
    req.send(zmq::buffer(bytes), zmq::send_flags::none);
    zmq::message_t reply;
    EXPECT_TRUE(req.recv(reply));
    auto bytes_in = reply.to_string();
    return nlohmann::json::from_msgpack(bytes_in);
  };
  auto pack = [](const nlohmann::json& value) {
    auto bytes = nlohmann::json::to_msgpack(value);
    return std::string{bytes.begin(), bytes.end()};
  };
  auto error_of = [&](const std::string& bytes) {
    auto reply = ask(bytes);
    EXPECT_EQ(reply["ok"], false);
    return reply.value("error", std::string{});
  };
  EXPECT_EQ(error_of("\xc1"), "malformed request: frame_malformed: not msgpack: parse error");
  EXPECT_EQ(error_of(pack({1, 2})),
            "malformed request: frame_malformed: expected a map, got array");
  EXPECT_EQ(error_of(pack({{"type", "status"}})),
            "malformed request: frame_malformed: missing key 'v'");
  EXPECT_EQ(error_of(pack({{"v", 2}, {"type", "status"}})),
            "protocol version 2 is not supported; this daemon speaks 1");
  EXPECT_EQ(error_of(pack({{"v", 1}, {"type", 7}})),
            "malformed request: frame_malformed: key 'type': expected a string, got int");
  EXPECT_EQ(error_of(pack({{"v", 1}, {"type", "launch"}})),
            "unknown request type 'launch' (this daemon knows: status, workers, run, campaign, "
            "campaigns, cancel, sessions, show, kernels, regressions, revalidate, repair, export, "
            "import, import_status, imports, report, shutdown)");
  // An import's layout is parsed where the request arrives, naming the layouts there are.
  EXPECT_EQ(error_of(pack({{"v", 1}, {"type", "import"}, {"layout", "flat"}, {"source", "mine"}})),
            "import: 'layout' must be backendbench, candidates or torch-library, got 'flat'");
  EXPECT_EQ(ask(pack({{"v", 1}, {"type", "status"}}))["ok"], true);
  // Every word of the vocabulary the CLI sends reaches a handler (a request without its fields
  // may be refused, but not as unknown); shutdown, last, through the CLI.
  for (auto name : opforge::contract::enum_traits<opforge::request_type>::names) {
    if (name == "shutdown")
      continue;
    auto error = ask(pack({{"v", 1}, {"type", std::string{name}}})).value("error", "");
    EXPECT_EQ(error.rfind("unknown request type", 0), std::string::npos) << name << ": " << error;
  }
  EXPECT_EQ(run({"shutdown", "--data-dir", data.string()}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
}

// The data directory, the store and the control socket are their owner's alone; another user is
// told so rather than "no daemon answers"; a request over control_max_request_bytes (32 MiB, room
// for a model set) is refused by the client saying so, dropped unread by the daemon from a peer
// that sends it anyway, and the daemon goes on answering.
TEST_F(CliTest, TheDaemonsFilesAndSocketAreItsOwnersAlone) {
  serve("");
  auto mode = [](const fs::path& path) { return fs::status(path).permissions() & fs::perms::all; };
  EXPECT_EQ(mode(data), fs::perms::owner_all);
  EXPECT_EQ(mode(data / "control.sock"), fs::perms::owner_read | fs::perms::owner_write);
  for (auto& entry : fs::recursive_directory_iterator(data))
    EXPECT_EQ(mode(entry.path()) & (fs::perms::group_all | fs::perms::others_all), fs::perms::none)
        << entry.path();

  // Another user: root runs the CLI as nobody; anyone else takes its own write permission away.
  bool root = ::geteuid() == 0;
  if (!root)
    fs::permissions(data / "control.sock", fs::perms::none);
  pid_t pid = ::fork();
  if (pid == 0) {
    int err_fd = ::open((dir / "other.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err_fd, STDERR_FILENO);
    if (root && (::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(126);
    auto data_dir = data.string();
    ::execl(opforge_binary.c_str(), opforge_binary.c_str(), "status", "--data-dir",
            data_dir.c_str(), nullptr);
    ::_exit(127);
  }
  EXPECT_EQ(wait_for(pid), 1);
  if (!root)
    fs::permissions(data / "control.sock", fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(shorten(slurp(dir / "other.err")),
            "opforge: permission denied on DIR/var/control.sock: the daemon's data directory and "
            "control socket belong to the user who runs it (run as that user, or choose another "
            "--data-dir)\n");

  zmq::context_t zmq;
  zmq::socket_t req{zmq, zmq::socket_type::req};
  req.set(zmq::sockopt::linger, 0);
  req.set(zmq::sockopt::rcvtimeo, 2000);
  req.connect("ipc://" + (data / "control.sock").string());
  req.send(zmq::buffer(std::string(opforge::control_max_request_bytes + 1, 'x')),
           zmq::send_flags::none);
  zmq::message_t reply;
  EXPECT_FALSE(req.recv(reply)) << "an oversized request was answered";
  EXPECT_EQ(run({"status", "--data-dir", data.string()}).code, 0);

  // Through the CLI's client it never leaves: {"pad": <str 32>, "type": "status", "v": 1} is
  // 1 + 4 + (5 + pad) + 5 + 7 + 2 + 1 bytes: with pad = limit - 24, one over the limit.
  auto endpoint = "ipc://" + (data / "control.sock").string();
  auto big = opforge::control_request(
      endpoint, opforge::request_type::status,
      {{"pad", std::string(opforge::control_max_request_bytes - 24, 'x')}}, 30s);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error(), opforge::errc::request_invalid);
  EXPECT_EQ(opforge::message(big.error()),
            "the request is 33554433 bytes; the control socket takes at most 33554432 bytes "
            "(32 MiB)");
  auto asked = opforge::control_request(endpoint, opforge::request_type::status, nullptr, 30s);
  ASSERT_TRUE(asked) << opforge::message(asked.error());
  EXPECT_EQ((*asked)["ok"], true);
  EXPECT_EQ(run({"shutdown", "--data-dir", data.string()}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
}

// A scripted worker (a DEALER speaking the wire protocol) registers; status counts it and
// workers lists it with what it announced.
TEST_F(CliTest, StatusAndWorkersShowAConnectedWorker) {
  serve("");
  opforge::wire::hello hello;
  hello.worker_id = "testhost:42:cafe";
  hello.role = opforge::contract::worker_role::device;
  hello.device_kind = "interpreter";
  hello.device_name = "cpu (triton interpreter)";
  hello.slots = 2;
  hello.jobs = {opforge::contract::job_kind::test, opforge::contract::job_kind::catalog};
  hello.toolchain = {{"python", "3.11"}, {"torch", "2.13"}, {"triton", "3.6"}};
  hello.fingerprint = "0123456789abcdef";
  hello.host = "testhost";
  hello.pid = 42;
  zmq::context_t zmq;
  zmq::socket_t dealer{zmq, zmq::socket_type::dealer};
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::routing_id, hello.worker_id);
  dealer.set(zmq::sockopt::rcvtimeo, 30000);
  dealer.connect(workers_endpoint());
  dealer.send(zmq::buffer(opforge::wire::encode(hello)), zmq::send_flags::none);
  zmq::message_t welcome;
  ASSERT_TRUE(dealer.recv(welcome)) << "no welcome";

  auto listed = run({"workers", "--json", "--data-dir", data.string()});
  ASSERT_EQ(listed.code, 0) << listed.err;
  auto workers = nlohmann::json::parse(listed.out)["workers"];
  ASSERT_EQ(workers.size(), 1u) << listed.out;
  EXPECT_EQ(workers[0]["worker_id"], hello.worker_id);
  EXPECT_EQ(workers[0]["role"], "device");
  EXPECT_EQ(workers[0]["device_kind"], "interpreter");
  EXPECT_EQ(workers[0]["fingerprint"], hello.fingerprint);
  EXPECT_EQ(workers[0]["slots"], 2);
  EXPECT_EQ(workers[0]["busy"], 0);
  EXPECT_EQ(workers[0]["state"], "idle");
  EXPECT_EQ(workers[0]["toolchain"]["torch"], "2.13");

  auto line = run({"workers", "--data-dir", data.string()});
  EXPECT_EQ(line.out.rfind("testhost:42:cafe  device/interpreter  cpu (triton interpreter)  "
                           "toolchain 0123456789abcdef  0/2 slots busy  heartbeat ",
                           0),
            0u)
      << line.out;

  auto status = run({"status", "--json", "--data-dir", data.string()});
  ASSERT_EQ(status.code, 0);
  auto reply = nlohmann::json::parse(status.out);
  EXPECT_EQ(reply["workers"]["endpoint"], workers_endpoint());
  EXPECT_EQ(reply["workers"]["connected"]["interpreter"]["idle"], 1) << status.out;
  EXPECT_EQ(reply["workers"]["queued"], 0);
  auto human = run({"status", "--data-dir", data.string()});
  EXPECT_NE(human.out.find("  workers   " + workers_endpoint() + ", 1 live (interpreter idle 1)"),
            std::string::npos)
      << human.out;

  EXPECT_EQ(run({"shutdown", "--data-dir", data.string()}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
}

// The real Python worker under the daemon's supervisor: a lint worker (no device, quick to start)
// registers and shows up.
TEST_F(CliTest, SupervisedPythonWorkerShowsUp) {
  write("quiet.yaml", "local_workers: [{role: lint}]\npython: '" + std::string{OPFORGE_PYTHON} +
                          "'\nworkers: {listen: '" + workers_endpoint() + "'}\n");
  serve("");
  nlohmann::json workers;
  auto deadline = std::chrono::steady_clock::now() + process_bound;
  while (workers.empty() && std::chrono::steady_clock::now() < deadline) {
    auto listed = run({"workers", "--json", "--data-dir", data.string()});
    ASSERT_EQ(listed.code, 0) << listed.err;
    workers = nlohmann::json::parse(listed.out)["workers"];
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(workers.size(), 1u) << slurp(dir / "serve.err");
  EXPECT_EQ(workers[0]["role"], "lint");
  EXPECT_EQ(workers[0]["device_kind"], "none");
  EXPECT_EQ(workers[0]["fingerprint"].get<std::string>().size(), 16u);
  EXPECT_EQ(run({"shutdown", "--data-dir", data.string()}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
  EXPECT_NE(slurp(dir / "serve.err").find("said goodbye"), std::string::npos)
      << "the worker left cleanly on shutdown";
}

// Counters whose label values are known at start are scraped at 0 before anything happens, so
// that rate() and increase() see their first step: every job kind x job status, both session
// outcomes, every summary method, and every chat outcome of each configured endpoint.
TEST_F(CliTest, ServeScrapesKnownCounterSeriesAtZeroFromTheStart) {
  write("quiet.yaml", "local_workers: []\nworkers: {listen: '" + workers_endpoint() +
                          "'}\nllm: {endpoints: [{name: nowhere, base_url: "
                          "'http://127.0.0.1:9/v1', model: nobody}]}\n");
  auto status = serve();
  auto scrape = http_get("http://" + status["metrics"].get<std::string>() + "/metrics");
  using opforge::contract::enum_traits;
  auto expect_zero = [&](const std::string& series) {
    EXPECT_NE(scrape.find("\n" + series + " 0\n"), std::string::npos) << series << " missing from\n"
                                                                      << scrape;
  };
  for (auto kind : enum_traits<opforge::contract::job_kind>::names)
    for (auto outcome : enum_traits<opforge::contract::job_status>::names)
      expect_zero("opforge_jobs_total{kind=\"" + std::string{kind} + "\",outcome=\"" +
                  std::string{outcome} + "\"}");
  expect_zero(R"(opforge_sessions_ended_total{outcome="SUCCESS"})");
  expect_zero(R"(opforge_sessions_ended_total{outcome="FAILED"})");
  for (auto method : enum_traits<opforge::summary_method>::names)
    expect_zero("opforge_summaries_total{method=\"" + std::string{method} + "\"}");
  for (auto outcome : enum_traits<opforge::chat_outcome>::names)
    expect_zero("opforge_llm_requests_total{endpoint=\"nowhere\",outcome=\"" +
                std::string{outcome} + "\"}");
}
