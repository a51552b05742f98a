#pragma once

// A replay server child process (`python -m opforge_replay`): what an endpoint of
// kind `replay` talks to, and what the tests and the benchmark run the real client against.
// Starting it blocks until the server printed its port: call it while setting the daemon up (or
// from a test), never from an actor. The server stops when the thread that started it exits (the
// kernel's parent-death signal follows the thread), so start it from the main thread.

#include "config/endpoint_config.hpp"

#include <cstdint>
#include <memory>
#include <string>

#include <caf/expected.hpp>

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
  };

  /// Starts the server and waits (at most 30 s) for its port.
  static caf::expected<std::unique_ptr<replay_server>> start(const options& opts);

  /// Stops the server (SIGTERM, then SIGKILL after 5 s) and reaps it.
  ~replay_server();

  replay_server(const replay_server&) = delete;
  replay_server& operator=(const replay_server&) = delete;

  uint16_t port() const { return port_; }

  /// "http://127.0.0.1:<port>/v1", the base_url of an endpoint.
  std::string base_url() const;

  /// Points a `kind: replay` endpoint at this server.
  void serve(endpoint_config& endpoint) const;

private:
  replay_server(pid_t pid, uint16_t port) : pid_{pid}, port_{port} {}
  pid_t pid_;
  uint16_t port_;
};

} // namespace opforge
