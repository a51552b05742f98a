// The opforge binary: `serve` runs the daemon; every other subcommand talks to a running daemon
// over the control socket. Exit codes: 0 success, 1 the daemon is unreachable or refused the
// request, 2 bad configuration or usage, or the daemon could not start.

#include "apps/control_client.hpp"
#include "apps/serve.hpp"
#include "config/config.hpp"
#include "messages/errors.hpp"

#include <cmath>
#include <iostream>

#include <CLI/CLI.hpp>

using namespace opforge;

namespace {

constexpr int exit_unreachable = 1;
constexpr int exit_bad_config = 2;

// The one line a user reads: the error's own words, without the code name render() puts first.
std::string describe(const caf::error& err) {
  auto text = render(err);
  if (err.category() != caf::atom("opforge"))
    return text;
  auto code = std::string{to_string(static_cast<errc>(err.code()))} + ": ";
  return text.rfind(code, 0) == 0 ? text.substr(code.size()) : text;
}

int fail(const caf::error& err, int code) {
  std::cerr << "opforge: " << describe(err) << '\n';
  return code;
}

// Options every subcommand takes to find the configuration, and with it the control socket.
struct common_options {
  std::string config_file;
  std::string data_dir;
  std::string control;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--config", config_file, "YAML configuration file")->envname("OPFORGE_CONFIG");
    cmd.add_option("--data-dir", data_dir, "data directory (default var)");
    cmd.add_option("--control", control, "control socket (default ipc://<data-dir>/control.sock)");
  }
};

// Options of the client subcommands.
struct client_options {
  bool json = false;
  int timeout_ms = 5000;

  void add_to(CLI::App& cmd) {
    cmd.add_flag("--json", json, "print the daemon's reply as JSON");
    cmd.add_option("--timeout-ms", timeout_ms, "how long to wait for the daemon")
        ->check(CLI::PositiveNumber);
  }
};

// Only the flags the user gave: an absent flag must not hide the environment or the file.
void add_flag(config_sources& sources, CLI::App& cmd, const char* flag, const char* key,
              const std::string& value) {
  if (auto* option = cmd.get_option_no_throw(flag); option && option->count() > 0)
    sources.flags[key] = {value, flag};
}

std::string format_duration(double seconds) {
  auto s = static_cast<long>(seconds);
  if (s < 60)
    return std::to_string(s) + "s";
  if (s < 3600)
    return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h" + std::to_string(s % 3600 / 60) + "m";
}

// An actor's part of the status reply: its report, or why it did not give one.
void print_part(const char* label, const nlohmann::json& part,
                void (*print)(const nlohmann::json&)) {
  std::cout << "  " << label;
  if (part.contains("error"))
    std::cout << "not answering: " << part["error"].get<std::string>();
  else
    print(part);
  std::cout << '\n';
}

void print_workers_part(const nlohmann::json& part) {
  int64_t live = 0;
  std::string by_kind;
  auto connected = part.value("connected", nlohmann::json::object());
  for (auto& [kind, states] : connected.items())
    for (auto& [state, count] : states.items()) {
      if (state != "dead")
        live += count.get<int64_t>();
      by_kind += (by_kind.empty() ? "" : ", ") + kind + " " + state + " " + count.dump();
    }
  std::cout << part.value("endpoint", std::string{}) << ", " << live << " live";
  if (!by_kind.empty())
    std::cout << " (" << by_kind << ")";
  std::cout << "; jobs: " << part.value("queued", 0) << " queued, " << part.value("running", 0)
            << " running, " << part.value("done", 0) << " done, " << part.value("failed", 0)
            << " failed, " << part.value("requeued", 0) << " requeued, "
            << part.value("quarantined", 0) << " quarantined";
}

void print_store_part(const nlohmann::json& part) {
  uint64_t keys = 0;
  for (auto& family : part.value("families", nlohmann::json::object()))
    keys += family.value("estimated_keys", uint64_t{0});
  std::cout << part.value("path", std::string{}) << ", schema v" << part.value("schema_version", 0)
            << ", ~" << keys << " keys, " << part.value("batches_written", 0)
            << " batches written since start";
  if (auto last = part.value("last_error", std::string{}); !last.empty())
    std::cout << ", last error: " << last;
}

void print_status(const nlohmann::json& reply) {
  auto text = [&](const char* key) { return reply.value(key, std::string{}); };
  std::cout << "opforge " << text("version") << ", pid " << reply.value("pid", 0) << ", up "
            << format_duration(reply.value("uptime_s", 0.0)) << '\n'
            << "  data dir  " << text("data_dir") << '\n'
            << "  control   " << text("control") << '\n'
            << "  metrics   "
            << (text("metrics").empty() ? "disabled" : "http://" + text("metrics") + "/metrics")
            << '\n';
  print_part("workers   ", reply["workers"], print_workers_part);
  print_part("store     ", reply["store"], print_store_part);
}

// One line per worker: id, role and device kind, device, toolchain fingerprint, slots in use,
// time since its last heartbeat, and its state when it is not plainly alive.
void print_workers(const nlohmann::json& reply) {
  auto workers = reply.value("workers", nlohmann::json::array());
  if (workers.empty()) {
    std::cout << "no workers connected\n";
    return;
  }
  for (auto& w : workers) {
    auto text = [&](const char* key) {
      auto value = w.value(key, std::string{});
      return value.empty() ? std::string{"-"} : value;
    };
    std::cout << text("worker_id") << "  " << text("role") << "/" << text("device_kind") << "  "
              << text("device_name") << "  toolchain " << text("fingerprint") << "  "
              << w.value("busy", 0) << "/" << w.value("slots", 0) << " slots busy  heartbeat "
              << w.value("ms_since_heartbeat", 0) << " ms ago";
    if (text("state") == "dead")
      std::cout << "  DEAD (" << text("dead_reason") << ")";
    std::cout << '\n';
  }
}

int run_client(const config& cfg, const client_options& opts, const std::string& type,
               void (*print)(const nlohmann::json&)) {
  auto reply = control_request(cfg.control.listen, {{"type", type}},
                               std::chrono::milliseconds{opts.timeout_ms});
  if (!reply)
    return fail(reply.error(), exit_unreachable);
  if (opts.json)
    std::cout << reply->dump(2) << '\n';
  else
    print(*reply);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"opforge: LLM-driven Triton kernels for every ATen operator, proven on device"};
  app.set_version_flag("--version", std::string{"opforge "} + OPFORGE_VERSION);
  app.require_subcommand(1);

  common_options common;
  client_options client;

  auto* serve_cmd = app.add_subcommand("serve", "run the daemon in the foreground");
  common.add_to(*serve_cmd);
  std::string workers_listen, metrics_listen, log_level;
  serve_cmd->add_option("--workers-listen", workers_listen, "ZeroMQ endpoint for device workers");
  serve_cmd->add_option("--metrics-listen", metrics_listen,
                        "Prometheus endpoint host:port (\"\" disables)");
  serve_cmd->add_option("--log-level", log_level, "trace, debug, info, warn, error");

  auto* status_cmd = app.add_subcommand("status", "show what the running daemon is doing");
  auto* workers_cmd = app.add_subcommand("workers", "list the connected device and lint workers");
  auto* shutdown_cmd = app.add_subcommand("shutdown", "stop the running daemon cleanly");
  for (auto* cmd : {status_cmd, workers_cmd, shutdown_cmd}) {
    common.add_to(*cmd);
    client.add_to(*cmd);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    auto code = app.exit(e);
    return code == 0 ? 0 : exit_bad_config;
  }

  auto* cmd = app.get_subcommands().front();
  config_sources sources{{}, process_env, std::nullopt};
  if (!common.config_file.empty())
    sources.file = common.config_file;
  add_flag(sources, *cmd, "--data-dir", "data_dir", common.data_dir);
  add_flag(sources, *cmd, "--control", "control.listen", common.control);
  add_flag(sources, *cmd, "--workers-listen", "workers.listen", workers_listen);
  add_flag(sources, *cmd, "--metrics-listen", "metrics.listen", metrics_listen);
  add_flag(sources, *cmd, "--log-level", "log.level", log_level);
  auto cfg = load_config(sources);
  if (!cfg)
    return fail(cfg.error(), exit_bad_config);

  if (cmd == serve_cmd) {
    if (auto err = serve(std::move(*cfg), OPFORGE_VERSION))
      return fail(err, exit_bad_config);
    return 0;
  }
  if (cmd == status_cmd)
    return run_client(*cfg, client, "status", print_status);
  if (cmd == workers_cmd)
    return run_client(*cfg, client, "workers", print_workers);
  return run_client(*cfg, client, "shutdown",
                    [](const nlohmann::json&) { std::cout << "the daemon is shutting down\n"; });
}
