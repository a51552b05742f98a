#include "actors/llm/replay_launcher.hpp"

#include "messages/errors.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string_view>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace opforge {

namespace {

caf::error failed(const std::string& what) {
  return caf::make_error(errc::endpoint_fault, "replay server: " + what);
}

// Reads up to the first newline, waiting at most until `deadline`. Empty on EOF or timeout.
std::string read_first_line(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string line;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return {};
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0)
      continue;
    char c;
    auto n = read(fd, &c, 1);
    if (n <= 0)
      return {};
    if (c == '\n')
      return line;
    line.push_back(c);
  }
}

void stop(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// What became of a reaped process, for the log.
std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return std::string{"was killed by signal "} + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

struct launched {
  pid_t pid;
  uint16_t port;
};

// Starts a server process on `port` (0: any free one) and waits for the port it bound.
caf::expected<launched> launch(const replay_server::options& opts, uint16_t port) {
  std::vector<std::string> args{
      opts.python,          "-m",           "opforge_replay",
      "--cassette",         opts.cassette,  "--port",
      std::to_string(port), "--latency-ms", std::to_string(opts.latency_ms)};
  if (!opts.hit_log.empty())
    args.insert(args.end(), {"--log", opts.hit_log});
  if (opts.cycle)
    args.push_back("--cycle");
  if (opts.by_answer_index)
    args.push_back("--by-answer-index");
  // The server asks the kernel to stop it when this process dies, so that a daemon killed by
  // SIGKILL (no destructor runs) leaves no server behind.
  args.insert(args.end(), {"--parent-pid", std::to_string(getpid())});
  std::vector<std::string> env;
  // An empty entry would put the working directory on the server's import path.
  std::string pythonpath = opts.worker_dir;
  for (char** e = environ; *e; ++e) {
    std::string_view entry{*e};
    if (!entry.starts_with("PYTHONPATH=")) {
      env.emplace_back(entry);
      continue;
    }
    auto inherited = entry.substr(std::string_view{"PYTHONPATH="}.size());
    if (!inherited.empty())
      pythonpath += (pythonpath.empty() ? "" : ":") + std::string{inherited};
  }
  if (!pythonpath.empty())
    env.push_back("PYTHONPATH=" + pythonpath);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    return failed(std::string{"pipe: "} + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  // The daemon blocks SIGTERM and SIGINT to take them in its signal thread; a child inherits the
  // mask, and the server would then ignore both the stop below and its parent-death signal.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  auto rc = posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return failed("cannot run " + opts.python + ": " + std::strerror(rc));
  }
  auto line = read_first_line(out[0], std::chrono::steady_clock::now() + std::chrono::seconds{30});
  close(out[0]);
  char* end = nullptr;
  auto bound = std::strtol(line.c_str(), &end, 10);
  if (line.empty() || *end != '\0' || bound <= 0 || bound > 65535) {
    stop(pid);
    return failed("no port from " + opts.python + " for cassette " + opts.cassette +
                  " (see its stderr)");
  }
  return launched{pid, static_cast<uint16_t>(bound)};
}

} // namespace

caf::expected<std::unique_ptr<replay_server>> replay_server::start(const options& opts) {
  auto started = launch(opts, 0);
  if (!started)
    return started.error();
  return std::unique_ptr<replay_server>{new replay_server{opts, started->pid, started->port}};
}

replay_server::replay_server(options opts, pid_t pid, uint16_t port)
    : opts_{std::move(opts)}, port_{port}, pid_{pid}, watcher_{[this] { watch(); }} {}

pid_t replay_server::pid() const {
  std::lock_guard lock{mutex_};
  return pid_;
}

void replay_server::watch() {
  using namespace std::chrono_literals;
  constexpr auto first_delay = 250ms;
  constexpr auto max_delay = 30s;
  constexpr auto short_life = 10s; // a server that died sooner backs off its restart further
  auto delay = first_delay;
  auto started_at = std::chrono::steady_clock::now();
  for (;;) {
    pid_t pid = this->pid();
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::unique_lock lock{mutex_};
    pid_ = 0;
    changed_.notify_all();
    if (stopping_)
      return;
    delay = std::chrono::steady_clock::now() - started_at < short_life
                ? std::min<std::chrono::milliseconds>(delay * 2, max_delay)
                : first_delay;
    spdlog::warn("replay server for {} (pid {}) {}; starting it again on port {} in {} ms",
                 opts_.cassette, pid, describe_exit(status), port_, delay.count());
    for (;;) {
      if (changed_.wait_for(lock, delay, [this] { return stopping_; }))
        return;
      lock.unlock();
      auto again = launch(opts_, port_);
      lock.lock();
      if (again && stopping_) {
        lock.unlock();
        stop(again->pid);
        return;
      }
      if (again) {
        pid_ = again->pid;
        started_at = std::chrono::steady_clock::now();
        ++restarts_;
        if (opts_.restarts)
          opts_.restarts->Increment();
        spdlog::info("replay server for {} running again (pid {}, port {})", opts_.cassette,
                     again->pid, port_);
        break;
      }
      delay = std::min<std::chrono::milliseconds>(delay * 2, max_delay);
      spdlog::error("replay server for {}: {}; trying again in {} ms", opts_.cassette,
                    render(again.error()), delay.count());
    }
  }
}

replay_server::~replay_server() {
  {
    std::unique_lock lock{mutex_};
    stopping_ = true;
    if (pid_ > 0)
      kill(pid_, SIGTERM);
    changed_.notify_all();
    // The watcher reaps it; a server that ignores SIGTERM gets SIGKILL.
    if (!changed_.wait_for(lock, std::chrono::seconds{5}, [this] { return pid_ == 0; }))
      kill(pid_, SIGKILL);
  }
  watcher_.join();
}

std::string replay_server::base_url() const {
  return "http://127.0.0.1:" + std::to_string(port_) + "/v1";
}

void replay_server::serve(endpoint_config& endpoint) const {
  endpoint.base_url = base_url();
  if (endpoint.model.empty())
    endpoint.model = "replay";
}

} // namespace opforge
