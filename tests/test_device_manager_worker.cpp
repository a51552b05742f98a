// The whole device path with real parts: the supervisor starts Python workers (opforge_worker),
// which connect to the device manager's ZeroMQ socket, register, and answer jobs; workers that go
// silent or exit under a job leave its verdict to another.

#include "actors/fleet/spawn_device_manager.hpp"
#include "actors/library/library.hpp"
#include "actors/store/store.hpp"
#include "devices/supervisor.hpp"
#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"
#include "messages/system_config.hpp"
#include "tests/test_real_workers.hpp"
#include "tests/test_store_support.hpp"

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <prometheus/text_serializer.h>

using namespace opforge;
using namespace std::chrono_literals;

namespace {

std::string lint_payload() {
  std::map<std::string, std::string> payload{
      {"source", "import triton\nimport triton.language as tl\n\n@triton.jit\n"
                 "def exp_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
                 "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
                 "    mask = offs < n\n"
                 "    tl.store(y_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=mask)), "
                 "mask=mask)\n"},
      {"op", "exp"},
      {"wrapper", "exp_wrapper"},
      {"profile", "interpreter"}};
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, payload);
  return {buffer.data(), buffer.size()};
}

// A test of the worked example exp kernel, which passes on the interpreter.
std::string exp_test_payload() {
  std::stringstream source;
  source << std::ifstream{OPFORGE_SOURCE_DIR "/config/examples/exp.py"}.rdbuf();
  auto bytes = nlohmann::json::to_msgpack({{"op", "exp"},
                                           {"variant", ""},
                                           {"source", source.str()},
                                           {"wrapper", "exp_wrapper"},
                                           {"dtypes", {"float32"}},
                                           {"mode", "first_failure"},
                                           {"seed", 0},
                                           {"timeout_s", 120}});
  return {bytes.begin(), bytes.end()};
}

// Shuts the manager down however the test ends: the actor system waits for it.
struct shutdown_guard {
  caf::scoped_actor& self;
  device_manager_actor manager;
  ~shutdown_guard() {
    self->request(manager, 10s, atom::shutdown_v).receive([](atom::ok) {}, [](caf::error&) {});
  }
};

} // namespace

TEST(RealWorker, ALintWorkerStartedByTheSupervisorServesALintJob) {
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  device_manager_config config;
  config.listen = "tcp://127.0.0.1:*";
  auto manager = spawn_device_manager(sys, config, std::make_shared<metrics>("test"));
  ASSERT_TRUE(manager) << render(manager.error());
  shutdown_guard guard{self, *manager};
  std::string endpoint;
  self->request(*manager, 10s, atom::status_v)
      .receive([&](device_manager_status& status) { endpoint = status.endpoint; },
               [&](caf::error& err) { FAIL() << render(err); });

  auto workers = opforge::testing::real_workers(
      {{.device_kind = "none", .count = 1, .slots = 1, .role = "lint"}}, endpoint);
  auto supervised = supervisor::start(workers);
  ASSERT_TRUE(supervised) << render(supervised.error());

  device_job job{.id = "l-1",
                 .kind = contract::job_kind::lint,
                 .payload = lint_payload(),
                 .deadline_ms = 60000};
  std::optional<device_job_result> result;
  self->request(*manager, 120s, atom::submit_v, job)
      .receive([&](device_job_result& x) { result = std::move(x); },
               [&](caf::error& err) { ADD_FAILURE() << render(err); });
  std::vector<worker_info> registered;
  self->request(*manager, 10s, atom::workers_v)
      .receive([&](std::vector<worker_info>& x) { registered = std::move(x); },
               [&](caf::error& err) { ADD_FAILURE() << render(err); });
  (*supervised)->stop();

  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, contract::job_status::done) << result->error;
  EXPECT_EQ(result->fingerprint.size(), 16u);
  auto handle = wire::unpack(result->payload);
  ASSERT_TRUE(handle);
  auto answer = wire::map_reader::of(handle->get());
  ASSERT_TRUE(answer);
  EXPECT_TRUE(answer->boolean("ok")) << "lint answer without 'ok'";
  ASSERT_EQ(registered.size(), 1u);
  EXPECT_EQ(registered[0].role, contract::worker_role::lint);
  EXPECT_EQ(registered[0].device_kind, "none");
  EXPECT_EQ(registered[0].worker_id, result->worker_id);
}

// Workers vanish under a job of a correct kernel: one goes silent (SIGSTOP) and one exits
// (SIGKILL). Each time the job is finished by another worker with its real verdict, a pass; the
// candidate is never blamed for the workers it was running on.
TEST(RealWorker, AJobWhoseWorkerGoesSilentOrExitsGetsItsVerdictFromAnother) {
  ::setenv("TRITON_INTERPRET", "1", 1);
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  device_manager_config config;
  config.listen = "tcp://127.0.0.1:*";
  auto manager = spawn_device_manager(sys, config, std::make_shared<metrics>("test"));
  ASSERT_TRUE(manager) << render(manager.error());
  shutdown_guard guard{self, *manager};
  std::string endpoint;
  self->request(*manager, 10s, atom::status_v)
      .receive([&](device_manager_status& status) { endpoint = status.endpoint; },
               [&](caf::error& err) { FAIL() << render(err); });
  auto supervised = supervisor::start(opforge::testing::real_workers(
      {{.device_kind = "interpreter", .count = 2, .slots = 1, .role = "device"}}, endpoint));
  ASSERT_TRUE(supervised) << render(supervised.error());

  // The pid of the worker running a job, once one is.
  auto busy_worker = [&]() -> pid_t {
    caf::scoped_actor poller{sys};
    for (int i = 0; i < 1200; ++i) {
      pid_t pid = 0;
      poller->request(*manager, 10s, atom::workers_v)
          .receive(
              [&](std::vector<worker_info>& workers) {
                for (auto& worker : workers)
                  if (worker.busy > 0)
                    pid = static_cast<pid_t>(worker.pid);
              },
              [&](caf::error& err) { ADD_FAILURE() << render(err); });
      if (pid > 0)
        return pid;
      std::this_thread::sleep_for(100ms);
    }
    return 0;
  };
  auto verdict_after = [&](const std::string& id, int signal) -> std::string {
    device_job job{.id = id,
                   .kind = contract::job_kind::test,
                   .payload = exp_test_payload(),
                   .device_kind = "interpreter",
                   .deadline_ms = 300000};
    pid_t pid = 0;
    std::thread vanish{[&] {
      pid = busy_worker();
      if (pid > 0)
        ::kill(pid, signal);
    }};
    std::string outcome = "no answer";
    self->request(*manager, 300s, atom::submit_v, job)
        .receive(
            [&](device_job_result& result) {
              EXPECT_EQ(result.attempt, 2) << id;
              EXPECT_EQ(result.status, contract::job_status::done) << result.error;
              auto handle = wire::unpack(result.payload);
              ASSERT_TRUE(handle);
              auto fields = wire::map_reader::of(handle->get());
              ASSERT_TRUE(fields);
              auto said = fields->string_or("outcome", "no outcome");
              ASSERT_TRUE(said);
              outcome = *said;
            },
            [&](caf::error& err) { outcome = render(err); });
    vanish.join();
    EXPECT_GT(pid, 0) << "no worker took " << id;
    if (pid > 0 && signal == SIGSTOP)
      ::kill(pid, SIGKILL); // the supervisor starts another
    return outcome;
  };
  EXPECT_EQ(verdict_after("t-silent", SIGSTOP), "pass");
  EXPECT_EQ(verdict_after("t-exited", SIGKILL), "pass");
  device_manager_status status;
  self->request(*manager, 10s, atom::status_v)
      .receive([&](device_manager_status& x) { status = x; },
               [&](caf::error& err) { ADD_FAILURE() << render(err); });
  (*supervised)->stop();
  EXPECT_EQ(status.requeued, 2);
  EXPECT_EQ(status.lost, 0);
  EXPECT_EQ(status.done, 2);
}

// The report a real interpreter worker's conformance probes make reaches the daemon in its hello,
// is kept by the library in RocksDB, survives a restart of store and library, and sets the
// defects gauge. Triton 3.6's interpreter negates bfloat16 wrongly (negate_bfloat16).
TEST(RealWorker, ADeviceWorkersConformanceReportIsKeptAcrossARestart) {
  test::temp_dir dir;
  std::string fingerprint;
  {
    system_config cfg;
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    auto telemetry = std::make_shared<metrics>("test");
    auto store = spawn_store(sys, dir.db(), telemetry);
    ASSERT_TRUE(store) << render(store.error());
    auto kept = sys.spawn(library, *store, telemetry, std::string{"9.9.9"});
    device_manager_config config;
    config.listen = "tcp://127.0.0.1:*";
    config.conformance = kept;
    auto manager = spawn_device_manager(sys, config, telemetry);
    ASSERT_TRUE(manager) << render(manager.error());
    {
      shutdown_guard guard{self, *manager};
      std::string endpoint;
      self->request(*manager, 10s, atom::status_v)
          .receive([&](device_manager_status& status) { endpoint = status.endpoint; },
                   [&](caf::error& err) { FAIL() << render(err); });
      auto supervised = supervisor::start(opforge::testing::real_workers(
          {{.device_kind = "interpreter", .count = 1, .slots = 1, .role = "device"}}, endpoint));
      ASSERT_TRUE(supervised) << render(supervised.error());
      // The probes run before the worker connects: minutes on a loaded host without a cache.
      std::vector<contract::conformance_report> reports;
      for (auto deadline = std::chrono::steady_clock::now() + 600s;
           reports.empty() && std::chrono::steady_clock::now() < deadline;) {
        std::this_thread::sleep_for(500ms);
        self->request(kept, 10s, atom::conformance_v)
            .receive([&](std::vector<contract::conformance_report>& x) { reports = std::move(x); },
                     [&](caf::error& err) { FAIL() << render(err); });
      }
      std::vector<worker_info> registered;
      self->request(*manager, 10s, atom::workers_v)
          .receive([&](std::vector<worker_info>& x) { registered = std::move(x); },
                   [&](caf::error& err) { ADD_FAILURE() << render(err); });
      (*supervised)->stop();
      ASSERT_EQ(reports.size(), 1u);
      ASSERT_EQ(registered.size(), 1u);
      fingerprint = registered[0].fingerprint;
      EXPECT_EQ(reports[0].fingerprint, fingerprint);
      EXPECT_EQ(reports[0].device_kind, "interpreter");
      EXPECT_EQ(reports[0].error, "");
    }
    auto text = prometheus::TextSerializer{}.Serialize(telemetry->registry()->Collect());
    EXPECT_NE(text.find("opforge_toolchain_defects{device_kind=\"interpreter\",fingerprint=\"" +
                        fingerprint + "\"}"),
              std::string::npos)
        << text;
    caf::anon_send_exit(kept, caf::exit_reason::user_shutdown);
    self->request(*store, 10s, atom::shutdown_v).receive([](atom::ok) {}, [](caf::error&) {});
  }
  // A new daemon's store and library over the same database: the report is still there, and the
  // gauge is set again from it before any worker connects.
  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto telemetry = std::make_shared<metrics>("test");
  auto store = spawn_store(sys, dir.db(), telemetry);
  ASSERT_TRUE(store) << render(store.error());
  auto kept = sys.spawn(library, *store, telemetry, std::string{"9.9.9"});
  std::vector<contract::conformance_report> reports;
  self->request(kept, 10s, atom::conformance_v)
      .receive([&](std::vector<contract::conformance_report>& x) { reports = std::move(x); },
               [&](caf::error& err) { FAIL() << render(err); });
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].fingerprint, fingerprint);
  std::map<std::string, contract::toolchain_defect> by_probe;
  for (const auto& d : reports[0].defects)
    by_probe[d.probe] = d;
  ASSERT_TRUE(by_probe.count("negate_bfloat16")) << reports[0].defects.size() << " defects";
  const auto& negate = by_probe["negate_bfloat16"];
  EXPECT_EQ(negate.expression, "-x");
  EXPECT_EQ(negate.expected, "[-0.5, 0.25, -1.0, 3.0]");
  EXPECT_EQ(negate.actual, "[-8.0, 16.0, -4.0, 1.5]");
  EXPECT_EQ(negate.workaround, "(-x.to(tl.float32)).to(tl.bfloat16)");
  EXPECT_GE(reports[0].probes_run, static_cast<int64_t>(reports[0].defects.size()));
  auto text = prometheus::TextSerializer{}.Serialize(telemetry->registry()->Collect());
  EXPECT_NE(text.find("opforge_toolchain_defects{device_kind=\"interpreter\",fingerprint=\"" +
                      fingerprint + "\"} " + std::to_string(reports[0].defects.size())),
            std::string::npos)
      << text;
  caf::anon_send_exit(kept, caf::exit_reason::user_shutdown);
  self->request(*store, 10s, atom::shutdown_v).receive([](atom::ok) {}, [](caf::error&) {});
}
