#pragma once

// A replay server child process (`python -m opforge_replay`): what an endpoint of
// kind `replay` talks to, and what the tests and the benchmark run the real client against.
// Starting it blocks until the server printed its port: call it while setting the daemon up (or
// from a test), never from an actor. The server stops when the thread that started it exits (the
// kernel's parent-death signal follows the thread), so start it from the main thread.
// A watcher thread reaps the server; one that dies while the daemon runs (killed, out of memory)
// is started again on the same port, so its endpoint keeps its base_url. Restarts that follow a
// short life back off (250 ms doubling to 30 s); each is logged and counted in
// opforge_replay_restarts_total.

#include "config/endpoint_config.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <caf/expected.hpp>

#include <prometheus/counter.h>
#include <sys/types.h>

namespace opforge {

class replay_server {
public:
  struct options {
    std::string python;     // the worker's interpreter
    std::string worker_dir; // put on PYTHONPATH, so the package need not be installed
    std::string cassette;
    uint32_t latency_ms = 0;
    std::string hit_log; // the server appends one JSON line per request; empty: none
    bool cycle = false;  // start over when an operator's answers run out
    // Serve the answer each request names (X-Opforge-Answer) rather than the next one, so that a
    // restarted daemon's resumed sessions get the answers they were waiting for.
    bool by_answer_index = false;
    // Counts restarts (opforge_replay_restarts_total{endpoint}); may be null.
    prometheus::Counter* restarts = nullptr;
  };

  /// Starts the server and waits (at most 30 s) for its port.
  static caf::expected<std::unique_ptr<replay_server>> start(const options& opts);

  /// Stops the watcher and the server (SIGTERM, then SIGKILL after 5 s).
  ~replay_server();

  replay_server(const replay_server&) = delete;
  replay_server& operator=(const replay_server&) = delete;

  uint16_t port() const { return port_; }

  /// The server process now running; 0 while it is being started again.
  pid_t pid() const;

  /// How often it was started again.
  uint64_t restarts() const { return restarts_; }

  /// "http://127.0.0.1:<port>/v1", the base_url of an endpoint.
  std::string base_url() const;

  /// Points a `kind: replay` endpoint at this server.
  void serve(endpoint_config& endpoint) const;

private:
  replay_server(options opts, pid_t pid, uint16_t port);
  void watch();

  const options opts_;
  const uint16_t port_;
  mutable std::mutex mutex_;
  std::condition_variable changed_; // pid_ or stopping_ changed
  pid_t pid_;                       // 0 once reaped, until a restart
  bool stopping_ = false;
  std::atomic<uint64_t> restarts_{0};
  std::thread watcher_; // last: it starts once the rest is set
};

} // namespace opforge
