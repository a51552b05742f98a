#include "devices/supervisor.hpp"

#include "messages/contract.hpp"
#include "messages/errors.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <caf/error.hpp>

#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace opforge {

namespace {

// How often the thread looks for exited processes and due restarts.
constexpr auto poll_interval = std::chrono::milliseconds{50};

std::string describe_status(int status) {
  if (WIFEXITED(status))
    return "exited with status " + std::to_string(WEXITSTATUS(status)) +
           (WEXITSTATUS(status) == 127 ? " (the command could not be run)" : "");
  if (WIFSIGNALED(status))
    return std::string{"killed by signal "} + strsignal(WTERMSIG(status));
  return "stopped";
}

std::string join(const std::vector<std::string>& args) {
  std::string out;
  for (auto& arg : args)
    out += (out.empty() ? "" : " ") + arg;
  return out;
}

caf::error check(const supervisor_config& config) {
  for (size_t i = 0; i < config.workers.size(); ++i) {
    auto& spec = config.workers[i];
    auto invalid = [&](const std::string& what) {
      return caf::make_error(errc::config_invalid, "local worker " + std::to_string(i + 1) + " (" +
                                                       spec.device_kind + "): " + what);
    };
    if (!from_string<contract::worker_role>(spec.role))
      return invalid("role must be " + contract::one_of<contract::worker_role>() + ", got '" +
                     spec.role + "'");
    if (spec.count < 0)
      return invalid("count must not be negative");
    if (spec.slots && *spec.slots < 1)
      return invalid("slots must be at least 1");
  }
  if (config.first_backoff.count() <= 0 || config.max_backoff < config.first_backoff)
    return caf::make_error(errc::config_invalid,
                           "local workers: the restart backoff must start above 0 and end at "
                           "or above where it starts");
  return {};
}

} // namespace

std::string slots_arg(const local_worker_spec& spec) {
  return spec.slots ? std::to_string(*spec.slots) : "auto";
}

std::vector<std::string> worker_command(const supervisor_config& config,
                                        const local_worker_spec& spec) {
  std::vector<std::string> out{
      config.python,   "-m",       "opforge_worker", "serve",   "--connect",
      config.endpoint, "--device", spec.device_kind, "--slots", slots_arg(spec),
      "--role",        spec.role};
  if (!config.key_file.empty())
    out.insert(out.end(), {"--server-key", config.server_key_file, "--key-file", config.key_file});
  return out;
}

std::string connect_endpoint(const std::string& bound) {
  for (auto wildcard : {"://0.0.0.0:", "://*:"})
    if (auto at = bound.find(wildcard); at != std::string::npos)
      return bound.substr(0, at) + "://127.0.0.1:" + bound.substr(at + std::strlen(wildcard));
  return bound;
}

restart_backoff::restart_backoff(const supervisor_config& config)
    : first_{config.first_backoff}, max_{config.max_backoff},
      stable_after_{config.stable_after}, next_{config.first_backoff} {}

std::chrono::milliseconds restart_backoff::after_exit(std::chrono::milliseconds lived) {
  if (lived >= stable_after_)
    next_ = first_;
  auto delay = next_;
  next_ = std::min(next_ * 2, max_);
  return delay;
}

caf::expected<std::unique_ptr<supervisor>> supervisor::start(supervisor_config config) {
  if (auto err = check(config))
    return err;
  std::unique_ptr<supervisor> result{new supervisor{std::move(config)}};
  result->thread_ = std::thread{[self = result.get()] { self->run(); }};
  return result;
}

supervisor::supervisor(supervisor_config config) : config_{std::move(config)} {
  if (!config_.command)
    config_.command = [config = config_](const local_worker_spec& spec) {
      return worker_command(config, spec);
    };
  auto now = std::chrono::steady_clock::now();
  for (auto& spec : config_.workers)
    for (int i = 0; i < spec.count; ++i)
      processes_.push_back({{spec}, restart_backoff{config_}, now, now});
}

supervisor::~supervisor() {
  stop();
}

void supervisor::stop() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    stopping_ = true;
  }
  wake_.notify_all();
  std::call_once(joined_, [this] {
    if (thread_.joinable())
      thread_.join();
  });
}

std::vector<supervisor::process_view> supervisor::processes() const {
  std::lock_guard<std::mutex> guard{mutex_};
  std::vector<process_view> out;
  for (auto& p : processes_)
    out.push_back(p.view);
  return out;
}

void supervisor::run() {
  std::unique_lock<std::mutex> lock{mutex_};
  while (!stopping_) {
    auto now = std::chrono::steady_clock::now();
    for (auto& p : processes_) {
      if (p.view.pid != 0)
        reap(p, false);
      if (p.view.pid == 0 && now >= p.restart_at)
        launch(p);
    }
    wake_.wait_for(lock, poll_interval, [this] { return stopping_; });
  }
  terminate_all(lock);
}

void supervisor::launch(process& p) {
  auto args = config_.command(p.view.spec);
  std::vector<char*> argv;
  for (auto& arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  auto parent = getpid();
  auto pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec: the parent has other threads.
    setpgid(0, 0);
    // A worker must not outlive the daemon (a restarted daemon starts its own).
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
      _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  auto now = std::chrono::steady_clock::now();
  if (pid < 0) {
    auto delay = p.backoff.after_exit(std::chrono::milliseconds{0});
    spdlog::error("cannot start local worker ({}): fork failed: {}; retrying in {} ms", join(args),
                  std::strerror(errno), delay.count());
    p.restart_at = now + delay;
    return;
  }
  // Also here, so that the group exists before anyone signals it.
  setpgid(pid, pid);
  p.view.pid = pid;
  ++p.view.starts;
  p.started = now;
  spdlog::info("started local worker (pid {}): {}", pid, join(args));
}

void supervisor::reap(process& p, bool block) {
  int status = 0;
  auto reaped = waitpid(p.view.pid, &status, block ? 0 : WNOHANG);
  if (reaped == 0 || (reaped < 0 && errno == EINTR))
    return;
  // Whatever the worker left in its group goes with it.
  kill(-p.view.pid, SIGKILL);
  auto now = std::chrono::steady_clock::now();
  auto lived = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.started);
  p.view.pid = 0;
  p.view.last_status = status;
  if (stopping_)
    return;
  auto delay = p.backoff.after_exit(lived);
  p.restart_at = now + delay;
  spdlog::warn("local worker {} {} after {} ms; restarting in {} ms", p.view.spec.device_kind,
               describe_status(status), lived.count(), delay.count());
}

void supervisor::terminate_all(std::unique_lock<std::mutex>& lock) {
  for (auto& p : processes_)
    if (p.view.pid != 0)
      kill(-p.view.pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + config_.stop_grace;
  auto running = [this] {
    return std::any_of(processes_.begin(), processes_.end(),
                       [](const process& p) { return p.view.pid != 0; });
  };
  while (running() && std::chrono::steady_clock::now() < deadline) {
    for (auto& p : processes_)
      if (p.view.pid != 0)
        reap(p, false);
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    lock.lock();
  }
  for (auto& p : processes_) {
    if (p.view.pid == 0)
      continue;
    spdlog::warn("local worker (pid {}) ignored SIGTERM for {} ms: killing it", p.view.pid,
                 config_.stop_grace.count());
    kill(-p.view.pid, SIGKILL);
    reap(p, true);
  }
}

} // namespace opforge
