#include "config/config.hpp"
#include "messages/errors.hpp"

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

using namespace opforge;
namespace fs = std::filesystem;

namespace {

class ConfigTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("opforge-test-config-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    sources.env = [this](const std::string& name) -> std::optional<std::string> {
      if (auto i = env.find(name); i != env.end())
        return i->second;
      return std::nullopt;
    };
  }

  void TearDown() override { fs::remove_all(dir); }

  fs::path write(const std::string& text, const std::string& name = "opforge.yaml") {
    auto path = dir / name;
    std::ofstream{path} << text;
    return path;
  }

  caf::expected<config> load_file(const std::string& text) {
    sources.file = write(text);
    return load_config(sources);
  }

  // The one line an error would print, with the temp directory shortened to "DIR".
  std::string failure(const caf::expected<config>& result) {
    if (result)
      return "loaded without error";
    auto text = render(result.error());
    for (auto at = text.find(dir.string()); at != std::string::npos; at = text.find(dir.string()))
      text.replace(at, dir.string().size(), "DIR");
    return text;
  }

  fs::path dir;
  std::map<std::string, std::string> env;
  config_sources sources;
};

} // namespace

TEST_F(ConfigTest, EmbeddedDefaults) {
  auto cfg = load_config(sources);
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_EQ(cfg->data_dir, "var");
  EXPECT_EQ(cfg->log.level, "info");
  EXPECT_EQ(cfg->log.file, "");
  EXPECT_EQ(cfg->control.listen, "ipc://var/control.sock");
  EXPECT_EQ(cfg->workers.listen, "tcp://127.0.0.1:5555");
  EXPECT_EQ(cfg->workers.heartbeat_ms, 1000);
  EXPECT_EQ(cfg->workers.liveness, 3);
  EXPECT_EQ(cfg->workers.max_frame_bytes, 16 << 20);
  EXPECT_EQ(cfg->workers.max_attempts, 3);
  EXPECT_EQ(cfg->workers.max_slots, 64);
  EXPECT_EQ(cfg->acceptance.confirmations, 1);
  ASSERT_EQ(cfg->local_workers.size(), 2u);
  EXPECT_EQ(cfg->local_workers[0].role, "device");
  EXPECT_EQ(cfg->local_workers[0].kind, "auto");
  EXPECT_EQ(cfg->local_workers[0].slots, std::nullopt) << "auto, resolved at start";
  EXPECT_EQ(cfg->local_workers[1].role, "lint");
  EXPECT_EQ(cfg->local_workers[1].kind, "none");
  EXPECT_EQ(cfg->local_workers[1].slots, std::nullopt);
  EXPECT_EQ(cfg->python, OPFORGE_PYTHON);
  EXPECT_EQ(cfg->metrics.listen, "127.0.0.1:9464");
  EXPECT_TRUE(cfg->store.sync);
}

// The shipped example documents the defaults: loading it must change nothing.
TEST_F(ConfigTest, ExampleFileHoldsTheDefaults) {
  sources.file = fs::path{OPFORGE_SOURCE_DIR} / "config/opforge.yaml";
  auto example = load_config(sources);
  ASSERT_TRUE(example) << failure(example);
  sources.file.reset();
  auto defaults = load_config(sources);
  ASSERT_TRUE(defaults);
  EXPECT_EQ(example->data_dir, defaults->data_dir);
  EXPECT_EQ(example->control.listen, defaults->control.listen);
  EXPECT_EQ(example->workers.listen, defaults->workers.listen);
  EXPECT_EQ(example->workers.max_frame_bytes, defaults->workers.max_frame_bytes);
  EXPECT_EQ(example->workers.max_slots, defaults->workers.max_slots);
  EXPECT_EQ(example->acceptance.confirmations, defaults->acceptance.confirmations);
  ASSERT_EQ(example->local_workers.size(), defaults->local_workers.size());
  for (size_t i = 0; i < example->local_workers.size(); ++i) {
    EXPECT_EQ(example->local_workers[i].kind, defaults->local_workers[i].kind);
    EXPECT_EQ(example->local_workers[i].slots, defaults->local_workers[i].slots);
  }
  EXPECT_EQ(example->metrics.listen, defaults->metrics.listen);
  EXPECT_EQ(example->workers.curve.server_key, defaults->workers.curve.server_key);
  EXPECT_EQ(example->workers.curve.allowed_keys, defaults->workers.curve.allowed_keys);
  EXPECT_EQ(example->workers.allow_unauthenticated, defaults->workers.allow_unauthenticated);
}

// Workers authenticate with CURVE unless the configuration says otherwise, and it may say so only
// where no other host reaches the socket.
TEST_F(ConfigTest, WorkerKeysLiveInTheDataDirAndOnlyLocalSocketsMayGoWithout) {
  env["OPFORGE_DATA_DIR"] = "/srv/opforge";
  auto defaults = load_config(sources);
  ASSERT_TRUE(defaults) << failure(defaults);
  EXPECT_EQ(defaults->workers.curve.server_key, "/srv/opforge/keys/server.key_secret");
  EXPECT_EQ(defaults->workers.curve.allowed_keys, "/srv/opforge/keys/allowed");
  EXPECT_FALSE(defaults->workers.allow_unauthenticated);
  env.clear();

  auto given = load_file("workers:\n  listen: ipc:///run/opforge/workers.sock\n"
                         "  allow_unauthenticated: true\n"
                         "  curve: {server_key: /etc/opforge/server.key_secret, "
                         "allowed_keys: /etc/opforge/workers}\n");
  ASSERT_TRUE(given) << failure(given);
  EXPECT_EQ(given->workers.curve.server_key, "/etc/opforge/server.key_secret");
  EXPECT_EQ(given->workers.curve.allowed_keys, "/etc/opforge/workers");
  EXPECT_TRUE(given->workers.allow_unauthenticated);

  EXPECT_EQ(failure(load_file("workers: {curve: {server_key: /etc/opforge/server.key}}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'workers.curve.server_key' must name a "
            "NAME.key_secret file, got '/etc/opforge/server.key'");
  EXPECT_EQ(failure(load_file("workers: {listen: 'tcp://*:5555', allow_unauthenticated: true}\n")),
            "config_invalid: DIR/opforge.yaml: 'workers.allow_unauthenticated' is true, but "
            "workers.listen 'tcp://*:5555' is reachable from other hosts: workers there must "
            "authenticate with ZeroMQ CURVE (set it to false, or listen on ipc:// or 127.0.0.1)");

  for (auto local : {"ipc:///tmp/w.sock", "tcp://127.0.0.1:5555", "tcp://127.1.2.3:*",
                     "tcp://localhost:5555", "tcp://[::1]:5555"})
    EXPECT_TRUE(is_local_endpoint(local)) << local;
  for (auto remote : {"tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://10.0.0.7:5555",
                      "tcp://127.0.0.1.example.com:5555", "tcp://head-node:5555", "tcp://[::]:1"})
    EXPECT_FALSE(is_local_endpoint(remote)) << remote;
}

TEST_F(ConfigTest, FileValuesReplaceDefaults) {
  auto cfg = load_file(R"(
data_dir: /srv/opforge
log: {level: debug, file: /tmp/opforge.log}
workers:
  listen: tcp://0.0.0.0:6000
  heartbeat_ms: 250
local_workers:
  - {kind: cuda, count: 4, slots: 2}
metrics: {listen: ""}
store: {sync: false}
)");
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_EQ(cfg->data_dir, "/srv/opforge");
  EXPECT_EQ(cfg->log.level, "debug");
  EXPECT_EQ(cfg->control.listen, "ipc:///srv/opforge/control.sock");
  EXPECT_EQ(cfg->workers.listen, "tcp://0.0.0.0:6000");
  EXPECT_EQ(cfg->workers.heartbeat_ms, 250);
  EXPECT_EQ(cfg->workers.liveness, 3);
  ASSERT_EQ(cfg->local_workers.size(), 1u);
  EXPECT_EQ(cfg->local_workers[0].role, "device");
  EXPECT_EQ(cfg->local_workers[0].kind, "cuda");
  EXPECT_EQ(cfg->local_workers[0].count, 4);
  EXPECT_EQ(cfg->local_workers[0].slots, 2);
  EXPECT_EQ(cfg->metrics.listen, "");
  EXPECT_FALSE(cfg->store.sync);
}

TEST_F(ConfigTest, EmptyListStartsNoLocalWorkers) {
  auto cfg = load_file("local_workers: []\n");
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_TRUE(cfg->local_workers.empty());
}

TEST_F(ConfigTest, EnvironmentBeatsFileAndFlagsBeatEnvironment) {
  sources.file = write("data_dir: from-file\nworkers: {listen: 'tcp://127.0.0.1:1', liveness: 7}\n"
                       "log: {level: warn}\n");
  env["OPFORGE_DATA_DIR"] = "from-env";
  env["OPFORGE_WORKERS_LISTEN"] = "tcp://127.0.0.1:2";
  env["OPFORGE_METRICS_LISTEN"] = "";
  env["OPFORGE_LOG_LEVEL"] = "error";
  env["OPFORGE_STORE_SYNC"] = "false";
  sources.flags["data_dir"] = {"from-flag", "--data-dir"};
  sources.flags["log.level"] = {"trace", "--log-level"};
  auto cfg = load_config(sources);
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_EQ(cfg->data_dir, "from-flag");
  EXPECT_EQ(cfg->control.listen, "ipc://from-flag/control.sock");
  EXPECT_EQ(cfg->workers.listen, "tcp://127.0.0.1:2");
  EXPECT_EQ(cfg->workers.liveness, 7);
  EXPECT_EQ(cfg->metrics.listen, "");
  EXPECT_EQ(cfg->log.level, "trace");
  EXPECT_FALSE(cfg->store.sync);
}

TEST_F(ConfigTest, AutoKindResolvesByGpuPresence) {
  auto cfg = load_config(sources);
  ASSERT_TRUE(cfg);
  auto with_gpu = *cfg;
  resolve_auto_settings(with_gpu, [] { return true; });
  EXPECT_EQ(with_gpu.local_workers[0].kind, "cuda");
  EXPECT_EQ(with_gpu.local_workers[1].kind, "none");
  EXPECT_EQ(with_gpu.campaigns.device_kind, "cuda");
  resolve_auto_settings(*cfg, [] { return false; });
  EXPECT_EQ(cfg->local_workers[0].kind, "interpreter");
  EXPECT_EQ(cfg->campaigns.device_kind, "interpreter");
}

// Probing for a GPU runs nvidia-smi: only a kind left to `auto` asks.
TEST_F(ConfigTest, GpuIsProbedOnceAndOnlyForAutoKinds) {
  auto cfg = load_file("local_workers:\n  - {kind: cuda}\n  - {role: lint}\n"
                       "campaigns: {device_kind: interpreter}\n");
  ASSERT_TRUE(cfg) << failure(cfg);
  int probes = 0;
  auto probe = [&probes] {
    ++probes;
    return true;
  };
  resolve_auto_settings(*cfg, probe);
  EXPECT_EQ(probes, 0);
  cfg = load_config(config_sources{});
  ASSERT_TRUE(cfg);
  resolve_auto_settings(*cfg, probe);
  EXPECT_EQ(probes, 1) << "the device group and the campaigns share one probe";
}

// `slots: auto` (the default) is not resolved by the daemon, which keeps no table of device
// kinds: the worker resolves it from its registry (8 on cuda, 1 on the interpreter and for lint:
// worker/tests/test_cli.py) and announces the count in its hello.
TEST_F(ConfigTest, AutoSlotsAreLeftToTheWorkers) {
  auto cfg = load_config(sources);
  ASSERT_TRUE(cfg);
  auto with_gpu = *cfg;
  resolve_auto_settings(with_gpu, [] { return true; });
  EXPECT_EQ(with_gpu.local_workers[0].kind, "cuda");
  EXPECT_EQ(with_gpu.local_workers[0].slots, std::nullopt);
  EXPECT_EQ(with_gpu.local_workers[1].slots, std::nullopt) << "lint";
  resolve_auto_settings(*cfg, [] { return false; });
  EXPECT_EQ(cfg->local_workers[0].slots, std::nullopt) << "interpreter";
  EXPECT_EQ(cfg->local_workers[1].slots, std::nullopt) << "lint";
}

TEST_F(ConfigTest, ExplicitSlotsAreKeptAndAutoMayBeWritten) {
  auto cfg = load_file(R"(
local_workers:
  - {kind: cuda, slots: 2}
  - {kind: cuda, slots: auto}
  - {kind: interpreter, slots: 3}
  - {kind: interpreter, slots: auto}
  - {role: lint, slots: auto}
)");
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_EQ(cfg->local_workers[1].slots, std::nullopt);
  resolve_auto_settings(*cfg, [] { return true; });
  std::vector<std::optional<int64_t>> slots;
  for (auto& group : cfg->local_workers)
    slots.push_back(group.slots);
  EXPECT_EQ(slots,
            (std::vector<std::optional<int64_t>>{2, std::nullopt, 3, std::nullopt, std::nullopt}));
}

// -- every class of bad configuration, with the exact line the user sees -------------------------

// Unknown keys anywhere (a section, the top level, a list element) name the closest known key,
// or list the known ones when none is close.
TEST_F(ConfigTest, UnknownKeys) {
  EXPECT_EQ(failure(load_file("workers:\n  listen: tcp://127.0.0.1:5555\n  hearbeat_ms: 10\n")),
            "config_unknown_key: DIR/opforge.yaml:3: unknown key 'workers.hearbeat_ms' (did you "
            "mean 'workers.heartbeat_ms'?)");
  EXPECT_EQ(failure(load_file("store:\n  compression: zstd\n")),
            "config_unknown_key: DIR/opforge.yaml:2: unknown key 'store.compression' (known keys "
            "here: sync)");
  EXPECT_EQ(failure(load_file("metric:\n  listen: 127.0.0.1:1\n")),
            "config_unknown_key: DIR/opforge.yaml:1: unknown key 'metric' (did you mean "
            "'metrics'?)");
  EXPECT_EQ(failure(load_file("local_workers:\n  - {role: device, slot: 2}\n")),
            "config_unknown_key: DIR/opforge.yaml:2: unknown key 'local_workers[0].slot' (did you "
            "mean 'local_workers[0].slots'?)");
}

TEST_F(ConfigTest, WrongTypes) {
  EXPECT_EQ(failure(load_file("workers:\n  heartbeat_ms: fast\n")),
            "config_invalid: DIR/opforge.yaml:2: 'workers.heartbeat_ms' must be an integer, got "
            "'fast'");
  EXPECT_EQ(failure(load_file("store: {sync: maybe}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'store.sync' must be true or false, got 'maybe'");
  EXPECT_EQ(failure(load_file("log:\n  level: [info]\n")),
            "config_invalid: DIR/opforge.yaml:2: 'log.level' must be a string, got a list");
  EXPECT_EQ(failure(load_file("workers: 5\n")),
            "config_invalid: DIR/opforge.yaml:1: 'workers' must be a map, got a scalar");
  EXPECT_EQ(failure(load_file("local_workers: {role: device}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'local_workers' must be a list, got a map");
  EXPECT_EQ(failure(load_file("- data_dir\n")),
            "config_invalid: DIR/opforge.yaml: expected a map of sections at the top level, got "
            "a list");
}

TEST_F(ConfigTest, ValuesOutOfRange) {
  EXPECT_EQ(failure(load_file("workers: {liveness: 0}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'workers.liveness' must be >= 1, got 0");
  EXPECT_EQ(failure(load_file("log: {level: loud}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'log.level' must be one of trace, debug, info, "
            "warn, error, critical, off; got 'loud'");
  EXPECT_EQ(failure(load_file("local_workers:\n  - {role: lint, kind: cuda}\n")),
            "config_invalid: DIR/opforge.yaml:2: 'local_workers[0].kind' must be one of none; got "
            "'cuda'");
  EXPECT_EQ(failure(load_file("data_dir: ''\n")),
            "config_invalid: DIR/opforge.yaml:1: 'data_dir' must not be empty");
}

// The daemon keeps no list of device kinds: any name a worker may announce is taken, bounded in
// length and charset (messages/device_kind.hpp).
TEST_F(ConfigTest, DeviceKindsAreAnyBoundedName) {
  auto cfg = load_file("local_workers:\n  - {kind: rocm-gfx942}\ncampaigns: {device_kind: rocm}\n");
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_EQ(cfg->local_workers[0].kind, "rocm-gfx942");
  EXPECT_EQ(cfg->campaigns.device_kind, "rocm");
  auto refused = [](const std::string& where, const std::string& shown) {
    return "config_invalid: DIR/opforge.yaml:" + where +
           " must be auto or a device kind other than none (1 to 32 lowercase letters, digits, "
           "'_' or '-', starting with a letter), got " +
           shown;
  };
  for (const std::string& bad :
       std::vector<std::string>{"'Gpu'", "'gpu/0'", "'0gpu'", std::string(33, 'a')})
    EXPECT_EQ(failure(load_file("campaigns: {device_kind: " + bad + "}\n")),
              refused("1: 'campaigns.device_kind'", bad.front() == '\'' ? bad : "'" + bad + "'"));
  EXPECT_EQ(failure(load_file("local_workers:\n  - {kind: none}\n")),
            refused("2: 'local_workers[0].kind'", "'none'"));
}

// A fleet setting that would disable its own guard is refused naming it.
TEST_F(ConfigTest, AcceptanceAndSlotCapsAreAtLeastOne) {
  EXPECT_EQ(failure(load_file("acceptance: {confirmations: 0}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'acceptance.confirmations' must be >= 1, got 0");
  EXPECT_EQ(failure(load_file("workers: {max_slots: 0}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'workers.max_slots' must be >= 1, got 0");
}

TEST_F(ConfigTest, MaintenanceSection) {
  auto cfg = load_file("maintenance: {enabled: false, poll_ms: 250, repair: auto, "
                       "background_max_wait_s: 5}\n");
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_FALSE(cfg->maintenance.enabled);
  EXPECT_EQ(cfg->maintenance.poll_ms, 250);
  EXPECT_EQ(to_string(cfg->maintenance.repair), "auto");
  EXPECT_EQ(cfg->maintenance.background_max_wait_s, 5);
  EXPECT_EQ(failure(load_file("maintenance: {repair: always}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'maintenance.repair' must be one of off, auto; "
            "got 'always'");
  // Parsed once at load, wherever it comes from: a bad word names its source and the words.
  EXPECT_EQ(
      failure(load_file("maintenance: {repair: [auto]}\n")),
      "config_invalid: DIR/opforge.yaml:1: 'maintenance.repair' must be a string, got a list");
  env["OPFORGE_MAINTENANCE_REPAIR"] = "Auto";
  EXPECT_EQ(failure(load_config(sources)),
            "config_invalid: environment OPFORGE_MAINTENANCE_REPAIR: 'maintenance.repair' must be "
            "one of off, auto; got 'Auto'");
  env["OPFORGE_MAINTENANCE_REPAIR"] = "auto";
  auto from_env = load_config(sources);
  ASSERT_TRUE(from_env) << failure(from_env);
  EXPECT_EQ(from_env->maintenance.repair, repair_policy::automatic);
}

TEST_F(ConfigTest, OptimizeStageIsOffByDefaultAndItsSettingsAreChecked) {
  auto defaults = load_file("store: {sync: true}\n");
  ASSERT_TRUE(defaults) << failure(defaults);
  EXPECT_EQ(defaults->campaigns.optimize, optimize_policy::off);
  auto cfg =
      load_file("campaigns: {optimize: on, optimize_target_speedup: 1.5, optimize_calls: 2}\n");
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_EQ(cfg->campaigns.optimize, optimize_policy::on);
  EXPECT_DOUBLE_EQ(cfg->campaigns.optimize_target_speedup, 1.5);
  EXPECT_EQ(cfg->campaigns.optimize_calls, 2);
  EXPECT_EQ(failure(load_file("campaigns: {optimize: yes}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'campaigns.optimize' must be one of off, on; "
            "got 'yes'");
  EXPECT_EQ(failure(load_file("campaigns: {optimize_target_speedup: 0}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'campaigns.optimize_target_speedup' must be > 0, "
            "got 0");
  EXPECT_EQ(failure(load_file("campaigns: {optimize_target_speedup: fast}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'campaigns.optimize_target_speedup' must be a "
            "number, got 'fast'");
  EXPECT_EQ(failure(load_file("campaigns: {optimize_calls: 0}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'campaigns.optimize_calls' must be >= 1, got 0");
  env["OPFORGE_CAMPAIGNS_OPTIMIZE"] = "on";
  auto from_env = load_file("store: {sync: true}\n");
  ASSERT_TRUE(from_env) << failure(from_env);
  EXPECT_EQ(from_env->campaigns.optimize, optimize_policy::on);
}

// The budgets that stop waste: on by default for repeated failures, off for tokens.
TEST_F(ConfigTest, WasteBudgetsHaveDefaultsAndRefuseNegativeCounts) {
  auto defaults = load_file("store: {sync: true}\n");
  ASSERT_TRUE(defaults) << failure(defaults);
  EXPECT_EQ(defaults->campaigns.same_failure_limit, 4);
  EXPECT_EQ(defaults->campaigns.max_tokens, 0);
  auto cfg = load_file("campaigns: {same_failure_limit: 0, max_tokens: 2000000}\n");
  ASSERT_TRUE(cfg) << failure(cfg);
  EXPECT_EQ(cfg->campaigns.same_failure_limit, 0);
  EXPECT_EQ(cfg->campaigns.max_tokens, 2000000);
  EXPECT_EQ(failure(load_file("campaigns: {same_failure_limit: -1}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'campaigns.same_failure_limit' must be >= 0, "
            "got -1");
  EXPECT_EQ(failure(load_file("campaigns: {same_failure_limit: often}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'campaigns.same_failure_limit' must be an "
            "integer, got 'often'");
  EXPECT_EQ(failure(load_file("campaigns: {max_tokens: -5}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'campaigns.max_tokens' must be >= 0, got -5");
}

// A count of slots below 1, or any word but auto, is refused naming both choices.
TEST_F(ConfigTest, SlotsMustBeACountOrAuto) {
  auto cases = std::vector<std::pair<std::string, std::string>>{
      {"0", "0"}, {"-2", "-2"}, {"many", "'many'"}, {"[8]", "a list"}};
  for (auto& [value, shown] : cases)
    EXPECT_EQ(failure(load_file("local_workers:\n  - {role: lint, slots: " + value + "}\n")),
              "config_invalid: DIR/opforge.yaml:2: 'local_workers[0].slots' must be an integer "
              ">= 1 or auto, got " +
                  shown);
}

TEST_F(ConfigTest, BadEndpoints) {
  EXPECT_EQ(failure(load_file("workers: {listen: 'localhost:5555'}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'workers.listen' must be a ZeroMQ endpoint like "
            "tcp://127.0.0.1:5555 or ipc:///path/to/socket, got 'localhost:5555'");
  EXPECT_EQ(failure(load_file("control: {listen: 'tcp://127.0.0.1:99999'}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'control.listen' must be a ZeroMQ endpoint like "
            "tcp://127.0.0.1:5555 or ipc:///path/to/socket, got 'tcp://127.0.0.1:99999'");
  EXPECT_EQ(failure(load_file("metrics: {listen: 'http://127.0.0.1:9464'}\n")),
            "config_invalid: DIR/opforge.yaml:1: 'metrics.listen' must be host:port (port 0 picks "
            "a free one) or \"\" to disable, got 'http://127.0.0.1:9464'");
}

TEST_F(ConfigTest, BadValuesNameTheVariableOrFlag) {
  env["OPFORGE_WORKERS_HEARTBEAT_MS"] = "soon";
  EXPECT_EQ(failure(load_config(sources)),
            "config_invalid: environment OPFORGE_WORKERS_HEARTBEAT_MS: 'workers.heartbeat_ms' "
            "must be an integer, got 'soon'");
  env.clear();
  sources.flags["metrics.listen"] = {"9464", "--metrics-listen"};
  EXPECT_EQ(failure(load_config(sources)),
            "config_invalid: --metrics-listen: 'metrics.listen' must be host:port (port 0 picks a "
            "free one) or \"\" to disable, got '9464'");
}

TEST_F(ConfigTest, UnreadableAndMalformedFiles) {
  sources.file = dir / "missing.yaml";
  EXPECT_EQ(failure(load_config(sources)),
            "config_unreadable: cannot read config file 'DIR/missing.yaml': No such file or "
            "directory (check the path given to --config)");
  EXPECT_EQ(failure(load_file("workers: {listen: [\n")),
            "config_invalid: DIR/opforge.yaml:2: not valid YAML: end of sequence flow not found");
}

TEST_F(ConfigTest, RuntimePathsThatCannotBeUsed) {
  auto cfg = load_config(sources);
  ASSERT_TRUE(cfg);
  cfg->python = "/bin/sh";
  cfg->data_dir = dir / "data";
  EXPECT_FALSE(prepare_runtime(*cfg));
  EXPECT_TRUE(fs::is_directory(dir / "data"));

  write("not a directory", "plain-file");
  cfg->data_dir = dir / "plain-file" / "data";
  EXPECT_EQ(render(prepare_runtime(*cfg)),
            "config_path_unusable: data_dir '" + cfg->data_dir.string() +
                "': cannot create it: Not a directory (choose another with --data-dir or "
                "OPFORGE_DATA_DIR)");

  cfg->data_dir = dir / "data";
  cfg->log.file = (dir / "no-such-dir" / "opforge.log").string();
  EXPECT_EQ(render(prepare_runtime(*cfg)),
            "config_path_unusable: log.file '" + cfg->log.file +
                "': No such file or directory (choose a writable file or leave it empty to log to "
                "stderr)");

  cfg->log.file.clear();
  cfg->python = "/nonexistent/python";
  EXPECT_EQ(render(prepare_runtime(*cfg)),
            "config_path_unusable: python '/nonexistent/python': not an executable (run "
            "ops/setup.sh, or set python: in the config or OPFORGE_PYTHON)");
  cfg->local_workers.clear();
  EXPECT_FALSE(prepare_runtime(*cfg)) << "no local workers, no interpreter needed";
}

// The llm section is parsed by its subsystem (config/endpoint_config.hpp) as part of the daemon's
// configuration: its values arrive, and its errors stop the load naming their key path.
TEST_F(ConfigTest, LlmSectionIsPartOfTheDaemonConfiguration) {
  auto cfg = load_file(R"(
llm:
  endpoints:
    - name: local-vllm
      base_url: http://gpu7:8000/v1/
      model: Qwen/Qwen3-32B
      context_window: 32768
)");
  ASSERT_TRUE(cfg) << failure(cfg);
  ASSERT_EQ(cfg->llm.endpoints.size(), 1u);
  EXPECT_EQ(cfg->llm.endpoints[0].name, "local-vllm");
  EXPECT_EQ(cfg->llm.endpoints[0].context_window, 32768);
  auto bad = failure(load_file("llm:\n  endpoints:\n    - {name: x, model: m}\n"));
  EXPECT_NE(bad.find("llm.endpoints[0].base_url"), std::string::npos) << bad;
  EXPECT_TRUE(load_config(config_sources{}).value().llm.endpoints.empty());
}
