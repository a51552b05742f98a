#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/expected.hpp>

#include <sys/types.h>

namespace opforge {

/// Local worker processes of one kind (`workers.local` in the configuration).
struct local_worker_spec {
  std::string device_kind = "interpreter"; // cuda, interpreter; none for role lint
  int count = 1;
  std::optional<int64_t> slots; // empty: `--slots auto`, the worker's device kind's default
  std::string role = "device";  // device or lint
};

struct supervisor_config {
  std::vector<local_worker_spec> workers;
  /// Where the workers connect: the daemon's workers socket (see `connect_endpoint`).
  std::string endpoint;
  /// CURVE: the server's public key file and the workers' own secret key file (`--server-key`,
  /// `--key-file`); both empty when the workers socket admits unauthenticated workers.
  std::string server_key_file;
  std::string key_file;
  /// The Python that has opforge_worker installed.
  std::string python = "python3";
  /// The command line of one worker process; `worker_command` when unset. Tests put a script here.
  std::function<std::vector<std::string>(const local_worker_spec&)> command;
  std::chrono::milliseconds first_backoff{1000};
  std::chrono::milliseconds max_backoff{30000};
  /// A process that ran this long before it exited is restarted after `first_backoff` again.
  std::chrono::milliseconds stable_after{60000};
  /// Between SIGTERM and SIGKILL when stopping.
  std::chrono::milliseconds stop_grace{5000};
};

/// The worker's `--slots`: the spec's count, or `auto`.
std::string slots_arg(const local_worker_spec& spec);

/// `<python> -m opforge_worker serve --connect <endpoint> --device <kind> --slots N|auto --role R`,
/// and `--server-key F --key-file F` when the config names key files.
std::vector<std::string> worker_command(const supervisor_config& config,
                                        const local_worker_spec& spec);

/// The address a local worker connects to for a socket bound to `bound`: wildcard hosts
/// (`0.0.0.0`, `*`) become 127.0.0.1.
std::string connect_endpoint(const std::string& bound);

/// Restart delays: `first` after a crash, doubling with every quick crash up to `max`, and back
/// to `first` after a run of at least `stable_after`.
class restart_backoff {
public:
  explicit restart_backoff(const supervisor_config& config);

  /// The delay before restarting a process that exited after running for `lived`.
  std::chrono::milliseconds after_exit(std::chrono::milliseconds lived);

private:
  std::chrono::milliseconds first_;
  std::chrono::milliseconds max_;
  std::chrono::milliseconds stable_after_;
  std::chrono::milliseconds next_;
};

/// Keeps the configured local worker processes running: starts each in its own process group
/// from a plain thread, restarts it with `restart_backoff` when it exits, and on `stop` sends
/// the groups SIGTERM, then SIGKILL after `stop_grace`.
class supervisor {
public:
  struct process_view {
    local_worker_spec spec;
    pid_t pid = 0; // 0 while waiting to restart
    int starts = 0;
    int last_status = 0; // as waitpid reported it
  };

  /// Checks the configuration (errc::config_invalid naming the entry) and starts the processes.
  static caf::expected<std::unique_ptr<supervisor>> start(supervisor_config config);

  ~supervisor();

  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;

  /// Stops every process and the thread. Idempotent.
  void stop();

  std::vector<process_view> processes() const;

private:
  struct process {
    process_view view;
    restart_backoff backoff;
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point restart_at;
  };

  explicit supervisor(supervisor_config config);

  void run();
  void launch(process& p);
  void reap(process& p, bool block);
  void terminate_all(std::unique_lock<std::mutex>& lock);

  supervisor_config config_;
  mutable std::mutex mutex_; // guards processes_ and stopping_
  std::condition_variable wake_;
  std::vector<process> processes_;
  bool stopping_ = false;
  std::once_flag joined_;
  std::thread thread_;
};

} // namespace opforge
