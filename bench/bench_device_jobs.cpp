// Device-job overhead of the daemon: submit -> ZeroMQ -> worker -> result -> reply, with a C++
// worker that answers at once, so that only the device layer is measured.
//   bench_device_jobs [jobs] [slots]

#include "actors/fleet/spawn_device_manager.hpp"
#include "messages/errors.hpp"
#include "messages/system_config.hpp"

#include <algorithm>
#include <atomic>
#include <future>
#include <iostream>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

using namespace opforge;
using namespace std::chrono_literals;
using bench_clock = std::chrono::steady_clock;

namespace {

// A worker that answers every job at once and beats while it waits.
void answering_worker(const std::string& endpoint, int64_t slots, std::atomic<bool>& stop) {
  zmq::context_t context;
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  socket.set(zmq::sockopt::routing_id, "bench-worker");
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(endpoint);
  socket.send(zmq::buffer(wire::encode(wire::hello{.worker_id = "bench-worker",
                                                   .role = contract::worker_role::device,
                                                   .device_kind = "interpreter",
                                                   .device_name = "bench",
                                                   .slots = slots,
                                                   .jobs = {contract::job_kind::test},
                                                   .toolchain = {},
                                                   .fingerprint = "bench",
                                                   .host = "localhost",
                                                   .pid = getpid()})));
  auto next_beat = bench_clock::now();
  while (!stop) {
    if (bench_clock::now() >= next_beat) {
      socket.send(zmq::buffer(wire::encode(wire::worker_heartbeat{})));
      next_beat += 300ms;
    }
    std::array<zmq_pollitem_t, 1> items{{{socket.handle(), 0, ZMQ_POLLIN, 0}}};
    zmq::poll(items, 50ms);
    zmq::message_t frame;
    while (socket.recv(frame, zmq::recv_flags::dontwait)) {
      auto message = wire::decode_daemon_message(frame.to_string_view(), 1 << 20);
      if (!message || !std::holds_alternative<wire::job>(*message))
        continue;
      auto& job = std::get<wire::job>(*message);
      socket.send(zmq::buffer(wire::encode(wire::result{.job_id = job.job_id,
                                                        .status = contract::job_status::done,
                                                        .payload = {},
                                                        .elapsed_ms = 0})));
    }
  }
}

device_job make_job(int i) {
  return {.id = "b-" + std::to_string(i), .kind = contract::job_kind::test, .deadline_ms = 60000};
}

} // namespace

int main(int argc, char** argv) {
  int jobs = argc > 1 ? std::stoi(argv[1]) : 20000;
  int64_t slots = argc > 2 ? std::stoi(argv[2]) : 8;
  spdlog::set_level(spdlog::level::warn);
  system_config cfg;
  caf::actor_system sys{cfg};
  device_manager_config config;
  config.listen = "tcp://127.0.0.1:*";
  config.heartbeat = 1000ms;
  auto manager = spawn_device_manager(sys, config, std::make_shared<metrics>("bench"));
  if (!manager) {
    std::cerr << render(manager.error()) << "\n";
    return 1;
  }
  caf::scoped_actor self{sys};
  std::string endpoint;
  self->request(*manager, 10s, atom::status_v)
      .receive([&](device_manager_status& status) { endpoint = status.endpoint; },
               [&](caf::error&) {});
  std::atomic<bool> stop{false};
  std::thread worker{[&] { answering_worker(endpoint, slots, stop); }};

  // One job at a time: the round trip of a single job.
  std::vector<double> round_trips;
  for (int i = 0; i < 2000; ++i) {
    auto start = bench_clock::now();
    self->request(*manager, 10s, atom::submit_v, make_job(i))
        .receive([](device_job_result&) {},
                 [](caf::error& err) { std::cerr << render(err) << "\n"; });
    round_trips.push_back(
        std::chrono::duration<double, std::micro>(bench_clock::now() - start).count());
  }
  std::sort(round_trips.begin(), round_trips.end());

  // Everything at once: how fast the queue drains through `slots` slots.
  std::promise<int> finished;
  auto start = bench_clock::now();
  sys.spawn([&, manager = *manager](caf::event_based_actor* driver) {
    auto answered = std::make_shared<int>(0);
    for (int i = 0; i < jobs; ++i)
      driver->request(manager, caf::infinite, atom::submit_v, make_job(100000 + i))
          .then([=, &finished](device_job_result&) {
            if (++*answered == jobs)
              finished.set_value(*answered);
          });
  });
  finished.get_future().wait();
  auto seconds = std::chrono::duration<double>(bench_clock::now() - start).count();

  self->request(*manager, 10s, atom::shutdown_v).receive([](atom::ok) {}, [](caf::error&) {});
  stop = true;
  worker.join();
  std::cout << "single job round trip (2000 sequential): p50 "
            << round_trips[round_trips.size() / 2] << " us, p99 "
            << round_trips[round_trips.size() * 99 / 100] << " us\n"
            << jobs << " jobs submitted at once through " << slots << " slots: " << seconds
            << " s, " << jobs / seconds << " jobs/s\n";
  return 0;
}
