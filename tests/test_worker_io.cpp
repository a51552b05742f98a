// The device manager behind a real ZeroMQ ROUTER socket, with scripted workers: C++ DEALER
// sockets on loopback that speak the protocol step by step, with or without CURVE keys. Every
// wait is bounded.

#include "actors/fleet/spawn_device_manager.hpp"
#include "devices/curve.hpp"
#include "messages/errors.hpp"
#include "messages/system_config.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <zmq.hpp>

using namespace opforge;
using namespace std::chrono_literals;
using testing::HasSubstr;

namespace {

constexpr auto patience = 20s; // bound on any single wait; never reached when things work

std::string op_payload(const std::string& op) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, std::map<std::string, std::string>{{"op", op}});
  return {buffer.data(), buffer.size()};
}

// What a worker connects with to a CURVE server: the server's public key and its own pair.
struct curve_client {
  std::string server_public;
  curve::key_pair own;
};

// A worker played by the test: it beats every 100 ms while it waits for the daemon.
class scripted_worker {
public:
  scripted_worker(zmq::context_t& context, const std::string& endpoint, std::string id,
                  const std::optional<curve_client>& keys = std::nullopt)
      : id_{std::move(id)}, socket_{context, zmq::socket_type::dealer} {
    socket_.set(zmq::sockopt::routing_id, id_);
    socket_.set(zmq::sockopt::linger, 0);
    if (keys) {
      socket_.set(zmq::sockopt::curve_serverkey, keys->server_public);
      socket_.set(zmq::sockopt::curve_publickey, keys->own.public_key);
      socket_.set(zmq::sockopt::curve_secretkey, keys->own.secret_key);
    }
    socket_.connect(endpoint);
  }

  void send(const std::string& frame) { socket_.send(zmq::buffer(frame), zmq::send_flags::none); }

  void send_parts(const std::vector<std::string>& parts) {
    for (size_t i = 0; i < parts.size(); ++i)
      socket_.send(zmq::buffer(parts[i]),
                   i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }

  void hello() {
    send(wire::encode(wire::hello{.worker_id = id_,
                                  .role = contract::worker_role::device,
                                  .device_kind = "interpreter",
                                  .device_name = "cpu (triton interpreter)",
                                  .slots = 1,
                                  .jobs = {contract::job_kind::test},
                                  .toolchain = {{"triton", "3.6.0"}},
                                  .fingerprint = "fp",
                                  .host = "localhost",
                                  .pid = 1}));
  }

  void answer(const wire::job& job) {
    --held_;
    send(wire::encode(wire::result{.job_id = job.job_id,
                                   .status = contract::job_status::done,
                                   .payload = op_payload("answered by " + id_),
                                   .elapsed_ms = 5}));
  }

  /// The first frame of type T the daemon sends (others are skipped), or nullopt after `within`.
  template <class T>
  std::optional<T> await(std::chrono::milliseconds within = patience) {
    auto deadline = std::chrono::steady_clock::now() + within;
    auto next_beat = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < deadline) {
      if (beating && std::chrono::steady_clock::now() >= next_beat) {
        send(wire::encode(wire::worker_heartbeat{held_}));
        next_beat += 100ms;
      }
      std::array<zmq_pollitem_t, 1> items{{{socket_.handle(), 0, ZMQ_POLLIN, 0}}};
      zmq::poll(items, 20ms);
      if (!(items[0].revents & ZMQ_POLLIN))
        continue;
      zmq::message_t frame;
      (void)socket_.recv(frame);
      auto message = wire::decode_daemon_message(frame.to_string_view(), 1 << 20);
      EXPECT_TRUE(message) << render(message.error());
      if (message && std::holds_alternative<wire::job>(*message))
        ++held_;
      if (message && std::holds_alternative<T>(*message))
        return std::get<T>(*message);
    }
    return std::nullopt;
  }

  void close() { socket_.close(); }

  bool beating = true;

private:
  std::string id_;
  zmq::socket_t socket_;
  int64_t held_ = 0; // jobs taken and not answered, which its heartbeats report as busy
};

class WorkerSocket : public ::testing::Test {
protected:
  void SetUp() override {
    config.listen = "tcp://127.0.0.1:*";
    config.heartbeat = 300ms;
    config.max_frame_bytes = 64 * 1024;
    auto spawned = spawn_device_manager(sys, config, stats);
    ASSERT_TRUE(spawned) << render(spawned.error());
    manager = *spawned;
    endpoint = status().endpoint;
    ASSERT_THAT(endpoint, HasSubstr("tcp://127.0.0.1:"));
  }

  void TearDown() override {
    if (manager)
      self->request(manager, patience, atom::shutdown_v)
          .receive([](atom::ok) {}, [](caf::error&) {});
  }

  device_manager_status status() {
    device_manager_status out;
    self->request(manager, patience, atom::status_v)
        .receive([&](device_manager_status& x) { out = std::move(x); },
                 [&](caf::error& err) { ADD_FAILURE() << render(err); });
    return out;
  }

  device_job job(const std::string& id) {
    return {.id = id,
            .kind = contract::job_kind::test,
            .payload = op_payload("exp"),
            .deadline_ms = 60000};
  }

  // Waits for a job's reply (the request was sent earlier, so a worker could answer first).
  template <class Handle>
  std::optional<device_job_result> reply(Handle& pending) {
    std::optional<device_job_result> out;
    pending.receive([&](device_job_result& x) { out = std::move(x); },
                    [&](caf::error& err) { ADD_FAILURE() << render(err); });
    return out;
  }

  // w1 takes job `id` and then fails as `fail` makes it; the job must go to w2 as attempt 2,
  // and w2's answer must reach the submitter.
  void take_over_from_failing_worker(const std::string& id,
                                     const std::function<void(scripted_worker&)>& fail) {
    scripted_worker w1{context, endpoint, "w1"};
    scripted_worker w2{context, endpoint, "w2"};
    w1.hello();
    ASSERT_TRUE(w1.await<wire::welcome>());
    w2.hello();
    ASSERT_TRUE(w2.await<wire::welcome>());
    auto pending = self->request(manager, patience, atom::submit_v, job(id));
    auto first = w1.await<wire::job>();
    ASSERT_TRUE(first);
    EXPECT_EQ(first->attempt, 1);
    fail(w1);
    auto second = w2.await<wire::job>();
    ASSERT_TRUE(second);
    EXPECT_EQ(second->job_id, id);
    EXPECT_EQ(second->attempt, 2);
    w2.answer(*second);
    auto result = reply(pending);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->worker_id, "w2");
    EXPECT_EQ(result->attempt, 2);
  }

  double malformed(const std::string& reason) { return stats->malformed_frames(reason).Value(); }

  system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::shared_ptr<metrics> stats = std::make_shared<metrics>("test");
  device_manager_config config;
  device_manager_actor manager;
  std::string endpoint;
  zmq::context_t context;
};

} // namespace

TEST_F(WorkerSocket, AWorkerRegistersBeatsTakesAJobAndAnswers) {
  scripted_worker w1{context, endpoint, "w1"};
  w1.hello();
  auto welcome = w1.await<wire::welcome>();
  ASSERT_TRUE(welcome);
  EXPECT_EQ(*welcome, (wire::welcome{300, 3}));
  EXPECT_TRUE(w1.await<wire::daemon_heartbeat>());
  auto pending = self->request(manager, patience, atom::submit_v, job("t-1"));
  auto dispatched = w1.await<wire::job>();
  ASSERT_TRUE(dispatched);
  EXPECT_EQ(dispatched->job_id, "t-1");
  EXPECT_EQ(dispatched->attempt, 1);
  EXPECT_EQ(dispatched->payload, op_payload("exp"));
  w1.answer(*dispatched);
  auto result = reply(pending);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, contract::job_status::done);
  EXPECT_EQ(result->worker_id, "w1");
  EXPECT_EQ(result->payload, op_payload("answered by w1"));
}

TEST_F(WorkerSocket, AJobOfAWorkerThatDiesIsCompletedOnceByAnother) {
  // Dies mid-job: no more heartbeats, and the connection is gone.
  ASSERT_NO_FATAL_FAILURE(
      take_over_from_failing_worker("t-2", [](scripted_worker& w1) { w1.close(); }));
  auto totals = status();
  EXPECT_EQ(totals.requeued, 1);
  EXPECT_EQ(totals.done, 1);
  EXPECT_EQ(totals.workers["interpreter"]["dead"], 1);
  EXPECT_EQ(stats->job_requeues(requeue_reason::worker_lost).Value(), 1);
}

// Connected but silent (hung): only the application heartbeats can tell.
TEST_F(WorkerSocket, AJobOfAHungWorkerGoesToAnotherAfterThreeMissedHeartbeats) {
  ASSERT_NO_FATAL_FAILURE(
      take_over_from_failing_worker("t-5", [](scripted_worker& w1) { w1.beating = false; }));
  std::vector<worker_info> workers;
  self->request(manager, patience, atom::workers_v)
      .receive([&](std::vector<worker_info>& x) { workers = std::move(x); },
               [&](caf::error& err) { ADD_FAILURE() << render(err); });
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[1].worker_id, "w1");
  EXPECT_EQ(workers[1].dead_reason, "missed 3 heartbeats");
}

TEST_F(WorkerSocket, MalformedFramesAreCountedAndDroppedWhileAGoodWorkerWorks) {
  scripted_worker good{context, endpoint, "good"};
  good.hello();
  ASSERT_TRUE(good.await<wire::welcome>());
  scripted_worker bad{context, endpoint, "bad"};
  bad.beating = false;
  auto frame = [](std::map<std::string, msgpack::type::variant> fields) {
    msgpack::sbuffer buffer;
    msgpack::pack(buffer, fields);
    return std::string{buffer.data(), buffer.size()};
  };
  bad.send(std::string{"\xc1 garbage bytes"});
  bad.send(std::string{"\xdd\xff\xff\xff\xff", 5}); // a 4-billion-element array
  bad.send(std::string(100 * 1024, '\x90'));        // over the 64 KiB limit
  bad.send(frame({{"v", int64_t{1}}, {"type", std::string{"steal"}}}));
  bad.send(frame({{"v", int64_t{2}}, {"type", std::string{"heartbeat"}}, {"busy", int64_t{0}}}));
  bad.send(frame({{"v", int64_t{1}}, {"type", std::string{"result"}}}));
  bad.send(
      frame({{"v", int64_t{1}}, {"type", std::string{"heartbeat"}}, {"busy", std::string{"x"}}}));
  bad.send_parts({wire::encode(wire::worker_heartbeat{}), wire::encode(wire::worker_heartbeat{})});
  bad.send(frame({{"v", int64_t{1}}, {"type", std::string{"hello"}}}));
  // Frames of one peer arrive in order: once the daemon answers this one, it has seen the rest.
  bad.send(wire::encode(wire::worker_heartbeat{}));
  ASSERT_TRUE(bad.await<wire::hello_required>());
  EXPECT_EQ(malformed("not_msgpack"), 1);
  EXPECT_EQ(malformed("oversized"), 2);
  EXPECT_EQ(malformed("unknown_type"), 1);
  EXPECT_EQ(malformed("version_mismatch"), 1);
  EXPECT_EQ(malformed("missing_key"), 2);
  EXPECT_EQ(malformed("bad_key"), 1);
  EXPECT_EQ(malformed("multipart"), 1);

  auto pending = self->request(manager, patience, atom::submit_v, job("t-3"));
  auto dispatched = good.await<wire::job>();
  ASSERT_TRUE(dispatched);
  good.answer(*dispatched);
  auto result = reply(pending);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->worker_id, "good");
}

// Strangers over a real socket: a lint worker claiming test jobs is told why it is refused and
// gets nothing; one claiming 2^63-1 slots is registered with workers.max_slots.
TEST_F(WorkerSocket, HellosClaimingTooMuchAreRefusedOrCapped) {
  auto claim = [](const std::string& id, contract::worker_role role, std::string kind,
                  int64_t slots, std::vector<contract::job_kind> jobs) {
    return wire::encode(wire::hello{.worker_id = id,
                                    .role = role,
                                    .device_kind = std::move(kind),
                                    .device_name = "stranger",
                                    .slots = slots,
                                    .jobs = std::move(jobs),
                                    .fingerprint = "fp",
                                    .host = "elsewhere",
                                    .pid = 1});
  };
  scripted_worker liar{context, endpoint, "liar"};
  liar.send(claim("liar", contract::worker_role::lint, "none", 1,
                  {contract::job_kind::lint, contract::job_kind::test}));
  auto refused = liar.await<wire::goodbye>();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->reason, "hello refused: a lint worker cannot serve 'test' jobs");
  scripted_worker greedy{context, endpoint, "greedy"};
  greedy.send(claim("greedy", contract::worker_role::device, "interpreter",
                    std::numeric_limits<int64_t>::max(), {contract::job_kind::test}));
  ASSERT_TRUE(greedy.await<wire::welcome>());
  std::vector<worker_info> workers;
  self->request(manager, patience, atom::workers_v)
      .receive([&](std::vector<worker_info>& x) { workers = std::move(x); },
               [&](caf::error& err) { ADD_FAILURE() << render(err); });
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].worker_id, "greedy");
  EXPECT_EQ(workers[0].slots, 64);
  EXPECT_EQ(status().refused, 1);
}

TEST_F(WorkerSocket, AHelloMustComeFromTheWorkersOwnIdentity) {
  scripted_worker impostor{context, endpoint, "w9"};
  impostor.beating = false;
  auto hello =
      wire::hello{.worker_id = "someone-else", .role = contract::worker_role::lint, .slots = 1};
  impostor.send(wire::encode(hello));
  impostor.send(wire::encode(wire::worker_heartbeat{}));
  ASSERT_TRUE(impostor.await<wire::hello_required>());
  EXPECT_EQ(malformed("identity_mismatch"), 1);
  EXPECT_TRUE(status().workers.empty());
}

TEST_F(WorkerSocket, BindFailuresNameTheAddressAndWhatToDo) {
  auto taken = config;
  taken.listen = endpoint;
  auto second = spawn_device_manager(sys, taken, stats);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error(), errc::config_invalid);
  EXPECT_THAT(render(second.error()),
              HasSubstr("workers.listen '" + endpoint + "': cannot bind (Address already in use)"));
  auto nonsense = config;
  nonsense.listen = "tcp//127.0.0.1:5555";
  auto third = spawn_device_manager(sys, nonsense, stats);
  ASSERT_FALSE(third);
  EXPECT_THAT(render(third.error()), HasSubstr("expected an endpoint like tcp://0.0.0.0:5555"));
}

TEST_F(WorkerSocket, ShutdownSaysGoodbyeToWorkers) {
  scripted_worker w1{context, endpoint, "w1"};
  w1.hello();
  ASSERT_TRUE(w1.await<wire::welcome>());
  auto pending = self->request(manager, patience, atom::submit_v, job("t-4"));
  ASSERT_TRUE(w1.await<wire::job>());
  bool stopped = false;
  self->request(manager, patience, atom::shutdown_v)
      .receive([&](atom::ok) { stopped = true; },
               [&](caf::error& err) { ADD_FAILURE() << render(err); });
  EXPECT_TRUE(stopped);
  auto goodbye = w1.await<wire::goodbye>();
  ASSERT_TRUE(goodbye);
  EXPECT_EQ(goodbye->reason, "daemon shutting down");
  pending.receive([](device_job_result&) { ADD_FAILURE() << "a result after shutdown"; },
                  [](caf::error& err) { EXPECT_EQ(err, errc::cancelled); });
  manager = device_manager_actor{};
}

// Workers authenticate with CURVE: the daemon's socket admits the keys its allow-list directory
// holds, refuses every other peer (counted, never registered, never given a job), and admits a
// key once the directory has it and is read again.
class CurveWorkerSocket : public WorkerSocket {
protected:
  void SetUp() override {
    keys_dir = std::filesystem::temp_directory_path() /
               ("opforge-curve-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(keys_dir);
    std::filesystem::create_directories(keys_dir / "allowed");
    server = *curve::generate();
    admitted = *curve::generate();
    ASSERT_FALSE(
        curve::write_certificates(keys_dir / "allowed" / "admitted", {admitted.public_key}));
    allowed = std::make_shared<curve::allow_list>(keys_dir / "allowed",
                                                  std::map<std::string, std::string>{});
    ASSERT_EQ(allowed->reload(), size_t{1});
    config.auth = {server, allowed};
    WorkerSocket::SetUp();
  }

  void TearDown() override {
    WorkerSocket::TearDown();
    std::filesystem::remove_all(keys_dir);
  }

  curve_client client(const curve::key_pair& own) const { return {server.public_key, own}; }

  double refused(auth_refusal reason) { return stats->worker_auth_refused(reason).Value(); }

  // Waits until the refusal counter of `reason` reaches `count` (handshakes run on their own).
  bool refused_at_least(auth_refusal reason, double count) {
    auto deadline = std::chrono::steady_clock::now() + patience;
    while (refused(reason) < count && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    return refused(reason) >= count;
  }

  std::filesystem::path keys_dir;
  curve::key_pair server;
  curve::key_pair admitted;
  std::shared_ptr<curve::allow_list> allowed;
};

TEST_F(CurveWorkerSocket, AWorkerWithAnAllowedKeyRegistersAndAnswersJobs) {
  scripted_worker w1{context, endpoint, "w1", client(admitted)};
  w1.hello();
  ASSERT_TRUE(w1.await<wire::welcome>());
  auto pending = self->request(manager, patience, atom::submit_v, job("t-curve"));
  auto dispatched = w1.await<wire::job>();
  ASSERT_TRUE(dispatched);
  w1.answer(*dispatched);
  auto result = reply(pending);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->worker_id, "w1");
  EXPECT_EQ(refused(auth_refusal::unknown_key), 0);
  EXPECT_EQ(refused(auth_refusal::handshake), 0);
}

// The forging worker of issue 17: it speaks the protocol perfectly and would answer `pass` to
// every test, but its key is not on the allow-list, so its hello never reaches the device manager
// and no job ever reaches it, while an admitted worker gets the job.
TEST_F(CurveWorkerSocket, UnknownKeysAndPeersWithoutCurveNeverRegister) {
  // Refused peers have no connection to queue heartbeats on: a send would block.
  scripted_worker forger{context, endpoint, "forger", client(*curve::generate())};
  forger.beating = false;
  forger.hello();
  scripted_worker plain{context, endpoint, "plain"};
  plain.beating = false;
  plain.hello();
  scripted_worker wrong_server{context, endpoint, "wrong-server",
                               curve_client{curve::generate()->public_key, admitted}};
  wrong_server.beating = false;
  wrong_server.hello();
  ASSERT_TRUE(refused_at_least(auth_refusal::unknown_key, 1));
  ASSERT_TRUE(refused_at_least(auth_refusal::handshake, 2));
  auto pending = self->request(manager, patience, atom::submit_v, job("t-forged"));
  EXPECT_FALSE(forger.await<wire::welcome>(500ms));
  EXPECT_FALSE(plain.await<wire::welcome>(100ms));
  EXPECT_FALSE(wrong_server.await<wire::welcome>(100ms));
  EXPECT_TRUE(status().workers.empty());
  EXPECT_EQ(status().refused, 0) << "refused by CURVE, before any hello is read";

  scripted_worker honest{context, endpoint, "honest", client(admitted)};
  honest.hello();
  auto dispatched = honest.await<wire::job>();
  ASSERT_TRUE(dispatched);
  EXPECT_EQ(dispatched->job_id, "t-forged");
  honest.answer(*dispatched);
  auto result = reply(pending);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->worker_id, "honest");
}

TEST_F(CurveWorkerSocket, AKeyAddedToTheAllowListIsAdmittedAfterAReload) {
  auto newcomer = *curve::generate();
  {
    scripted_worker early{context, endpoint, "newcomer", client(newcomer)};
    early.beating = false;
    early.hello();
    ASSERT_TRUE(refused_at_least(auth_refusal::unknown_key, 1));
    EXPECT_FALSE(early.await<wire::welcome>(300ms));
  }
  ASSERT_FALSE(curve::write_certificates(keys_dir / "allowed" / "newcomer", {newcomer.public_key}));
  EXPECT_FALSE(allowed->admits(newcomer.public_key)) << "not before the reload";
  ASSERT_EQ(allowed->reload(), size_t{2});
  EXPECT_EQ(allowed->admits(newcomer.public_key), "newcomer.key");
  scripted_worker later{context, endpoint, "newcomer", client(newcomer)};
  later.hello();
  EXPECT_TRUE(later.await<wire::welcome>());

  // A broken file leaves the list in force as it was, and says which file is broken.
  std::ofstream{keys_dir / "allowed" / "broken.key"} << "public-key = \"short\"\n";
  auto failed = allowed->reload();
  ASSERT_FALSE(failed);
  EXPECT_THAT(render(failed.error()), HasSubstr("broken.key"));
  EXPECT_TRUE(allowed->admits(newcomer.public_key));
}
