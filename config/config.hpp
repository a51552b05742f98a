#pragma once

// The daemon's configuration: one struct per section, embedded defaults, and one loader that layers
// flags over the environment over a YAML file over the defaults. Every error is a caf::error with
// an errc::config_* code whose context is one line naming the file, key, variable or flag.

#include "config/endpoint_config.hpp"
#include "config/resources.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace opforge {

/// The word that leaves a setting to be resolved at start: a local worker's or the campaigns'
/// device kind (by the daemon, resolve_auto_settings), a local worker's slots (by the worker).
/// Device kinds are open names, so this is the one word among them that is not a kind.
inline constexpr std::string_view auto_setting = "auto";

struct log_config {
  /// trace, debug, info, warn, error, critical or off.
  std::string level = "info";
  /// Log file; empty logs to stderr.
  std::string file;
};

struct control_config {
  /// ZeroMQ endpoint of the control socket; empty means ipc://<data_dir>/control.sock.
  std::string listen;
};

/// The workers socket's ZeroMQ CURVE keys (`workers.curve`); empty paths resolve under the data
/// directory when the configuration loads.
struct curve_config {
  /// The daemon's secret key file (`NAME.key_secret`, public and secret key in Z85). Empty means
  /// <data_dir>/keys/server.key_secret, which a daemon bound to ipc or loopback creates itself.
  std::string server_key;
  /// The allow-list: a directory of the admitted workers' public key files (`*.key`), read again
  /// on SIGHUP. Empty means <data_dir>/keys/allowed.
  std::string allowed_keys;
};

struct workers_config {
  /// ZeroMQ endpoint the ROUTER socket for device workers binds.
  std::string listen = "tcp://127.0.0.1:5555";
  int64_t heartbeat_ms = 1000;
  /// Heartbeats a peer may miss before it counts as dead.
  int64_t liveness = 3;
  int64_t max_frame_bytes = int64_t{16} << 20;
  /// Dispatches of one job before it fails for good (as a harness error: a worker that dies,
  /// leaves or overruns the deadline is never held against the candidate).
  int64_t max_attempts = 3;
  /// The most slots a worker gets, whatever its hello claims.
  int64_t max_slots = 64;
  curve_config curve;
  /// Admit workers without CURVE: only on ipc or a loopback address, where only this host's
  /// processes connect.
  bool allow_unauthenticated = false;
};

/// Whether only processes on this host can reach a ZeroMQ endpoint: ipc, or tcp on a loopback
/// address (127.0.0.0/8, ::1, localhost).
bool is_local_endpoint(const std::string& endpoint);

/// One group of worker processes the daemon starts and supervises on its own host.
struct local_worker_config {
  /// `device` runs test and catalog jobs; `lint` runs lint jobs and needs no device.
  std::string role = "device";
  /// For role device: `interpreter`, `cuda`, or `auto` (cuda when `nvidia-smi -L` lists a GPU,
  /// resolved at start). For role lint: `none`.
  std::string kind{auto_setting};
  int64_t count = 1;
  /// Tests one worker runs at once, each in a candidate process of its own. Empty means `auto`:
  /// the worker is started with `--slots auto` and takes its device kind's default_slots from its
  /// registry (worker/opforge_worker/device_kinds.py: 8 on cuda, 1 on the interpreter and for
  /// lint), and announces the count in its hello. The daemon keeps no table of kinds, so a new
  /// kind brings its own count. On an H100 the warm re-validation of the nine-kernel library took
  /// 0.36 s with 1 slot, 0.20 s with 4 and 0.12 s with 8, against 0.11 s for ATen alone
  /// (bench/results/worker-h100.md, seventh session, call 6); on the CPU interpreter every slot is
  /// a process competing for the cores.
  std::optional<int64_t> slots;
};

struct metrics_config {
  /// host:port of the Prometheus endpoint; port 0 picks a free port; empty disables it.
  std::string listen = "127.0.0.1:9464";
};

struct store_config {
  /// Sync every write batch to disk (survives power loss, not only a crash).
  bool sync = true;
};

/// Whether a session whose kernel passed goes on to make it faster (the OPTIMIZE state,
/// actors/sessions/session_machine.hpp).
enum class optimize_policy : uint8_t { off, on };

template <>
struct contract::enum_traits<optimize_policy> {
  static constexpr std::string_view label = "optimize_policy";
  static constexpr std::array<std::string_view, 2> names{"off", "on"};
  static_assert(names.size() - 1 == static_cast<size_t>(optimize_policy::on));
};

/// Defaults of `opforge run` and what every campaign's sessions need.
struct campaigns_config {
  /// Where candidates are tested: `interpreter`, `cuda`, or `auto` (cuda when `nvidia-smi -L`
  /// lists a GPU). `opforge run --device` overrides it per campaign.
  std::string device_kind{auto_setting};
  /// Comma-separated dtypes a campaign asks for; each operator gets those it supports.
  std::string dtypes = "bfloat16,float16,float32,int32,int64";
  /// Sessions of one campaign running at once.
  int64_t concurrency = 8;
  int64_t max_dialogs = 3;
  int64_t max_calls_per_dialog = 15;
  /// A dialog whose answers fail the same way (outcome, check and the failure's first line) this
  /// many times in a row starts the next dialog early; a session whose dialogs all end so ends
  /// with "repeated failure". 0 turns it off.
  int64_t same_failure_limit = 4;
  /// LLM tokens (prompt and completion) one campaign may use in all; 0: unlimited.
  /// `opforge run --max-tokens` overrides it per campaign.
  int64_t max_tokens = 0;
  /// A campaign that names one endpoint may fail over to the others, in the order of
  /// llm.endpoints, when its own is down (llm.outage_after). `opforge run --endpoint a,b` names
  /// the order for one campaign.
  bool failover = false;
  /// Per-sample limit in the candidate process, and the budget of one device job.
  int64_t sample_timeout_s = 60;
  int64_t job_deadline_s = 1800;
  /// On: after PASS a session times its kernel and, while it is slower than
  /// `optimize_target_speedup` times the baseline (ATen), asks the LLM for a faster one, at most
  /// `optimize_calls` times; the fastest proved version is kept.
  optimize_policy optimize = optimize_policy::off;
  double optimize_target_speedup = 1.0;
  int64_t optimize_calls = 3;
  std::filesystem::path prompts_dir = resource_path("prompts");
  std::filesystem::path examples_dir = resource_path("examples");
  /// What `opforge run` replays when no LLM endpoint is configured: hand-written answers.
  std::filesystem::path demo_cassette = resource_path("demo/cassette.jsonl");
};

/// What it takes to accept a kernel.
struct acceptance_config {
  /// Passing verdicts from distinct worker hosts a kernel needs. The confirming tests wait for a
  /// host that has not passed it yet; a verdict other than pass among them is fed back like any
  /// verdict, saying that the hosts disagreed.
  int64_t confirmations = 1;
};

/// What maintenance does about a regression: `off` (`opforge repair` starts the repair) or `auto`
/// (each new regression starts a repair campaign).
enum class repair_policy : uint8_t { off, automatic };

template <>
struct contract::enum_traits<repair_policy> {
  static constexpr std::string_view label = "repair_policy";
  static constexpr std::array<std::string_view, 2> names{"off", auto_setting};
  static_assert(names.size() - 1 == static_cast<size_t>(repair_policy::automatic));
};

/// Re-validation of the library on the workers' toolchains (actors/library/maintenance.hpp).
struct maintenance_config {
  /// Off: a toolchain is re-validated only when `opforge revalidate` asks.
  bool enabled = true;
  /// How often the workers' fingerprints and the library are looked at.
  int64_t poll_ms = 5000;
  repair_policy repair = repair_policy::off;
  /// How long a re-validation job waits behind campaign jobs before it goes ahead of them.
  int64_t background_max_wait_s = 30;
  /// Whether a kernel that passes on a live toolchain is timed there too (a benchmark job).
  bool retime = true;
  /// How much slower than on the previous toolchain, beyond the noise of both measurements, a
  /// kernel must be there to count as a speed regression.
  int64_t speed_regression_percent = 10;
};

struct config {
  std::filesystem::path data_dir = "var";
  log_config log;
  control_config control;
  workers_config workers;
  /// One device worker and one lint worker, their slots `auto`.
  std::vector<local_worker_config> local_workers = {
      {.role = "device", .kind = std::string{auto_setting}, .count = 1, .slots = std::nullopt},
      {.role = "lint", .kind = "none", .count = 1, .slots = std::nullopt}};
  /// Interpreter that runs local workers (needs the worker's requirements).
  std::string python = default_python();
  metrics_config metrics;
  store_config store;
  /// LLM endpoints and the summarizer (config/endpoint_config.hpp).
  llm_config llm;
  campaigns_config campaigns;
  acceptance_config acceptance;
  maintenance_config maintenance;

  /// The build's OPFORGE_PYTHON, or `python3` when the build named none.
  static std::string default_python();
};

/// A value given on the command line, keyed by its dotted config path (e.g. "metrics.listen").
struct config_flag {
  std::string value;
  /// How the user spelled it, for error messages, e.g. "--metrics-listen".
  std::string flag;
};

/// Where a configuration comes from, highest precedence first.
struct config_sources {
  std::map<std::string, config_flag> flags;
  /// Looks up an environment variable; every scalar key `a.b_c` may be set as OPFORGE_A_B_C.
  std::function<std::optional<std::string>(const std::string&)> env;
  /// A YAML file; none means embedded defaults only.
  std::optional<std::filesystem::path> file;
};

/// Looks up variables in the process environment.
std::optional<std::string> process_env(const std::string& name);

/// Builds the configuration from its sources and checks every value; resolves control.listen.
caf::expected<config> load_config(const config_sources& sources);

/// Resolves the device kinds the configuration leaves to `auto`: those of local workers and
/// campaigns become `cuda` when `gpu_present()` says so (asked only when some kind is `auto`),
/// else `interpreter`. A local worker group's `slots: auto` stays empty: its workers resolve it.
void resolve_auto_settings(config& cfg, const std::function<bool()>& gpu_present);

/// Creates the data directory if needed, restricts it to its owner (0700) and checks that the
/// daemon can write there, and that the local workers' interpreter exists when local workers are
/// configured.
caf::error prepare_runtime(const config& cfg);

/// The error for a path the daemon cannot use: names it, says why and what to do.
caf::error path_unusable(const std::string& what, const std::string& reason,
                         const std::string& remedy);

/// The error for an address the daemon could not bind: names the key, the address and the reason.
caf::error address_unusable(const std::string& key, const std::string& address,
                            const std::string& reason);

} // namespace opforge
