// Worker authentication through the real binary (issue 17, item 1): `opforge keys`, a daemon that
// refuses to listen beyond loopback without keys, and a running daemon that refuses a worker
// whose key it does not know until the key is on the allow-list and SIGHUP reloads it.

#include "messages/wire.hpp"
#include "tests/cli_test_support.hpp"

#include <regex>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zmq.hpp>

using namespace opforge;
using namespace opforge::cli_testing;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

// The Z85 key of a `public-key = "..."` line in a ZeroMQ certificate file.
std::string public_key_in(const fs::path& file) {
  std::smatch match;
  auto text = slurp(file);
  if (!std::regex_search(text, match, std::regex{R"re(public-key = "([^"]{40})")re"}))
    ADD_FAILURE() << "no public key in " << file << ":\n" << text;
  return match.size() > 1 ? match[1].str() : "";
}

unsigned mode_of(const fs::path& file) {
  struct stat st {};
  EXPECT_EQ(::stat(file.c_str(), &st), 0) << file;
  return st.st_mode & 0777;
}

// A worker played by the test, with its own CURVE key pair.
class curve_worker {
public:
  curve_worker(zmq::context_t& context, const std::string& endpoint, const std::string& id,
               const std::string& server_public, const std::string& public_key,
               const std::string& secret_key)
      : socket_{context, zmq::socket_type::dealer} {
    socket_.set(zmq::sockopt::routing_id, id);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::curve_serverkey, server_public);
    socket_.set(zmq::sockopt::curve_publickey, public_key);
    socket_.set(zmq::sockopt::curve_secretkey, secret_key);
    socket_.connect(endpoint);
    wire::hello hello;
    hello.worker_id = id;
    hello.role = contract::worker_role::device;
    hello.device_kind = "interpreter";
    hello.slots = 1;
    hello.jobs = {contract::job_kind::test};
    hello.fingerprint = "0123456789abcdef";
    hello.host = "forger";
    hello.pid = 1;
    socket_.send(zmq::buffer(wire::encode(hello)), zmq::send_flags::none);
  }

  /// Whether the daemon welcomes it within `within`.
  bool welcomed(std::chrono::milliseconds within) {
    socket_.set(zmq::sockopt::rcvtimeo, static_cast<int>(within.count()));
    zmq::message_t frame;
    if (!socket_.recv(frame))
      return false;
    auto message = wire::decode_daemon_message(frame.to_string_view(), 1 << 20);
    return message && std::holds_alternative<wire::welcome>(*message);
  }

private:
  zmq::socket_t socket_;
};

class WorkerAuthCli : public CliTest {
protected:
  void SetUp() override {
    CliTest::SetUp();
    // The default: CURVE, with no allow_unauthenticated.
    write("quiet.yaml", "local_workers: []\nworkers: {listen: '" + workers_endpoint() +
                            "', heartbeat_ms: 600000}\n");
  }

  std::vector<std::string> in_data(std::vector<std::string> args) const {
    args.insert(args.end(), {"--data-dir", data.string()});
    return args;
  }

  std::vector<std::string> workers_listed() {
    auto listed = run({"workers", "--json", "--data-dir", data.string()});
    EXPECT_EQ(listed.code, 0) << listed.err;
    std::vector<std::string> ids;
    auto reply = nlohmann::json::parse(listed.out);
    for (auto& w : reply["workers"])
      ids.push_back(w["worker_id"]);
    return ids;
  }

  // Waits until the daemon's log has `text`.
  bool logged(const std::string& text) {
    auto deadline = std::chrono::steady_clock::now() + process_bound;
    while (std::chrono::steady_clock::now() < deadline) {
      if (slurp(dir / "serve.err").find(text) != std::string::npos)
        return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
};

} // namespace

TEST_F(WorkerAuthCli, KeysGenerateAndListWithoutADaemon) {
  auto none = run(in_data({"keys", "list"}));
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_THAT(shorten(none.out), HasSubstr("server   (none yet"));
  EXPECT_THAT(shorten(none.out), HasSubstr("allowed  (none in DIR/var/keys/allowed)"));

  auto server = run(in_data({"keys", "generate", "--server"}));
  ASSERT_EQ(server.code, 0) << server.err;
  auto server_key = public_key_in(data / "keys" / "server.key");
  EXPECT_EQ(public_key_in(data / "keys" / "server.key_secret"), server_key);
  EXPECT_EQ(mode_of(data / "keys" / "server.key_secret"), 0600u);
  EXPECT_EQ(mode_of(data / "keys"), 0700u);
  EXPECT_THAT(server.out, HasSubstr("public key:      " + server_key));
  EXPECT_THAT(slurp(data / "keys" / "server.key_secret"), HasSubstr("secret-key = \""));
  EXPECT_THAT(slurp(data / "keys" / "server.key"), Not(HasSubstr("secret-key")));

  auto again = run(in_data({"keys", "generate", "--server"}));
  EXPECT_EQ(again.code, 2);
  EXPECT_THAT(again.err, HasSubstr("the daemon already has a key pair"));
  EXPECT_THAT(again.err, HasSubstr("--force"));
  EXPECT_EQ(public_key_in(data / "keys" / "server.key"), server_key) << "kept";
  ASSERT_EQ(run(in_data({"keys", "generate", "--server", "--force"})).code, 0);
  auto replaced = public_key_in(data / "keys" / "server.key");
  EXPECT_NE(replaced, server_key);

  auto worker = run(in_data({"keys", "generate", "host-a"}));
  ASSERT_EQ(worker.code, 0) << worker.err;
  auto worker_key = public_key_in(data / "keys" / "workers" / "host-a.key_secret");
  EXPECT_EQ(mode_of(data / "keys" / "workers" / "host-a.key_secret"), 0600u);
  EXPECT_EQ(public_key_in(data / "keys" / "allowed" / "host-a.key"), worker_key);
  EXPECT_THAT(slurp(data / "keys" / "allowed" / "host-a.key"), Not(HasSubstr("secret-key")));
  EXPECT_THAT(worker.out, HasSubstr("--key-file host-a.key_secret"));
  EXPECT_EQ(run(in_data({"keys", "generate", "host-a"})).code, 2) << "never overwrites a key";

  auto listed = run(in_data({"keys", "list"}));
  ASSERT_EQ(listed.code, 0) << listed.err;
  EXPECT_EQ(shorten(listed.out), "server   " + replaced + "  DIR/var/keys/server.key_secret\n" +
                                     "allowed  " + worker_key + "  host-a.key\n");

  auto bad_name = run(in_data({"keys", "generate", "../elsewhere"}));
  EXPECT_EQ(bad_name.code, 2);
  EXPECT_THAT(bad_name.err, HasSubstr("key name '../elsewhere'"));
  auto neither = run(in_data({"keys", "generate"}));
  EXPECT_EQ(neither.code, 2);
  EXPECT_THAT(neither.err, HasSubstr("name a worker (NAME) or pass --server"));
}

TEST_F(WorkerAuthCli, ListeningBeyondLoopbackNeedsKeys) {
  expect_bad_config(
      in_data({"serve", "--config", (dir / "quiet.yaml").string(), "--metrics-listen", "",
               "--workers-listen", "tcp://0.0.0.0:*"}),
      "workers.listen 'tcp://0.0.0.0:*': workers on other hosts must authenticate with ZeroMQ "
      "CURVE, and the daemon has no key pair at 'DIR/var/keys/server.key_secret' (create it with "
      "`opforge keys generate --server`, admit each worker with `opforge keys generate NAME`, or "
      "listen on 127.0.0.1 or ipc://)");
  EXPECT_FALSE(fs::exists(data / "keys" / "server.key_secret")) << "none made up for a remote bind";

  write("open.yaml", "local_workers: []\nworkers: {listen: 'tcp://0.0.0.0:*', "
                     "allow_unauthenticated: true}\n");
  expect_bad_config(in_data({"serve", "--config", (dir / "open.yaml").string()}),
                    "DIR/open.yaml: 'workers.allow_unauthenticated' is true, but workers.listen "
                    "'tcp://0.0.0.0:*' is reachable from other hosts: workers there must "
                    "authenticate with ZeroMQ CURVE (set it to false, or listen on ipc:// or "
                    "127.0.0.1)");

  // `opforge check` says the same, and creates nothing either.
  write("remote.yaml", "local_workers: []\nworkers: {listen: 'tcp://0.0.0.0:*'}\n");
  auto check = run(in_data({"check", "--config", (dir / "remote.yaml").string()}));
  EXPECT_EQ(check.code, 2);
  EXPECT_THAT(check.err, HasSubstr("must authenticate with ZeroMQ CURVE, and the daemon has no key "
                                   "pair"));
  EXPECT_FALSE(fs::exists(data / "keys" / "server.key_secret"));

  // With its key pair, the same daemon starts.
  ASSERT_EQ(run(in_data({"keys", "generate", "--server"})).code, 0);
  check = run(in_data({"check", "--config", (dir / "remote.yaml").string()}));
  EXPECT_EQ(check.code, 0) << check.err;
  EXPECT_THAT(
      shorten(check.out),
      HasSubstr("workers: CURVE on tcp://0.0.0.0:*, server key "
                "DIR/var/keys/server.key_secret, allow-list DIR/var/keys/allowed (0 keys)"));
  write("quiet.yaml", slurp(dir / "remote.yaml"));
  auto status = serve("");
  EXPECT_THAT(status["workers"]["endpoint"].get<std::string>(), HasSubstr("tcp://0.0.0.0:"));
  EXPECT_EQ(run(in_data({"shutdown"})).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
}

// A worker speaking the protocol perfectly is refused while its key is unknown: it is never
// welcomed, never listed and so never given a test to forge an answer to. Its key (never its
// secret) is logged. Once its public key file is in the allow-list, SIGHUP admits it.
TEST_F(WorkerAuthCli, OnlyAllowedKeysRegisterAndSighupReloadsTheAllowList) {
  serve("");
  auto server_key = public_key_in(data / "keys" / "server.key");
  ASSERT_EQ(mode_of(data / "keys" / "server.key_secret"), 0600u);
  char public_key[41], secret_key[41];
  ASSERT_EQ(zmq_curve_keypair(public_key, secret_key), 0);

  zmq::context_t context;
  {
    curve_worker forger{context, workers_endpoint(), "forger", server_key, public_key, secret_key};
    EXPECT_FALSE(forger.welcomed(1500ms));
  }
  EXPECT_TRUE(workers_listed().empty());
  ASSERT_TRUE(logged(std::string{"refused key "} + public_key));
  EXPECT_THAT(slurp(dir / "serve.err"), Not(HasSubstr(secret_key)));

  write("newcomer.key", std::string{"metadata\ncurve\n    public-key = \""} + public_key + "\"\n");
  fs::copy_file(dir / "newcomer.key", data / "keys" / "allowed" / "newcomer.key");
  ASSERT_EQ(::kill(daemon, SIGHUP), 0);
  ASSERT_TRUE(logged("SIGHUP: the allow-list " + (data / "keys" / "allowed").string() +
                     " admits 1 key(s)"));
  curve_worker admitted{context,    workers_endpoint(), "newcomer",
                        server_key, public_key,         secret_key};
  EXPECT_TRUE(admitted.welcomed(std::chrono::milliseconds{process_bound}));
  EXPECT_EQ(workers_listed(), std::vector<std::string>{"newcomer"}) << slurp(dir / "serve.err");
  EXPECT_EQ(run(in_data({"shutdown"})).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0);
}
