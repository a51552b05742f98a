// The device manager's logic under CAF's deterministic scheduler: frames from workers are
// injected as the I/O thread would send them, frames to workers land in a recorder, and time
// moves only when the test advances it.

#include "actors/fleet/device_manager.hpp"
#include "messages/errors.hpp"
#include "messages/system_config.hpp"

#include <limits>
#include <mutex>
#include <optional>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <prometheus/text_serializer.h>

using namespace opforge;
using namespace std::chrono_literals;

namespace {

// Keeps every frame the manager sends, decoded, in order.
class recording_outbox : public worker_outbox {
public:
  struct frame {
    std::string identity;
    wire::daemon_message message;
  };

  void send(const std::string& identity, std::string bytes) override {
    auto message = wire::decode_daemon_message(bytes, wire::default_max_frame_bytes);
    EXPECT_TRUE(message) << render(message.error());
    std::lock_guard<std::mutex> guard{mutex_};
    if (message && !closed_)
      frames_.push_back({identity, std::move(*message)});
  }

  void close() override {
    std::lock_guard<std::mutex> guard{mutex_};
    closed_ = true;
  }

  std::string endpoint() const override { return "inproc://recorder"; }

  bool closed() const {
    std::lock_guard<std::mutex> guard{mutex_};
    return closed_;
  }

  /// Takes the frames of type T sent so far, as "identity" -> message pairs in order.
  template <class T>
  std::vector<std::pair<std::string, T>> take() {
    std::lock_guard<std::mutex> guard{mutex_};
    std::vector<std::pair<std::string, T>> out;
    std::erase_if(frames_, [&](const frame& f) {
      if (!std::holds_alternative<T>(f.message))
        return false;
      out.emplace_back(f.identity, std::get<T>(f.message));
      return true;
    });
    return out;
  }

private:
  mutable std::mutex mutex_;
  std::vector<frame> frames_;
  bool closed_ = false;
};

wire::hello worker_hello(const std::string& id, std::string kind = "interpreter", int64_t slots = 1,
                         std::vector<contract::job_kind> jobs = {contract::job_kind::test,
                                                                 contract::job_kind::catalog}) {
  auto role = kind == "none" ? contract::worker_role::lint : contract::worker_role::device;
  return {.worker_id = id,
          .role = role,
          .device_kind = std::move(kind),
          .device_name = "cpu (triton interpreter)",
          .slots = slots,
          .jobs = std::move(jobs),
          .toolchain = {{"torch", "2.13.0"}, {"triton", "3.6.0"}},
          .fingerprint = "fp-" + id,
          .host = "host",
          .pid = 100};
}

std::string op_payload(const std::string& op) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, std::map<std::string, std::string>{{"op", op}});
  return {buffer.data(), buffer.size()};
}

device_job test_job(const std::string& id, std::string device_kind = "") {
  return {.id = id,
          .kind = contract::job_kind::test,
          .payload = op_payload("exp"),
          .device_kind = std::move(device_kind),
          .deadline_ms = 600000};
}

class DeviceManager : public ::testing::Test {
protected:
  // Runs every enqueued message. Unlike `sched.run()`, fires no timers: the device actors'
  // heartbeat timers re-arm forever, so time moves only in `tick`.
  void run() {
    while (sched.try_run_once()) {
    }
  }

  void SetUp() override {
    manager = sys.spawn(device_manager, config, stats, outbox);
    run();
  }

  void TearDown() override {
    caf::anon_send_exit(manager, caf::exit_reason::user_shutdown);
    run();
  }

  void hello(const std::string& id, wire::hello msg) {
    caf::anon_send(manager, id, std::move(msg));
    run();
  }

  void hello(const std::string& id) { hello(id, worker_hello(id)); }

  void beat(const std::string& id, int64_t busy = 0) {
    caf::anon_send(manager, id, wire::worker_heartbeat{busy});
    run();
  }

  void answer(const std::string& id, const std::string& job_id,
              contract::job_status status = contract::job_status::done) {
    caf::anon_send(manager, id,
                   wire::result{.job_id = job_id,
                                .status = status,
                                .payload = op_payload("answered"),
                                .elapsed_ms = 12});
    run();
  }

  // One heartbeat interval passes; the workers in `beating` beat within it, reporting `busy`.
  void tick(std::initializer_list<std::string> beating = {}, int64_t busy = 0) {
    for (auto& id : beating)
      beat(id, busy);
    sched.advance_time(config.heartbeat);
    run();
  }

  void submit(device_job job) {
    auto replies = replies_;
    sys.spawn([=, manager = manager](caf::event_based_actor* self) {
      self->request(manager, caf::infinite, atom::submit_v, job)
          .then([=](device_job_result& result) { replies->emplace(job.id, std::move(result)); },
                [=](caf::error& err) { replies->emplace(job.id, std::move(err)); });
    });
    run();
  }

  // The reply a submitter got, if any.
  std::optional<device_job_result> result_of(const std::string& job_id) {
    auto it = replies_->find(job_id);
    if (it == replies_->end() || !std::holds_alternative<device_job_result>(it->second))
      return std::nullopt;
    return std::get<device_job_result>(it->second);
  }

  std::string error_of(const std::string& job_id) {
    auto it = replies_->find(job_id);
    if (it == replies_->end())
      return "no reply";
    if (!std::holds_alternative<caf::error>(it->second))
      return "a result";
    return render(std::get<caf::error>(it->second));
  }

  template <class T, class... Ts>
  T ask(Ts... xs) {
    auto out = std::make_shared<std::optional<T>>();
    sys.spawn([=, manager = manager](caf::event_based_actor* self) {
      self->request(manager, caf::infinite, xs...).then([=](T& x) { *out = std::move(x); });
    });
    run();
    EXPECT_TRUE(out->has_value());
    return out->value_or(T{});
  }

  device_manager_status status() { return ask<device_manager_status>(atom::status_v); }

  // Job ids dispatched since the last call, as "worker:job#attempt".
  std::vector<std::string> dispatched() {
    std::vector<std::string> out;
    for (auto& [identity, job] : outbox->take<wire::job>())
      out.push_back(identity + ":" + job.job_id + "#" + std::to_string(job.attempt));
    return out;
  }

  std::string scrape() {
    return prometheus::TextSerializer{}.Serialize(stats->registry()->Collect());
  }

  system_config cfg{system_config::scheduling::deterministic};
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched =
      dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  device_manager_config config;
  std::shared_ptr<metrics> stats = std::make_shared<metrics>("test");
  std::shared_ptr<recording_outbox> outbox = std::make_shared<recording_outbox>();
  device_manager_actor manager;

private:
  using reply = std::variant<device_job_result, caf::error>;
  std::shared_ptr<std::map<std::string, reply>> replies_ =
      std::make_shared<std::map<std::string, reply>>();
};

using strings = std::vector<std::string>;

} // namespace

TEST_F(DeviceManager, WelcomesAWorkerAndListsIt) {
  hello("w1");
  auto welcomes = outbox->take<wire::welcome>();
  ASSERT_EQ(welcomes.size(), 1u);
  EXPECT_EQ(welcomes[0].first, "w1");
  EXPECT_EQ(welcomes[0].second, (wire::welcome{1000, 3}));
  auto workers = ask<std::vector<worker_info>>(atom::workers_v);
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].worker_id, "w1");
  EXPECT_EQ(workers[0].state, contract::worker_state::idle);
  EXPECT_EQ(workers[0].fingerprint, "fp-w1");
  EXPECT_EQ(workers[0].toolchain.at("triton"), "3.6.0");
  EXPECT_EQ(status().workers["interpreter"]["idle"], 1);
  EXPECT_NE(scrape().find(R"(opforge_workers{kind="interpreter",state="idle"} 1)"),
            std::string::npos);
}

TEST_F(DeviceManager, AsksUnknownWorkersToSayHello) {
  beat("ghost");
  answer("ghost", "t-1");
  auto asked = outbox->take<wire::hello_required>();
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0].first, "ghost");
  EXPECT_EQ(status().late_results, 1);
}

TEST_F(DeviceManager, DispatchesInSubmissionOrderWithinFreeSlots) {
  hello("w1", worker_hello("w1", "interpreter", 2));
  for (auto id : {"t-1", "t-2", "t-3"})
    submit(test_job(id));
  EXPECT_EQ(dispatched(), (strings{"w1:t-1#1", "w1:t-2#1"}));
  EXPECT_EQ(status().queued, 1);
  EXPECT_EQ(status().running, 2);
  EXPECT_EQ(status().workers["interpreter"]["busy"], 1);
  answer("w1", "t-2");
  EXPECT_EQ(dispatched(), (strings{"w1:t-3#1"}));
  auto result = result_of("t-2");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, contract::job_status::done);
  EXPECT_EQ(result->worker_id, "w1");
  EXPECT_EQ(result->fingerprint, "fp-w1");
  // The versions behind the fingerprint go with it, for the library's record of the kernel.
  EXPECT_EQ(result->toolchain,
            (std::map<std::string, std::string>{{"torch", "2.13.0"}, {"triton", "3.6.0"}}));
  EXPECT_EQ(result->payload, op_payload("answered"));
  EXPECT_EQ(result->elapsed_ms, 12);
  EXPECT_EQ(result->attempt, 1);
  EXPECT_FALSE(result_of("t-1"));
  EXPECT_NE(scrape().find(R"(opforge_jobs_total{kind="test",outcome="done"} 1)"),
            std::string::npos);
}

// A job nobody can serve yet waits without holding back later jobs that can go.
TEST_F(DeviceManager, JobsGoOnlyToWorkersThatServeThem) {
  hello("w1", worker_hello("w1", "interpreter", 4));
  hello("lint1", worker_hello("lint1", "none", 4, {contract::job_kind::lint}));
  submit(test_job("t-cuda", "cuda"));
  submit({.id = "l-1",
          .kind = contract::job_kind::lint,
          .device_kind = "interpreter",
          .deadline_ms = 1000});
  submit(test_job("t-interp", "interpreter"));
  auto pinned = test_job("t-pinned");
  pinned.fingerprint = "fp-elsewhere";
  submit(pinned);
  EXPECT_EQ(dispatched(), (strings{"lint1:l-1#1", "w1:t-interp#1"}));
  // Only the cuda job waits for a kind no live worker serves; the pinned one has its kind's worker.
  EXPECT_EQ(status().unserved, (std::map<std::string, int64_t>{{"cuda", 1}}));
  hello("gpu1", worker_hello("gpu1", "cuda"));
  EXPECT_EQ(dispatched(), (strings{"gpu1:t-cuda#1"}));
  EXPECT_EQ(status().queued, 1);
  EXPECT_TRUE(status().unserved.empty());
}

// A confirmation must come from another host.
TEST_F(DeviceManager, AJobAvoidsTheHostsItNames) {
  auto elsewhere = worker_hello("w2");
  elsewhere.host = "other";
  hello("w1");
  auto job = test_job("t-1");
  job.avoid_hosts = {"host"};
  submit(job);
  EXPECT_TRUE(dispatched().empty());
  hello("w2", elsewhere);
  EXPECT_EQ(dispatched(), (strings{"w2:t-1#1"}));
  answer("w2", "t-1");
  ASSERT_TRUE(result_of("t-1"));
  EXPECT_EQ(result_of("t-1")->host, "other");
}

TEST_F(DeviceManager, AWorkerIsDeadAfterThreeMissedHeartbeats) {
  hello("w1");
  tick();
  tick();
  EXPECT_EQ(status().workers["interpreter"]["idle"], 1);
  EXPECT_EQ(outbox->take<wire::daemon_heartbeat>().size(), 2u);
  tick();
  auto now = status();
  EXPECT_EQ(now.workers["interpreter"]["idle"], 0);
  EXPECT_EQ(now.workers["interpreter"]["dead"], 1);
  auto workers = ask<std::vector<worker_info>>(atom::workers_v);
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].state, contract::worker_state::dead);
  EXPECT_EQ(workers[0].dead_reason, "missed 3 heartbeats");
  EXPECT_EQ(workers[0].ms_since_heartbeat, 3000);
}

TEST_F(DeviceManager, HeartbeatsKeepAWorkerAlive) {
  hello("w1");
  for (int i = 0; i < 10; ++i)
    tick({"w1"});
  EXPECT_EQ(status().workers["interpreter"]["idle"], 1);
}

TEST_F(DeviceManager, ADeadWorkersJobIsRequeuedExactlyOnceToAnotherWorker) {
  hello("w1");
  hello("w2");
  submit(test_job("t-1"));
  EXPECT_EQ(dispatched(), (strings{"w1:t-1#1"}));
  for (int i = 0; i < 3; ++i)
    tick({"w2"});
  EXPECT_EQ(dispatched(), (strings{"w2:t-1#2"}));
  EXPECT_EQ(status().requeued, 1);
  // w1 wakes up and answers: too late, and it must say hello again.
  answer("w1", "t-1");
  EXPECT_FALSE(result_of("t-1"));
  EXPECT_EQ(outbox->take<wire::hello_required>().size(), 1u);
  answer("w2", "t-1");
  auto result = result_of("t-1");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->worker_id, "w2");
  EXPECT_EQ(result->attempt, 2);
  for (int i = 0; i < 3; ++i)
    tick({"w2"});
  EXPECT_TRUE(dispatched().empty());
  auto totals = status();
  EXPECT_EQ(totals.late_results, 1);
  EXPECT_EQ(totals.done, 1);
  EXPECT_NE(scrape().find(R"(opforge_job_requeues_total{reason="worker_lost"} 1)"),
            std::string::npos);
}

// Silence, a lost connection and a restart each cost the job an attempt and nothing more: however
// many workers vanish under it, the candidate is never blamed (no verdict), and the job ends as
// lost, which its session retries as a harness fault.
TEST_F(DeviceManager, WorkersThatVanishUnderAJobNeverBlameItsCandidate) {
  hello("w1");
  hello("w2");
  hello("w3");
  submit(test_job("t-17"));
  EXPECT_EQ(dispatched(), (strings{"w1:t-17#1"}));
  for (int i = 0; i < 3; ++i)
    tick({"w2", "w3"});
  EXPECT_EQ(dispatched(), (strings{"w2:t-17#2"}));
  caf::anon_send(manager, atom::disconnected_v, std::string{"w2"}, std::string{"connection lost"});
  run();
  EXPECT_EQ(dispatched(), (strings{"w3:t-17#3"}));
  EXPECT_EQ(error_of("t-17"), "no reply");
  hello("w3"); // restarted
  EXPECT_EQ(error_of("t-17"), "worker_lost: job t-17 (test exp) lost its worker on all 3 attempts: "
                              "w1 (missed 3 heartbeats), w2 (connection lost), w3 (reconnected)");
  auto totals = status();
  EXPECT_EQ(totals.lost, 1);
  EXPECT_EQ(totals.requeued, 2);
  EXPECT_NE(scrape().find(R"(opforge_jobs_total{kind="test",outcome="lost"} 1)"),
            std::string::npos);
  hello("w4");
  EXPECT_TRUE(dispatched().empty());
}

TEST_F(DeviceManager, GoodbyeRequeuesUsingAnAttempt) {
  hello("w1");
  submit(test_job("t-1"));
  EXPECT_EQ(dispatched(), (strings{"w1:t-1#1"}));
  caf::anon_send(manager, std::string{"w1"}, wire::goodbye{"SIGTERM"});
  run();
  EXPECT_EQ(status().queued, 1);
  hello("w2");
  EXPECT_EQ(dispatched(), (strings{"w2:t-1#2"}));
  EXPECT_EQ(status().workers["interpreter"]["dead"], 0);
  EXPECT_NE(scrape().find(R"(opforge_job_requeues_total{reason="goodbye"} 1)"), std::string::npos);
}

// A hello from a registered worker means it lost its connection: what it ran is requeued, and
// each reconnect under a job uses up one of its attempts.
TEST_F(DeviceManager, ReconnectsRequeueAndAttemptsAreBounded) {
  hello("w1");
  submit(test_job("t-1"));
  EXPECT_EQ(dispatched(), (strings{"w1:t-1#1"}));
  hello("w1");
  EXPECT_EQ(dispatched(), (strings{"w1:t-1#2"}));
  hello("w1");
  EXPECT_EQ(dispatched(), (strings{"w1:t-1#3"}));
  hello("w1");
  EXPECT_TRUE(dispatched().empty());
  EXPECT_EQ(error_of("t-1"), "worker_lost: job t-1 (test exp) lost its worker on all 3 attempts: "
                             "w1 (reconnected), w1 (reconnected), w1 (reconnected)");
  // The replaced device actors are gone: one worker, one heartbeat per interval.
  outbox->take<wire::daemon_heartbeat>();
  tick({"w1"});
  EXPECT_EQ(outbox->take<wire::daemon_heartbeat>().size(), 1u);
}

TEST_F(DeviceManager, CancelsQueuedAndRunningJobs) {
  hello("w1");
  submit(test_job("t-1"));
  submit(test_job("t-2"));
  submit(test_job("t-3"));
  EXPECT_EQ(dispatched(), (strings{"w1:t-1#1"}));
  caf::anon_send(manager, atom::cancel_v, std::string{"t-2"});
  caf::anon_send(manager, atom::cancel_v, std::string{"t-1"});
  run();
  EXPECT_EQ(error_of("t-2"), "cancelled: job t-2 (test exp) was cancelled");
  EXPECT_EQ(error_of("t-1"), "cancelled: job t-1 (test exp) was cancelled");
  auto cancels = outbox->take<wire::cancel>();
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].second.job_id, "t-1");
  // The slot is free once the worker let go of the cancelled job.
  EXPECT_TRUE(dispatched().empty());
  answer("w1", "t-1", contract::job_status::cancelled);
  EXPECT_EQ(dispatched(), (strings{"w1:t-3#1"}));
  EXPECT_EQ(status().cancelled, 2);
}

// A worker that keeps beating but never answers loses the job at its deadline, and keeps the
// slot until it lets go: it cannot take job after job while others sit idle.
TEST_F(DeviceManager, AJobHeldPastItsDeadlineIsTakenBackAndRequeued) {
  hello("w1");
  auto job = test_job("t-1");
  job.deadline_ms = 2000;
  submit(job);
  submit(test_job("t-2"));
  EXPECT_EQ(dispatched(), (strings{"w1:t-1#1"}));
  for (int i = 0; i < 4; ++i)
    tick({"w1"}, 1);
  EXPECT_TRUE(outbox->take<wire::cancel>().empty()); // 4 s: within 2 s + 3 heartbeats
  tick({"w1"}, 1);
  auto cancels = outbox->take<wire::cancel>();
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].first, "w1");
  EXPECT_EQ(cancels[0].second.job_id, "t-1");
  // Still registered, still holding its only slot: neither job goes to it.
  EXPECT_TRUE(dispatched().empty());
  EXPECT_EQ(status().workers["interpreter"]["busy"], 1);
  EXPECT_EQ(status().queued, 2);
  hello("w2");
  EXPECT_EQ(dispatched(), (strings{"w2:t-1#2"}));
  EXPECT_NE(scrape().find(R"(opforge_job_requeues_total{reason="deadline"} 1)"), std::string::npos);
  // Its answer comes too late to count, and frees its slot for the next job.
  answer("w1", "t-1");
  EXPECT_FALSE(result_of("t-1"));
  EXPECT_EQ(status().late_results, 1);
  EXPECT_EQ(dispatched(), (strings{"w1:t-2#1"}));
  answer("w2", "t-1");
  ASSERT_TRUE(result_of("t-1"));
  EXPECT_EQ(result_of("t-1")->worker_id, "w2");
}

// A stranger that takes jobs and keeps beating "busy 0" loses them after `liveness` heartbeats
// instead of holding them to their deadlines; one short count (a heartbeat crossing a job) is
// forgiven.
TEST_F(DeviceManager, AWorkerThatKeepsDenyingItsJobsLosesThem) {
  hello("s1");
  submit(test_job("t-1"));
  EXPECT_EQ(dispatched(), (strings{"s1:t-1#1"}));
  tick({"s1"}, 0);
  tick({"s1"}, 1);
  tick({"s1"}, 0);
  tick({"s1"}, 0);
  EXPECT_EQ(status().workers["interpreter"]["busy"], 1);
  hello("w2");
  tick({"s1", "w2"}, 0);
  EXPECT_EQ(dispatched(), (strings{"w2:t-1#2"}));
  auto workers = ask<std::vector<worker_info>>(atom::workers_v);
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[1].worker_id, "s1");
  EXPECT_EQ(workers[1].dead_reason, "reported 0 of its 1 jobs for 3 heartbeats");
}

// What a hello claims is checked before the worker gets anything: the role decides the job
// kinds, device kinds are bounded names (any kind a worker may announce), names are bounded, slots
// are capped.
TEST_F(DeviceManager, HellosAreHeldToWhatTheyMayClaim) {
  auto refusal = [&](const std::string& id, wire::hello msg) {
    hello(id, std::move(msg));
    auto goodbyes = outbox->take<wire::goodbye>();
    EXPECT_TRUE(outbox->take<wire::welcome>().empty());
    return goodbyes.size() == 1 && goodbyes[0].first == id ? goodbyes[0].second.reason
                                                           : "no single goodbye";
  };
  using contract::job_kind;
  EXPECT_EQ(refusal("l1", worker_hello("l1", "none", 1, {job_kind::lint, job_kind::test})),
            "hello refused: a lint worker cannot serve 'test' jobs");
  EXPECT_EQ(refusal("d1", worker_hello("d1", "interpreter", 1, {job_kind::test, job_kind::lint})),
            "hello refused: a device worker cannot serve 'lint' jobs");
  EXPECT_EQ(refusal("d2", worker_hello("d2", "Quantum GPU")),
            "hello refused: device kind 'Quantum GPU' is not a device kind (1 to 32 lowercase "
            "letters, digits, '_' or '-', starting with a letter)");
  EXPECT_EQ(refusal("d3", worker_hello("d3", "interpreter", 0)),
            "hello refused: slots must be >= 1, got 0");
  auto named = worker_hello("d4");
  named.device_name = std::string(257, 'x');
  EXPECT_EQ(refusal("d4", named), "hello refused: a name is longer than 256 bytes");
  // A role outside the contract never gets here: the frame decoder drops it (test_wire).
  EXPECT_EQ(status().refused, 5);
  EXPECT_TRUE(ask<std::vector<worker_info>>(atom::workers_v).empty());

  hello("greedy", worker_hello("greedy", "interpreter", std::numeric_limits<int64_t>::max()));
  auto workers = ask<std::vector<worker_info>>(atom::workers_v);
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].slots, 64);
  for (int i = 0; i < 70; ++i)
    submit(test_job("t-" + std::to_string(i)));
  EXPECT_EQ(dispatched().size(), 64u);
  EXPECT_EQ(status().queued, 6);
}

// opforge_workers follows the fleet: the series of a kind no worker has any more go away, so 300
// workers announcing kinds of their own leave no series behind once they are gone.
TEST_F(DeviceManager, SeriesOfGoneWorkersAreRemoved) {
  for (int i = 0; i < 300; ++i) {
    auto id = "s" + std::to_string(i);
    hello(id, worker_hello(id, "kind" + std::to_string(i)));
  }
  hello("g1", worker_hello("g1", "cuda"));
  hello("w1");
  auto text = scrape();
  EXPECT_NE(text.find(R"(opforge_workers{kind="cuda",state="idle"} 1)"), std::string::npos);
  EXPECT_NE(text.find(R"(opforge_workers{kind="kind299",state="idle"} 1)"), std::string::npos);
  for (int i = 0; i < 300; ++i)
    caf::anon_send(manager, "s" + std::to_string(i), wire::goodbye{"SIGTERM"});
  run();
  EXPECT_EQ(scrape().find("kind=\"kind"), std::string::npos);
  submit(test_job("t-1", "cuda"));
  answer("g1", "t-1");
  EXPECT_NE(scrape().find(R"(opforge_workers{kind="cuda",state="busy"} 0)"), std::string::npos);
  caf::anon_send(manager, std::string{"g1"}, wire::goodbye{"SIGTERM"});
  run();
  text = scrape();
  EXPECT_EQ(text.find(R"(kind="cuda")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(opforge_workers{kind="interpreter",state="idle"} 1)"), std::string::npos);
}

TEST_F(DeviceManager, RejectsInvalidJobs) {
  submit({.id = "x-2",
          .kind = contract::job_kind::test,
          .payload = "\x93\x01\x02\x03",
          .deadline_ms = 1});
  EXPECT_EQ(error_of("x-2"),
            "request_invalid: device job 'x-2': payload: expected a msgpack map, got array");
  submit(test_job("x-3"));
  submit({.id = "x-3", .kind = contract::job_kind::lint, .deadline_ms = 1});
  EXPECT_EQ(status().queued, 1);
  EXPECT_EQ(status().submitted, 1);
}

TEST_F(DeviceManager, ShutdownSaysGoodbyeAndAnswersEveryJob) {
  hello("w1");
  submit(test_job("t-1"));
  submit(test_job("t-2"));
  ask<atom::ok>(atom::shutdown_v);
  auto goodbyes = outbox->take<wire::goodbye>();
  ASSERT_EQ(goodbyes.size(), 1u);
  EXPECT_EQ(goodbyes[0].first, "w1");
  EXPECT_EQ(goodbyes[0].second.reason, "daemon shutting down");
  EXPECT_EQ(error_of("t-1"), "cancelled: job t-1 (test exp): the daemon shut down");
  EXPECT_EQ(error_of("t-2"), "cancelled: job t-2 (test exp): the daemon shut down");
  EXPECT_TRUE(outbox->closed());
}

// Re-validation's jobs are background: they wait behind campaign jobs, but one that waited
// `background_max_wait` (30 s) takes the next free slot, so it progresses under steady load.
TEST_F(DeviceManager, CampaignJobsGoFirstAndABackgroundJobThatWaitedLongEnoughNext) {
  hello("w1");
  submit(test_job("c-1"));
  auto background = test_job("b-1");
  background.background = true;
  submit(background);
  submit(test_job("c-2"));
  EXPECT_EQ(dispatched(), (strings{"w1:c-1#1"}));
  answer("w1", "c-1");
  EXPECT_EQ(dispatched(), (strings{"w1:c-2#1"}));
  submit(test_job("c-3"));
  for (int second = 0; second < 30; ++second)
    tick({"w1"}, 1);
  answer("w1", "c-2");
  EXPECT_EQ(dispatched(), (strings{"w1:b-1#1"}));
  answer("w1", "b-1");
  EXPECT_EQ(dispatched(), (strings{"w1:c-3#1"}));
  ASSERT_TRUE(result_of("b-1"));
}
