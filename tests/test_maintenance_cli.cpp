// Re-validation through the real daemon: its store holds a kernel proved on one toolchain, a
// scripted worker (a DEALER speaking the wire protocol) connects with another fingerprint, and
// the daemon sends it the kernel's test pinned there by itself; `opforge status` shows the
// toolchain's progress, `opforge regressions` the failure, and `opforge revalidate` forces the
// test again, or refuses a fingerprint no worker has.

#include "actors/library/kernels.hpp"
#include "messages/contract_codec.hpp"
#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/cli_test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

using namespace opforge;
using namespace opforge::cli_testing;
using ::testing::HasSubstr;

namespace {

constexpr auto fingerprint = "0123456789abcdef";

class MaintenanceCli : public CliTest {
protected:
  void SetUp() override {
    CliTest::SetUp();
    write("quiet.yaml", "local_workers: []\nworkers: {listen: '" + workers_endpoint() +
                            "', heartbeat_ms: 600000, allow_unauthenticated: true}\n"
                            "maintenance: {poll_ms: 50}\n");
    kernel_record abs;
    abs.op = "abs";
    abs.wrapper = "abs_wrapper";
    abs.source = "def abs_wrapper(x):\n    return x.abs()\n";
    abs.dtypes = {"float32"};
    abs.origin = "campaign";
    abs.tests_run = abs.tests_passed = 8;
    abs.toolchain = "aaaaaaaaaaaaaaaa";
    abs.toolchain_versions = {{"triton", "3.5.1"}};
    abs.device_kind = "interpreter";
    abs.accepted_at_ms = 1764000000000;
    fs::create_directories(data);
    auto db = open_rocksdb_store(data / "store");
    ASSERT_TRUE(db) << render(db.error());
    ASSERT_FALSE((*db)->write({accept_kernel(abs), true}));
    ASSERT_FALSE((*db)->close());
    serve("");
  }

  void connect() {
    wire::hello hello;
    hello.worker_id = "testhost:42:cafe";
    hello.role = contract::worker_role::device;
    hello.device_kind = "interpreter";
    hello.device_name = "cpu (triton interpreter)";
    hello.slots = 1;
    hello.jobs = {contract::job_kind::test, contract::job_kind::catalog};
    hello.toolchain = {{"triton", "3.6.0"}};
    hello.fingerprint = fingerprint;
    hello.host = "testhost";
    hello.pid = 42;
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::routing_id, hello.worker_id);
    dealer.set(zmq::sockopt::rcvtimeo, 30000);
    dealer.connect(workers_endpoint());
    dealer.send(zmq::buffer(wire::encode(hello)), zmq::send_flags::none);
    zmq::message_t welcome;
    ASSERT_TRUE(dealer.recv(welcome)) << "no welcome";
  }

  /// Waits for the next test job and answers it with `result`; returns its request.
  contract::test_request answer(contract::test_result result) {
    for (;;) {
      zmq::message_t frame;
      if (!dealer.recv(frame)) {
        ADD_FAILURE() << "no job came";
        return {};
      }
      auto message = wire::decode_daemon_message(frame.to_string_view(), 1 << 20);
      if (!message || !std::holds_alternative<wire::job>(*message))
        continue;
      const auto& job = std::get<wire::job>(*message);
      auto request = wire::decode_as<contract::test_request>(job.payload, "test_request");
      EXPECT_TRUE(request) << render(request.error());
      wire::result done{.job_id = job.job_id,
                        .status = contract::job_status::done,
                        .payload = contract::codec::to_bytes(result),
                        .elapsed_ms = 5};
      dealer.send(zmq::buffer(wire::encode(done)), zmq::send_flags::none);
      return request ? *request : contract::test_request{};
    }
  }

  nlohmann::json toolchain_status() {
    auto status = run({"status", "--json", "--data-dir", data.string()});
    EXPECT_EQ(status.code, 0) << status.err;
    auto reply = nlohmann::json::parse(status.out);
    for (auto& t : reply["maintenance"]["toolchains"])
      if (t["fingerprint"] == fingerprint)
        return t;
    return {};
  }

  bool settled(uint64_t passed, uint64_t failed) {
    for (int i = 0; i < 250; ++i) {
      auto t = toolchain_status();
      if (!t.is_null() && t["owed"] == 0 && t["passed"] == passed && t["failed"] == failed)
        return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  zmq::context_t zmq;
  zmq::socket_t dealer{zmq, zmq::socket_type::dealer};
};

} // namespace

TEST_F(MaintenanceCli, ANewFingerprintIsRevalidatedAndRevalidateForcesItAgain) {
  connect();
  contract::test_result failed{
      .outcome = contract::outcome::accuracy_error, .tests_run = 8, .tests_passed = 3};
  failed.failure = contract::test_failure{
      .dtype = "float32", .sample_set = "opinfo", .sample_index = 4, .message = "max abs error 2"};
  auto request = answer(failed);
  EXPECT_EQ(request.op, "abs");
  EXPECT_EQ(request.source, "def abs_wrapper(x):\n    return x.abs()\n");
  ASSERT_TRUE(settled(0, 1));
  auto line = run({"status", "--data-dir", data.string()});
  EXPECT_THAT(line.out, HasSubstr("maintenance interpreter 0123456789abcdef live: 0 owed (0 "
                                  "running), 0 passed, 1 failed; 1 regressions"));
  auto regressions = run({"regressions", "--json", "--data-dir", data.string()});
  auto listed = nlohmann::json::parse(regressions.out)["regressions"];
  ASSERT_EQ(listed.size(), 1u) << regressions.out;
  EXPECT_EQ(listed[0]["change"], "triton 3.5.1 -> 3.6.0");

  auto refused =
      run({"revalidate", "--fingerprint", "feedfacefeedface", "--data-dir", data.string()});
  EXPECT_EQ(refused.code, 1);
  EXPECT_THAT(refused.err, HasSubstr("no connected device worker has toolchain fingerprint "
                                     "'feedfacefeedface'"));

  auto forced = run({"revalidate", "--fingerprint", fingerprint, "--device", "interpreter",
                     "--json", "--data-dir", data.string()});
  ASSERT_EQ(forced.code, 0) << forced.err;
  auto owed = nlohmann::json::parse(forced.out)["toolchains"];
  ASSERT_EQ(owed.size(), 1u);
  EXPECT_EQ(owed[0]["owed"], 1);
  EXPECT_EQ(answer({.outcome = contract::outcome::pass, .tests_run = 8, .tests_passed = 8}).op,
            "abs");
  ASSERT_TRUE(settled(1, 0));
  EXPECT_EQ(nlohmann::json::parse(
                run({"regressions", "--json", "--data-dir", data.string()}).out)["regressions"]
                .size(),
            0u);
}

// The real interpreter worker under the daemon's supervisor announces no CUDA or driver version;
// `opforge revalidate` in text mode lists its toolchain without them (it used to abort on them).
TEST_F(CliTest, RevalidateListsARealInterpreterWorkersToolchainAsText) {
  write("quiet.yaml", "local_workers: [{role: device, kind: interpreter, count: 1, slots: 1}]\n"
                      "python: '" +
                          std::string{OPFORGE_PYTHON} + "'\nworkers: {listen: '" +
                          workers_endpoint() + "'}\n");
  serve("");
  nlohmann::json worker;
  // Past process_bound: the worker imports torch and triton on a machine the suite shares.
  auto deadline = std::chrono::steady_clock::now() + 2 * process_bound;
  while (worker.is_null() && std::chrono::steady_clock::now() < deadline) {
    auto listed = run({"workers", "--json", "--data-dir", data.string()});
    ASSERT_EQ(listed.code, 0) << listed.err;
    auto reply = nlohmann::json::parse(listed.out);
    for (auto& w : reply["workers"])
      if (w["device_kind"] == "interpreter" && w["state"] != "dead")
        worker = w;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(worker.is_null()) << slurp(dir / "serve.err");
  const auto& toolchain = worker["toolchain"];
  EXPECT_EQ(toolchain["cuda"], "");
  EXPECT_EQ(toolchain["driver"], "");
  auto fingerprint = worker["fingerprint"].get<std::string>();
  ASSERT_EQ(fingerprint.size(), 16u);

  auto listed = run({"revalidate", "--data-dir", data.string()});
  ASSERT_EQ(listed.code, 0) << listed.err;
  auto version = [&](const char* name) { return toolchain[name].get<std::string>(); };
  EXPECT_EQ(listed.out,
            "DEVICE       FINGERPRINT       OWED  RUNNING  PASSED  FAILED  TOOLCHAIN\n"
            "interpreter  " +
                fingerprint + "  0     0        0       0       device " + version("device") +
                " python " + version("python") + " torch " + version("torch") + " triton " +
                version("triton") +
                "\n(verdicts older than this request no longer count there; `opforge status` "
                "shows the progress)\n");
}
