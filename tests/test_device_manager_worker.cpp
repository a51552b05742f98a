// The whole device path with real parts: the supervisor starts the Python lint worker
// (opforge_worker), which connects to the device manager's ZeroMQ socket, registers, and
// answers a lint job.

#include "actors/fleet/spawn_device_manager.hpp"
#include "devices/supervisor.hpp"
#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"
#include "messages/system_config.hpp"
#include "tests/test_real_workers.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>
#include <msgpack.hpp>

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

  device_job job{.id = "l-1", .kind = "lint", .payload = lint_payload(), .deadline_ms = 60000};
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
  EXPECT_EQ(result->status, "done") << result->error;
  EXPECT_EQ(result->fingerprint.size(), 16u);
  auto handle = wire::unpack(result->payload);
  ASSERT_TRUE(handle);
  auto answer = wire::map_reader::of(handle->get());
  ASSERT_TRUE(answer);
  EXPECT_TRUE(answer->boolean("ok")) << "lint answer without 'ok'";
  ASSERT_EQ(registered.size(), 1u);
  EXPECT_EQ(registered[0].role, "lint");
  EXPECT_EQ(registered[0].device_kind, "none");
  EXPECT_EQ(registered[0].worker_id, result->worker_id);
}
