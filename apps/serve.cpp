#include "apps/serve.hpp"

#include "actors/fleet/spawn_device_manager.hpp"
#include "actors/library/importer.hpp"
#include "actors/library/library.hpp"
#include "actors/library/maintenance.hpp"
#include "actors/sessions/campaign_manager.hpp"
#include "actors/store/store.hpp"
#include "apps/actor_query.hpp"
#include "apps/campaign_setup.hpp"
#include "apps/control_server.hpp"
#include "apps/worker_keys.hpp"
#include "devices/supervisor.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/system_config.hpp"
#include "messages/type_ids.hpp"
#include "messages/wire.hpp"
#include "persistence/rocksdb_store.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include <fcntl.h>
#include <poll.h>
#include <prometheus/exposer.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

namespace opforge {

namespace {

// What the main thread waits for: a reason to stop (SIGINT, SIGTERM, a shutdown request), or
// SIGHUP, which reloads the workers' allow-list.
struct main_event {
  bool reload = false;
  std::string reason;
};

// Turns signals and shutdown requests into events the main thread waits for. The signals are
// blocked in every thread (so construct this before starting any) and read from a signalfd: no
// work ever runs in a signal handler.
class stop_events {
public:
  stop_events() {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    signal_fd_ = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
    request_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }

  ~stop_events() {
    ::close(signal_fd_);
    ::close(request_fd_);
  }

  stop_events(const stop_events&) = delete;
  stop_events& operator=(const stop_events&) = delete;

  /// Asks the main thread to stop; safe from any thread.
  void request() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(request_fd_, &one, sizeof one);
  }

  /// The next event within `timeout`, if any.
  std::optional<main_event> wait(std::chrono::milliseconds timeout) {
    pollfd fds[] = {{signal_fd_, POLLIN, 0}, {request_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(timeout.count())) <= 0)
      return std::nullopt;
    signalfd_siginfo info{};
    if (fds[0].revents & POLLIN && ::read(signal_fd_, &info, sizeof info) == sizeof info) {
      auto signo = static_cast<int>(info.ssi_signo);
      return main_event{signo == SIGHUP, std::string{"received SIG"} + sigabbrev_np(signo)};
    }
    if (fds[1].revents & POLLIN)
      return main_event{false, "shutdown requested over the control socket"};
    return std::nullopt;
  }

private:
  int signal_fd_ = -1;
  int request_fd_ = -1;
};

// One daemon per data directory: two would fight over the database and the control socket (ZeroMQ
// unlinks an existing ipc socket file when it binds).
class data_dir_lock {
public:
  static caf::expected<data_dir_lock> acquire(const std::filesystem::path& dir) {
    auto path = (dir / "opforge.lock").string();
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return path_unusable("lock file '" + path + "'", std::strerror(errno),
                           "make the data directory writable");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      std::string holder;
      std::getline(std::ifstream{path}, holder);
      ::close(fd);
      return path_unusable("data_dir '" + dir.string() + "'",
                           "another opforge serve (pid " + holder + ") uses it",
                           "stop it with `opforge shutdown`, or choose another --data-dir");
    }
    auto pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::write(fd, pid.data(), pid.size()) < 0)
      spdlog::warn("could not record the pid in {}", path);
    return data_dir_lock{fd};
  }

  data_dir_lock(data_dir_lock&& other) noexcept : fd_{std::exchange(other.fd_, -1)} {}
  data_dir_lock& operator=(data_dir_lock&&) = delete;
  ~data_dir_lock() {
    if (fd_ >= 0)
      ::close(fd_);
  }

private:
  explicit data_dir_lock(int fd) : fd_{fd} {}
  int fd_;
};

void start_logging(const log_config& cfg) {
  auto logger = cfg.file.empty() ? spdlog::stderr_color_mt("opforge")
                                 : spdlog::basic_logger_mt("opforge", cfg.file);
  logger->set_level(spdlog::level::from_str(cfg.level));
  logger->flush_on(spdlog::level::info);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_default_logger(logger);
}

// The exposer and the address it really listens on (port 0 asks the kernel for a free port).
struct metrics_endpoint {
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string address;
};

caf::expected<metrics_endpoint> expose(const std::string& address, metrics& families) {
  if (address.empty())
    return metrics_endpoint{};
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception&) {
    return address_unusable("metrics.listen", address,
                            "cannot listen there (port in use, or not an address of this host)");
  }
  exposer->RegisterCollectable(families.registry());
  auto ports = exposer->GetListeningPorts();
  auto host = address.substr(0, address.rfind(':'));
  auto actual = host + ":" + std::to_string(ports.empty() ? 0 : ports.front());
  return metrics_endpoint{std::move(exposer), actual};
}

// Runs its function when the scope ends, on every path out of it.
template <class F>
struct scope_exit {
  F run;
  ~scope_exit() { run(); }
};

// Asks an actor that owns resources (a database, a socket thread) to release them, and waits:
// a plain exit message would not tell us when it is done.
template <class Handle>
void stop_actor(caf::actor_system& sys, const Handle& actor, const char* name) {
  if (auto done = ask<atom::ok>(sys, std::chrono::seconds{30}, actor, atom::shutdown_v); !done)
    spdlog::error("{} did not stop cleanly: {}", name, render(done.error()));
}

device_manager_config device_manager_settings(const config& cfg, worker_auth auth) {
  device_manager_config out;
  out.auth = std::move(auth);
  out.listen = cfg.workers.listen;
  out.max_frame_bytes = static_cast<size_t>(cfg.workers.max_frame_bytes);
  out.heartbeat = std::chrono::milliseconds{cfg.workers.heartbeat_ms};
  out.liveness = cfg.workers.liveness;
  out.max_attempts = cfg.workers.max_attempts;
  out.max_slots = cfg.workers.max_slots;
  out.background_max_wait = std::chrono::seconds{cfg.maintenance.background_max_wait_s};
  return out;
}

// `nvidia-smi -L` prints one "GPU <n>: ..." line per GPU; without a driver it fails or is absent.
bool nvidia_gpu_present() {
  FILE* pipe = ::popen("nvidia-smi -L 2>/dev/null", "r");
  if (!pipe)
    return false;
  bool found = false;
  char line[512];
  while (std::fgets(line, sizeof line, pipe))
    found = found || std::strncmp(line, "GPU ", 4) == 0;
  return ::pclose(pipe) == 0 && found;
}

// The campaigns a previous daemon left running, read before the store actor opens the database.
caf::expected<std::vector<unfinished_campaign>> unfinished_campaigns(const config& cfg) {
  auto db = open_rocksdb_store(cfg.data_dir / "store");
  if (!db)
    return db.error();
  auto loaded = load_unfinished_campaigns(**db);
  if (auto err = (*db)->close())
    return err;
  return loaded;
}

// The local worker processes, connecting to where the workers socket really listens.
supervisor_config local_workers(const config& cfg, const std::string& workers_endpoint,
                                const worker_keys& keys) {
  supervisor_config out;
  for (auto& group : cfg.local_workers)
    out.workers.push_back({group.kind, static_cast<int>(group.count), group.slots, group.role});
  out.endpoint = connect_endpoint(workers_endpoint);
  out.server_key_file = keys.server_public_file;
  out.key_file = keys.local_worker_secret_file;
  out.python = cfg.python;
  return out;
}

// SIGHUP: workers admitted since (or no longer) connect from now on; connected ones stay.
void reload_allow_list(curve::allow_list* allowed) {
  if (!allowed) {
    spdlog::info("SIGHUP: workers.allow_unauthenticated is on, there is no allow-list to reload");
    return;
  }
  if (auto count = allowed->reload())
    spdlog::info("SIGHUP: the allow-list {} admits {} key(s)", allowed->dir().string(), *count);
  else
    spdlog::error("SIGHUP: kept the previous allow-list: {}", message(count.error()));
}

std::string describe(const supervisor_config& local) {
  std::string out;
  for (auto& group : local.workers)
    out += (out.empty() ? "" : ", ") + std::to_string(group.count) + " " + group.role + "/" +
           group.device_kind;
  return out.empty() ? "none" : out;
}

// The importer tests kernel sets as campaigns test candidates (device kind, dtypes, limits) and
// repairs through the campaign manager.
importer_actor start_importer(caf::actor_system& sys, const campaign_manager_setup& setup,
                              campaign_manager_actor campaigns) {
  importer_setup out;
  out.jobs = setup.devices;
  out.store = setup.store;
  out.library = setup.library;
  out.campaigns = std::move(campaigns);
  out.device_kind = setup.defaults.device_kind;
  std::stringstream dtypes{setup.defaults.dtypes};
  for (std::string dtype; std::getline(dtypes, dtype, ',');)
    if (!dtype.empty())
      out.dtypes.push_back(dtype);
  out.sample_timeout_s = static_cast<double>(setup.defaults.sample_timeout_s);
  out.job_deadline_ms = setup.defaults.job_deadline_s * 1000;
  return sys.spawn(importer, std::move(out));
}

// Re-validation tests kernels as campaigns do (limits), below them, and repairs through them.
maintenance_actor start_maintenance(caf::actor_system& sys, const config& cfg,
                                    const campaign_manager_setup& setup,
                                    campaign_manager_actor campaigns,
                                    std::shared_ptr<metrics> families) {
  maintenance_setup out;
  out.fleet = caf::actor_cast<maintenance_fleet_actor>(setup.devices);
  out.library = setup.library;
  out.store = setup.store;
  out.campaigns = std::move(campaigns);
  out.telemetry = std::move(families);
  out.enabled = cfg.maintenance.enabled;
  out.poll = std::chrono::milliseconds{cfg.maintenance.poll_ms};
  out.repair = cfg.maintenance.repair == repair_policy::automatic;
  out.retime = cfg.maintenance.retime;
  out.speed_regression = static_cast<double>(cfg.maintenance.speed_regression_percent) / 100;
  out.sample_timeout_s = static_cast<double>(setup.defaults.sample_timeout_s);
  out.job_deadline_ms = setup.defaults.job_deadline_s * 1000;
  return sys.spawn(maintenance, std::move(out));
}

// The daemon's actors and threads, from start to a clean stop. They start in this order and stop
// in reverse, on every path out, so nothing is left waiting on a part already gone.
caf::error run(caf::actor_system& sys, const config& given, const std::string& version,
               std::shared_ptr<metrics> families, const std::string& metrics_address,
               stop_events& stop) {
  // Quiet until ready, so that a daemon that cannot start prints nothing but its one error line.
  auto level = spdlog::get_level();
  spdlog::set_level(std::max(level, spdlog::level::warn));
  auto cfg = given;
  resolve_auto_settings(cfg, nvidia_gpu_present);
  auto plan = plan_endpoints(cfg, process_env);
  if (!plan)
    return plan.error();
  auto keys = prepare_worker_keys(cfg);
  if (!keys)
    return keys.error();
  auto unfinished = unfinished_campaigns(cfg);
  if (!unfinished)
    return unfinished.error();
  auto store = spawn_store(sys, cfg.data_dir / "store", families, cfg.store.sync);
  if (!store)
    return store.error();
  scope_exit stop_store{[&] { stop_actor(sys, *store, "store"); }};
  // It holds nothing but counts, and every write it makes is a request the store answers first.
  auto kernels = sys.spawn(library, *store, families, version);
  scope_exit stop_library{[&] { caf::anon_send_exit(kernels, caf::exit_reason::user_shutdown); }};
  auto device_settings = device_manager_settings(cfg, keys->auth);
  device_settings.conformance = kernels; // the library keeps the toolchains' reports
  auto devices = spawn_device_manager(sys, device_settings, families);
  if (!devices)
    return devices.error();
  scope_exit stop_devices{[&] { stop_actor(sys, *devices, "device manager"); }};
  auto devices_status =
      ask<device_manager_status>(sys, std::chrono::seconds{30}, *devices, atom::status_v);
  if (!devices_status)
    return devices_status.error();
  auto parts = start_campaign_parts(sys, cfg, *plan, families);
  if (!parts)
    return parts.error();
  scope_exit stop_parts{[&] { parts->stop(); }};
  parts->setup.store = *store;
  parts->setup.devices = *devices;
  parts->setup.library = kernels;
  parts->setup.unfinished = std::move(*unfinished);
  auto campaigns = sys.spawn(campaign_manager, parts->setup);
  scope_exit stop_campaigns{[&] { stop_actor(sys, campaigns, "campaign manager"); }};
  auto importer = start_importer(sys, parts->setup, campaigns);
  scope_exit stop_importer{[&] { caf::anon_send_exit(importer, caf::exit_reason::user_shutdown); }};
  auto maintainer = start_maintenance(sys, cfg, parts->setup, campaigns, families);
  scope_exit stop_maintainer{
      [&] { caf::anon_send_exit(maintainer, caf::exit_reason::user_shutdown); }};
  zmq::context_t zmq;
  control_context context{&sys,
                          *store,
                          *devices,
                          campaigns,
                          kernels,
                          version,
                          cfg,
                          metrics_address,
                          std::chrono::steady_clock::now(),
                          [&stop] { stop.request(); }};
  context.importer = importer;
  context.maintenance = maintainer;
  for (const auto& name : parts->setup.endpoint_order)
    context.llm_endpoints.emplace_back(name, parts->setup.endpoints.at(name).actor);
  auto control = control_server::start(zmq, context);
  if (!control)
    return control.error();
  // Last, so that no worker process is started by a daemon that then fails to start.
  auto local = local_workers(cfg, devices_status->endpoint, *keys);
  auto supervised = supervisor::start(local);
  if (!supervised)
    return supervised.error();
  spdlog::set_level(level);
  spdlog::info("opforge {} ready: pid {}, data in {}, control on {}, workers on {} ({}), local "
               "workers: {}, metrics on {}, campaigns on {} with endpoint {}{}",
               version, ::getpid(), cfg.data_dir.string(), cfg.control.listen,
               devices_status->endpoint,
               keys->allowed ? "CURVE, allow-list " + cfg.workers.curve.allowed_keys
                             : std::string{"unauthenticated"},
               describe(local),
               metrics_address.empty() ? "(disabled)" : "http://" + metrics_address + "/metrics",
               cfg.campaigns.device_kind, plan->default_endpoint,
               plan->demo ? " (the demo cassette: hand-written answers, not a model)" : "");
  for (;;) {
    families->uptime().Set(
        std::chrono::duration<double>{std::chrono::steady_clock::now() - context.started}.count());
    auto event = stop.wait(std::chrono::seconds{1});
    if (event && event->reload) {
      reload_allow_list(keys->allowed.get());
    } else if (event) {
      spdlog::info("shutting down: {}", event->reason);
      control->reset(); // no more requests; the scopes stop the rest in reverse order
      return {};
    }
  }
}

} // namespace

caf::error serve(config cfg, const std::string& version) {
  // The store, the lock, the log and the sockets are the owner's alone (0600 files, 0700 dirs).
  ::umask(0077);
  stop_events stop;
  if (auto err = prepare_runtime(cfg))
    return err;
  auto lock = data_dir_lock::acquire(cfg.data_dir);
  if (!lock)
    return lock.error();
  start_logging(cfg.log);
  auto families = std::make_shared<metrics>(version);
  auto endpoint = expose(cfg.metrics.listen, *families);
  if (!endpoint)
    return endpoint.error();
  system_config actor_cfg;
  // Idle scheduler workers go to sleep at once instead of spinning and napping: this halves the
  // CPU per LLM request (bench/results/llm_endpoint.md) at no cost in throughput.
  actor_cfg.set("work-stealing.aggressive-poll-attempts", 1);
  actor_cfg.set("work-stealing.moderate-poll-attempts", 1);
  caf::actor_system sys{actor_cfg};
  if (auto err = run(sys, cfg, version, families, endpoint->address, stop))
    return err;
  spdlog::info("stopped cleanly");
  return {};
}

} // namespace opforge
