// The maintenance actor over the real store actor, RocksDB and the library actor, with a scripted
// fleet standing in for the device manager (its workers and the test jobs it runs): a new
// fingerprint re-validates the current kernels only, a restart mid-way neither repeats nor loses
// a verdict, and `revalidate` by hand forces verdicts where some exist. The device manager's
// side of the priority is in test_dispatch_order.cpp.

// CAF 0.17 deserializes a vector's items into a default-initialized local, which GCC takes for
// uninitialized when the item is an enum (library_kernel's dtypes).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "actors/library/kernels.hpp"
#include "actors/library/library.hpp"
#include "actors/library/maintenance.hpp"
#include "actors/store/store.hpp"
#include "messages/contract_codec.hpp"
#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"
#include "messages/session_messages.hpp"
#include "messages/system_config.hpp"
#include "messages/wire.hpp"
#include "tests/test_store_support.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

using namespace opforge;
using opforge::test::opforge_code;
using testing::HasSubstr;
using testing::UnorderedElementsAre;

namespace {

const std::map<std::string, std::string> old_tools{{"triton", "3.5.1"}, {"torch", "2.9.0"}};
const std::map<std::string, std::string> new_tools{{"triton", "3.6.0"}, {"torch", "2.9.0"}};

/// What the scripted fleet does; the test thread reads it while the actors run.
struct fleet_script {
  std::mutex lock;
  std::vector<worker_info> workers;
  std::vector<device_job> submitted;
  std::map<std::string, std::string> failing; // op -> the accuracy failure's message
  size_t answered_limit = SIZE_MAX;           // later jobs are held, never answered
  size_t answered = 0;
  // Benchmark jobs: (op, fingerprint) -> the kernel's time on every dtype and shape class.
  std::map<std::pair<std::string, std::string>, double> times;
  std::string timer = "cuda_events";

  std::vector<device_job> jobs() {
    std::lock_guard guard{lock};
    return submitted;
  }
};

struct fleet_state {
  std::shared_ptr<fleet_script> script;
  std::vector<caf::typed_response_promise<device_job_result>> held;
  static inline const char* name = "scripted-fleet";
};

// A done job's answer from the worker of its fingerprint.
device_job_result answered(const device_job& job, std::string payload) {
  return {.job_id = job.id,
          .status = contract::job_status::done,
          .payload = std::move(payload),
          .worker_id = "w1",
          .fingerprint = job.fingerprint,
          .toolchain = job.fingerprint == "new" ? new_tools : old_tools};
}

// A benchmark of the scripted time, 1% noise on each side, against a 40 us baseline.
device_job_result timing_of(const device_job& job, fleet_script& script) {
  auto request = wire::decode_as<contract::benchmark_request>(job.payload, "benchmark_request");
  contract::benchmark_result result{
      .outcome = contract::outcome::pass, .baseline = "aten", .timer = script.timer};
  auto us = script.times[{request->op, job.fingerprint}];
  for (auto dtype : request->dtypes)
    result.timings.push_back({.shape_class = "n<=1M",
                              .source = "ladder:1048576",
                              .dtype = dtype,
                              .elements = 1 << 20,
                              .repetitions = 50,
                              .candidate_us = us,
                              .candidate_iqr_us = us / 100,
                              .baseline_us = 40,
                              .baseline_iqr_us = 0.4,
                              .speedup = 40 / us});
  return answered(job, contract::codec::to_bytes(result));
}

device_job_result verdict_of(const device_job& job, fleet_script& script) {
  if (job.kind == contract::job_kind::benchmark)
    return timing_of(job, script);
  auto request = wire::decode_as<contract::test_request>(job.payload, "test_request");
  contract::test_result result{
      .outcome = contract::outcome::pass, .tests_run = 6, .tests_passed = 6};
  if (auto failing = script.failing.find(request->op); failing != script.failing.end()) {
    result.outcome = contract::outcome::accuracy_error;
    result.tests_passed = 2;
    result.failure = contract::test_failure{.dtype = "float32",
                                            .sample_set = "opinfo",
                                            .sample_index = 2,
                                            .message = failing->second + "\nmore lines"};
  }
  return answered(job, contract::codec::to_bytes(result));
}

maintenance_fleet_actor::behavior_type
scripted_fleet(maintenance_fleet_actor::stateful_pointer<fleet_state> self,
               std::shared_ptr<fleet_script> script) {
  self->state.script = std::move(script);
  return {
      [self](atom::submit, device_job job) -> caf::result<device_job_result> {
        auto& script = *self->state.script;
        std::lock_guard guard{script.lock};
        script.submitted.push_back(job);
        if (script.answered >= script.answered_limit) {
          self->state.held.push_back(self->make_response_promise<device_job_result>());
          return self->state.held.back();
        }
        ++script.answered;
        return verdict_of(job, script);
      },
      [](atom::cancel, const std::string&) {},
      [self](atom::workers) {
        std::lock_guard guard{self->state.script->lock};
        return self->state.script->workers;
      },
  };
}

/// Records the campaigns it is asked to start and names them r-1, r-2...
struct campaigns_state {
  std::shared_ptr<std::vector<campaign_request>> started;
  static inline const char* name = "scripted-campaigns";
};

campaign_manager_actor::behavior_type
scripted_campaigns(campaign_manager_actor::stateful_pointer<campaigns_state> self,
                   std::shared_ptr<std::vector<campaign_request>> started) {
  self->state.started = std::move(started);
  auto named = [](const std::string& id) {
    campaign_status status;
    status.campaign_id = id;
    return status;
  };
  return {
      [self, named](atom::submit, campaign_request& request) {
        self->state.started->push_back(std::move(request));
        return named("r-" + std::to_string(self->state.started->size()));
      },
      [named](atom::status, const std::string& id) { return named(id); },
      [](atom::list) { return std::vector<campaign_status>{}; },
      [named](atom::cancel, const std::string& id) { return named(id); },
      [](atom::shutdown) { return atom::ok_v; },
  };
}

worker_info worker(const std::string& device_kind, const std::string& fingerprint) {
  return {.worker_id = "w-" + fingerprint,
          .role = contract::worker_role::device,
          .device_kind = device_kind,
          .toolchain = fingerprint == "new" ? new_tools : old_tools,
          .fingerprint = fingerprint,
          .slots = 2,
          .state = contract::worker_state::idle};
}

contract::library_kernel kernel(const std::string& op, const std::string& body,
                                const std::string& device_kind, int64_t at_ms) {
  return {.op = op,
          .wrapper = op + "_wrapper",
          .source = "def " + op + "_wrapper(x):\n    return " + body + "\n",
          .dtypes = {contract::dtype::float32},
          .aten_overloads = {"aten::" + op},
          .provenance = {{"origin", "imported:test"}},
          .proofs = {{.fingerprint = "old",
                      .device_kind = device_kind,
                      .toolchain = old_tools,
                      .outcome = contract::outcome::pass,
                      .tests_run = 6,
                      .tests_passed = 6,
                      .validated_at_ms = at_ms}}};
}

class Maintenance : public ::testing::Test {
protected:
  void SetUp() override {
    auto spawned = spawn_store(sys_, dir_.db(), telemetry_);
    ASSERT_TRUE(spawned) << render(spawned.error());
    store_ = *spawned;
    library_ = sys_.spawn(library, store_, telemetry_, std::string{"9.9.9"});
    // abs has two versions: only the newer one is current. relu is a cuda kernel.
    old_abs_ = add(kernel("abs", "x", "interpreter", 1000));
    new_abs_ = add(kernel("abs", "x.abs()", "interpreter", 2000));
    exp_ = add(kernel("exp", "x.exp()", "interpreter", 3000));
    relu_ = add(kernel("relu", "x.relu()", "cuda", 4000));
  }

  void TearDown() override {
    for (auto& actor : spawned_)
      caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(library_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(store_, caf::exit_reason::user_shutdown);
  }

  std::string add(contract::library_kernel k) {
    std::string hash;
    self_->request(library_, caf::infinite, atom::add_v, std::move(k))
        .receive([&](kernel_version& added) { hash = added.kernel.hash; },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return hash;
  }

  /// A maintenance actor (a daemon's lifetime of it) over a fresh scripted fleet.
  /// Re-validation alone unless `retime`: the timing tests turn it on.
  maintenance_actor start(std::shared_ptr<fleet_script> script, bool enabled = true,
                          campaign_manager_actor campaigns = {}, bool retime = false) {
    auto fleet = sys_.spawn(scripted_fleet, script);
    maintenance_setup setup;
    setup.campaigns = campaigns;
    setup.repair = static_cast<bool>(campaigns);
    setup.fleet = fleet;
    setup.library = library_;
    setup.store = store_;
    setup.telemetry = telemetry_;
    setup.enabled = enabled;
    setup.retime = retime;
    setup.poll = std::chrono::milliseconds{20};
    auto actor = sys_.spawn(maintenance, std::move(setup));
    spawned_.push_back(caf::actor_cast<caf::actor>(fleet));
    spawned_.push_back(caf::actor_cast<caf::actor>(actor));
    return actor;
  }

  void stop(const maintenance_actor& actor) {
    self_->send_exit(actor, caf::exit_reason::kill);
    self_->wait_for(actor);
  }

  std::vector<kernel_version> kernels() {
    std::vector<kernel_version> out;
    self_->request(library_, caf::infinite, atom::list_v, std::string{}, false)
        .receive([&](std::vector<kernel_version>& listed) { out = std::move(listed); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return out;
  }

  /// The verdicts of kernel `hash` on `fingerprint`, newest first.
  std::vector<contract::toolchain_proof> verdicts(const std::string& hash,
                                                  const std::string& fingerprint) {
    std::vector<contract::toolchain_proof> out;
    for (const auto& version : kernels())
      if (version.kernel.hash == hash)
        for (const auto& proof : version.kernel.proofs)
          if (proof.fingerprint == fingerprint)
            out.push_back(proof);
    return out;
  }

  maintenance_status status(const maintenance_actor& actor) {
    maintenance_status out;
    self_->request(actor, caf::infinite, atom::status_v)
        .receive([&](maintenance_status& value) { out = std::move(value); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return out;
  }

  /// Waits (a few seconds at most) until `done` holds.
  static bool eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 500; ++i) {
      if (done())
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
    return done();
  }

  std::string scrape() const {
    return prometheus::TextSerializer{}.Serialize(telemetry_->registry()->Collect());
  }

  test::temp_dir dir_;
  system_config cfg_;
  caf::actor_system sys_{cfg_};
  caf::scoped_actor self_{sys_};
  std::shared_ptr<metrics> telemetry_ = std::make_shared<metrics>("test");
  store_actor store_;
  library_actor library_;
  std::vector<caf::actor> spawned_;
  std::string old_abs_, new_abs_, exp_, relu_;
};

std::vector<std::string> hashes_of(const std::vector<device_job>& jobs,
                                   contract::job_kind kind = contract::job_kind::test) {
  std::vector<std::string> out;
  for (const auto& job : jobs) {
    if (job.kind != kind)
      continue;
    auto op =
        kind == contract::job_kind::test
            ? wire::decode_as<contract::test_request>(job.payload, "test_request")->op
            : wire::decode_as<contract::benchmark_request>(job.payload, "benchmark_request")->op;
    out.push_back(op + "@" + job.fingerprint + (job.background ? " background" : ""));
  }
  return out;
}

} // namespace

TEST_F(Maintenance, ANewFingerprintRevalidatesTheCurrentKernelsOfItsDeviceKindOnly) {
  auto script = std::make_shared<fleet_script>();
  script->workers = {worker("interpreter", "old"), worker("interpreter", "new")};
  script->failing["exp"] = "max abs error 0.5 at [3]";
  auto actor = start(script);
  ASSERT_TRUE(eventually([&] { return verdicts(exp_, "new").size() == 1; }));
  ASSERT_TRUE(eventually([&] { return verdicts(new_abs_, "new").size() == 1; }));
  // Neither the older abs, nor the cuda kernel, nor anything on the fingerprint that has its
  // verdicts already.
  EXPECT_THAT(hashes_of(script->jobs()),
              UnorderedElementsAre("abs@new background", "exp@new background"));
  EXPECT_TRUE(verdicts(old_abs_, "new").empty());
  EXPECT_TRUE(verdicts(relu_, "new").empty());
  auto passed = verdicts(new_abs_, "new").front();
  EXPECT_EQ(passed.outcome, contract::outcome::pass);
  EXPECT_EQ(passed.toolchain, new_tools);
  EXPECT_EQ(passed.detail, "");
  auto failed = verdicts(exp_, "new").front();
  EXPECT_EQ(failed.outcome, contract::outcome::accuracy_error);
  EXPECT_EQ(failed.tests_passed, 2);
  EXPECT_EQ(failed.detail, "float32 opinfo #2: max abs error 0.5 at [3]");
  ASSERT_TRUE(eventually([&] {
    auto now = status(actor);
    return now.regressions == 1 && now.toolchains.size() == 2 && now.toolchains[0].owed == 0 &&
           now.toolchains[0].passed == 1;
  }));
  auto now = status(actor); // by device kind, then fingerprint
  EXPECT_EQ(now.toolchains[0].device_kind, "interpreter");
  EXPECT_EQ(now.toolchains[0].fingerprint, "new");
  EXPECT_TRUE(now.toolchains[0].live);
  EXPECT_EQ(now.toolchains[0].failed, 1u);
  EXPECT_EQ(now.toolchains[0].toolchain, new_tools);
  EXPECT_EQ(now.toolchains[1].fingerprint, "old");
  EXPECT_EQ(now.toolchains[1].passed, 2u);
  auto text = scrape();
  EXPECT_THAT(
      text,
      HasSubstr(R"(opforge_validations_pending{device_kind="interpreter",fingerprint="new"} 0)"));
  EXPECT_THAT(
      text, HasSubstr(R"(opforge_library_passing{device_kind="interpreter",fingerprint="new"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(opforge_regressions{device_kind="interpreter"} 1)"));
  // A fingerprint no worker has any more loses its series.
  {
    std::lock_guard guard{script->lock};
    script->workers = {worker("interpreter", "new")};
  }
  ASSERT_TRUE(
      eventually([&] { return scrape().find(R"(fingerprint="old")") == std::string::npos; }));
  EXPECT_THAT(
      scrape(),
      HasSubstr(R"(opforge_library_passing{device_kind="interpreter",fingerprint="new"} 1)"));
}

TEST_F(Maintenance, ARestartMidWayNeitherRepeatsNorLosesAVerdict) {
  auto first = std::make_shared<fleet_script>();
  first->workers = {worker("interpreter", "new")};
  first->answered_limit = 1; // the daemon dies with the other job under way
  auto actor = start(first);
  ASSERT_TRUE(eventually([&] { return first->jobs().size() == 2; }));
  ASSERT_TRUE(eventually(
      [&] { return verdicts(new_abs_, "new").size() + verdicts(exp_, "new").size() == 1; }));
  stop(actor);
  auto judged = verdicts(new_abs_, "new").empty() ? exp_ : new_abs_;
  auto second = std::make_shared<fleet_script>();
  second->workers = {worker("interpreter", "new")};
  auto restarted = start(second);
  ASSERT_TRUE(eventually(
      [&] { return verdicts(new_abs_, "new").size() == 1 && verdicts(exp_, "new").size() == 1; }));
  // Give it polls to repeat something, if it would.
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  ASSERT_EQ(second->jobs().size(), 1u);
  auto request =
      wire::decode_as<contract::test_request>(second->jobs().front().payload, "test_request");
  EXPECT_EQ(request->op, judged == exp_ ? "abs" : "exp");
  EXPECT_EQ(verdicts(new_abs_, "new").size(), 1u);
  EXPECT_EQ(verdicts(exp_, "new").size(), 1u);
  EXPECT_EQ(status(restarted).toolchains.at(0).owed, 0u);
}

TEST_F(Maintenance, RevalidateByHandForcesVerdictsAndSurvivesARestart) {
  auto script = std::make_shared<fleet_script>();
  script->workers = {worker("interpreter", "old")};
  auto actor = start(script, /*enabled=*/false);
  // Disabled, it owes nothing on its own: "old" has every verdict anyway.
  std::this_thread::sleep_for(std::chrono::milliseconds{100});
  EXPECT_TRUE(script->jobs().empty());
  caf::error refused;
  self_->request(actor, caf::infinite, atom::revalidate_v, std::string{}, std::string{"nosuch"})
      .receive([&](maintenance_status&) { ADD_FAILURE() << "accepted"; },
               [&](const caf::error& err) { refused = err; });
  EXPECT_EQ(opforge_code(refused), errc::request_invalid);
  EXPECT_THAT(message(refused), HasSubstr("no connected device worker has toolchain "
                                          "fingerprint 'nosuch'"));
  {
    std::lock_guard guard{script->lock};
    script->answered_limit = 1;
  }
  maintenance_status owed;
  self_
      ->request(actor, caf::infinite, atom::revalidate_v, std::string{"interpreter"},
                std::string{"old"})
      .receive([&](maintenance_status& value) { owed = std::move(value); },
               [&](const caf::error& err) { ADD_FAILURE() << render(err); });
  ASSERT_EQ(owed.toolchains.size(), 1u);
  EXPECT_EQ(owed.toolchains[0].fingerprint, "old");
  // The current abs and exp, though both passed there; a poll under way may have judged one.
  EXPECT_EQ(owed.toolchains[0].owed + owed.toolchains[0].passed, 2u);
  EXPECT_GT(owed.toolchains[0].requested_at_ms, 0);
  auto requested = owed.toolchains[0].requested_at_ms;
  // A kernel keeps one verdict per fingerprint: a forced one replaces the older.
  auto renewed = [&] {
    size_t count = 0;
    for (const auto& hash : {new_abs_, exp_})
      count += verdicts(hash, "old").at(0).validated_at_ms >= requested ? 1 : 0;
    return count;
  };
  ASSERT_TRUE(eventually([&] { return script->jobs().size() == 2; }));
  ASSERT_TRUE(eventually([&] { return renewed() == 1; }));
  stop(actor);
  // The request was stored: a restarted daemon, still disabled, finishes it and no more.
  auto second = std::make_shared<fleet_script>();
  second->workers = {worker("interpreter", "old")};
  auto restarted = start(second, /*enabled=*/false);
  ASSERT_TRUE(eventually([&] { return renewed() == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  EXPECT_EQ(second->jobs().size(), 1u);
  auto now = status(restarted);
  ASSERT_EQ(now.toolchains.size(), 1u);
  EXPECT_EQ(now.toolchains[0].owed, 0u);
  EXPECT_EQ(now.toolchains[0].passed, 2u);
  EXPECT_EQ(now.toolchains[0].requested_at_ms, requested);
  // Not current: never asked again.
  EXPECT_EQ(verdicts(old_abs_, "old").at(0).validated_at_ms, 1000);
}

TEST_F(Maintenance, WithRepairAutoANewRegressionStartsOneRepairCampaignAcrossRestarts) {
  auto started = std::make_shared<std::vector<campaign_request>>();
  auto campaigns = sys_.spawn(scripted_campaigns, started);
  spawned_.push_back(caf::actor_cast<caf::actor>(campaigns));
  auto script = std::make_shared<fleet_script>();
  script->workers = {worker("interpreter", "new")};
  script->failing["exp"] = "max abs error 0.5 at [3]";
  auto actor = start(script, true, campaigns);
  ASSERT_TRUE(eventually([&] { return status(actor).repair_campaigns.size() == 1; }));
  EXPECT_EQ(status(actor).repair_campaigns, std::vector<std::string>{"r-1"});
  ASSERT_EQ(started->size(), 1u);
  const auto& request = started->front();
  EXPECT_EQ(request.fingerprint, "new");
  EXPECT_EQ(request.device_kind, "interpreter");
  ASSERT_EQ(request.seeds.size(), 1u);
  EXPECT_EQ(request.seeds[0].op, "exp");
  EXPECT_EQ(request.seeds[0].kernel, "def exp_wrapper(x):\n    return x.exp()\n");
  EXPECT_THAT(request.seeds[0].feedback, HasSubstr("max abs error 0.5 at [3]"));
  stop(actor);
  // The repair was stored: a restarted daemon lists it and starts no second one.
  auto again = std::make_shared<fleet_script>();
  again->workers = {worker("interpreter", "new")};
  auto restarted = start(again, true, campaigns);
  ASSERT_TRUE(eventually([&] { return status(restarted).regressions == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  EXPECT_EQ(status(restarted).repair_campaigns, std::vector<std::string>{"r-1"});
  EXPECT_EQ(started->size(), 1u);
  EXPECT_TRUE(again->jobs().empty());
}

namespace {

/// The times recorded for kernel `hash`: "fingerprint dtype shape_class" -> kernel_us.
std::map<std::string, double> timings_of(const std::vector<kernel_version>& kernels,
                                         const std::string& hash) {
  std::map<std::string, double> out;
  for (const auto& v : kernels)
    if (v.kernel.hash == hash)
      for (const auto& t : v.kernel.timings)
        out[t.fingerprint + " " + to_string(t.dtype) + " " + t.shape_class] = t.kernel_us;
  return out;
}

} // namespace

// A second cuda toolchain: the current cuda kernels that pass there are timed on both, and the one
// 1.5x slower on the new toolchain is a speed regression; a restart times nothing again.
TEST_F(Maintenance, ANewToolchainTimesTheKernelsThatPassThereAndFindsTheSlowerOnes) {
  auto sigmoid = add(kernel("sigmoid", "x.sigmoid()", "cuda", 5000));
  auto script = std::make_shared<fleet_script>();
  script->workers = {worker("cuda", "old"), worker("cuda", "new")};
  script->times = {{{"relu", "old"}, 20},
                   {{"relu", "new"}, 30},
                   {{"sigmoid", "old"}, 10},
                   {{"sigmoid", "new"}, 10.2}};
  auto actor = start(script, true, {}, /*retime=*/true);
  ASSERT_TRUE(eventually([&] {
    return timings_of(kernels(), relu_).size() == 2 && timings_of(kernels(), sigmoid).size() == 2;
  }));
  EXPECT_THAT(hashes_of(script->jobs(), contract::job_kind::benchmark),
              UnorderedElementsAre("relu@old background", "relu@new background",
                                   "sigmoid@old background", "sigmoid@new background"));
  EXPECT_EQ(timings_of(kernels(), relu_),
            (std::map<std::string, double>{{"new float32 n<=1M", 30}, {"old float32 n<=1M", 20}}));
  for (const auto& v : kernels())
    if (v.kernel.hash == relu_)
      for (const auto& t : v.kernel.timings) {
        EXPECT_EQ(t.device_kind, "cuda");
        EXPECT_EQ(t.baseline, "aten");
        EXPECT_DOUBLE_EQ(t.baseline_us, 40);
        EXPECT_DOUBLE_EQ(t.noise, 0.01);
        EXPECT_GT(t.measured_at_ms, 0);
      }
  ASSERT_TRUE(eventually([&] { return status(actor).speed_regressions == 1; }));
  EXPECT_EQ(status(actor).regressions, 0u);
  EXPECT_THAT(scrape(), HasSubstr(R"(opforge_speed_regressions{device_kind="cuda"} 1)"));
  EXPECT_THAT(scrape(), HasSubstr(R"(opforge_regressions{device_kind="cuda"} 0)"));
  // No interpreter worker is live: nothing of the interpreter's kernels is timed.
  for (const auto& hash : {new_abs_, exp_})
    EXPECT_TRUE(timings_of(kernels(), hash).empty());
  stop(actor);
  auto again = std::make_shared<fleet_script>();
  again->workers = script->workers;
  auto restarted = start(again, true, {}, /*retime=*/true);
  ASSERT_TRUE(eventually([&] { return status(restarted).speed_regressions == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  EXPECT_TRUE(again->jobs().empty());
}

// One toolchain is enough: a kernel proved there and never timed there is timed, because the
// export routes its shape classes by those timings.
TEST_F(Maintenance, AKernelProvedOnTheOnlyToolchainIsTimedThere) {
  auto script = std::make_shared<fleet_script>();
  script->workers = {worker("cuda", "old")};
  script->times = {{{"relu", "old"}, 20}};
  auto actor = start(script, true, {}, /*retime=*/true);
  ASSERT_TRUE(eventually([&] { return timings_of(kernels(), relu_).size() == 1; }));
  EXPECT_EQ(timings_of(kernels(), relu_),
            (std::map<std::string, double>{{"old float32 n<=1M", 20}}));
  EXPECT_EQ(status(actor).speed_regressions, 0u);
}

// With repair auto, a speed regression starts a repair seeded with its times on both toolchains.
TEST_F(Maintenance, WithRepairAutoASpeedRegressionStartsARepairToldItsTimes) {
  auto started = std::make_shared<std::vector<campaign_request>>();
  auto campaigns = sys_.spawn(scripted_campaigns, started);
  spawned_.push_back(caf::actor_cast<caf::actor>(campaigns));
  auto script = std::make_shared<fleet_script>();
  script->workers = {worker("cuda", "old"), worker("cuda", "new")};
  script->times = {{{"relu", "old"}, 20}, {{"relu", "new"}, 30}};
  auto actor = start(script, true, campaigns, /*retime=*/true);
  ASSERT_TRUE(eventually([&] { return status(actor).repair_campaigns.size() == 1; }));
  ASSERT_EQ(started->size(), 1u);
  const auto& request = started->front();
  EXPECT_EQ(request.fingerprint, "new");
  EXPECT_EQ(request.device_kind, "cuda");
  ASSERT_EQ(request.seeds.size(), 1u);
  EXPECT_EQ(request.seeds[0].op, "relu");
  EXPECT_THAT(request.seeds[0].feedback,
              HasSubstr("- float32 n<=1M: 30.0 us, was 20.0 us (1.50x the time; noise 1% and "
                        "1%)"));
}

// The interpreter's timer measures no kernel: its first benchmark stores nothing and no more
// benchmarks go there, while re-validation goes on.
TEST_F(Maintenance, AWorkerWhoseTimerMeasuresNoKernelIsNotTimedFurther) {
  auto script = std::make_shared<fleet_script>();
  script->workers = {worker("interpreter", "old"), worker("interpreter", "new")};
  script->timer = std::string{logic_only_timer};
  script->times = {
      {{"abs", "new"}, 30}, {{"abs", "old"}, 10}, {{"exp", "new"}, 30}, {{"exp", "old"}, 10}};
  auto actor = start(script, true, {}, /*retime=*/true);
  ASSERT_TRUE(eventually(
      [&] { return verdicts(exp_, "new").size() == 1 && verdicts(new_abs_, "new").size() == 1; }));
  ASSERT_TRUE(eventually(
      [&] { return !hashes_of(script->jobs(), contract::job_kind::benchmark).empty(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds{300});
  // The first answer stops them; those sent in the same poll are answered and dropped too.
  auto benchmarks = hashes_of(script->jobs(), contract::job_kind::benchmark).size();
  EXPECT_LE(benchmarks, 4u);
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  EXPECT_EQ(hashes_of(script->jobs(), contract::job_kind::benchmark).size(), benchmarks);
  for (const auto& hash : {new_abs_, exp_})
    EXPECT_TRUE(timings_of(kernels(), hash).empty());
  EXPECT_EQ(status(actor).speed_regressions, 0u);
}
