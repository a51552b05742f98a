// The local worker supervisor, with small shell scripts standing in for opforge_worker.

#include "devices/supervisor.hpp"
#include "messages/errors.hpp"

#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

using namespace opforge;
using namespace std::chrono_literals;

namespace {

constexpr auto patience = 20s; // bound on any single wait; never reached when things work

class Supervisor : public ::testing::Test {
protected:
  void SetUp() override {
    dir = std::filesystem::temp_directory_path() /
          ("opforge-supervisor-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    config.endpoint = "tcp://127.0.0.1:5555";
    config.first_backoff = 10ms;
    config.max_backoff = 40ms;
    config.stop_grace = 300ms;
  }

  void TearDown() override { std::filesystem::remove_all(dir); }

  // Each worker runs `script` under /bin/sh with its kind, slots and role as $1 $2 $3.
  void run_script(std::string script) {
    config.command = [script = std::move(script)](const local_worker_spec& spec) {
      return std::vector<std::string>{"/bin/sh",       "-c",     script, "worker", spec.device_kind,
                                      slots_arg(spec), spec.role};
    };
  }

  std::vector<std::string> lines(const std::string& name) {
    std::ifstream in{dir / name};
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
      out.push_back(line);
    return out;
  }

  bool eventually(const std::function<bool()>& condition) {
    auto deadline = std::chrono::steady_clock::now() + patience;
    while (std::chrono::steady_clock::now() < deadline) {
      if (condition())
        return true;
      std::this_thread::sleep_for(10ms);
    }
    return condition();
  }

  std::optional<pid_t> pid_in(const std::string& name) {
    auto content = lines(name);
    if (content.empty() || content[0].empty())
      return std::nullopt;
    return std::stoi(content[0]);
  }

  // Gone, or a zombie waiting for whoever reaps orphans: either way it runs no more.
  static bool finished(pid_t pid) {
    std::ifstream stat{"/proc/" + std::to_string(pid) + "/stat"};
    std::string line;
    if (!std::getline(stat, line))
      return true;
    auto state = line.substr(line.rfind(')') + 2, 1);
    return state == "Z" || state == "X";
  }

  std::filesystem::path dir;
  supervisor_config config;
};

} // namespace

TEST(RestartBackoff, DoublesUpToTheCapAndResetsAfterAStableRun) {
  supervisor_config config; // 1 s doubling to 30 s, reset after 60 s
  restart_backoff backoff{config};
  std::vector<int64_t> delays;
  for (int i = 0; i < 7; ++i)
    delays.push_back(backoff.after_exit(2s).count());
  EXPECT_EQ(delays, (std::vector<int64_t>{1000, 2000, 4000, 8000, 16000, 30000, 30000}));
  EXPECT_EQ(backoff.after_exit(61s).count(), 1000);
  EXPECT_EQ(backoff.after_exit(1s).count(), 2000);
}

TEST(WorkerCommand, RunsTheWorkerPackageWithItsKindSlotsAndRole) {
  supervisor_config config;
  config.python = "/opt/venv/bin/python";
  config.endpoint = "tcp://127.0.0.1:5555";
  EXPECT_EQ(worker_command(config, {.device_kind = "none", .count = 1, .slots = 4, .role = "lint"}),
            (std::vector<std::string>{"/opt/venv/bin/python", "-m", "opforge_worker", "serve",
                                      "--connect", "tcp://127.0.0.1:5555", "--device", "none",
                                      "--slots", "4", "--role", "lint"}));
  // Slots left to `auto` are the worker's to resolve, from its device-kind registry.
  EXPECT_EQ(worker_command(config, {.device_kind = "rocm-gfx942", .role = "device"}),
            (std::vector<std::string>{"/opt/venv/bin/python", "-m", "opforge_worker", "serve",
                                      "--connect", "tcp://127.0.0.1:5555", "--device",
                                      "rocm-gfx942", "--slots", "auto", "--role", "device"}));
  // With CURVE, the files of the daemon's public key and the worker's pair (never a key itself,
  // which `ps` would show).
  config.server_key_file = "/srv/opforge/keys/local/server.key";
  config.key_file = "/srv/opforge/keys/local/worker.key_secret";
  auto command = worker_command(config, {.device_kind = "none", .slots = 1, .role = "lint"});
  EXPECT_EQ(std::vector<std::string>(command.end() - 4, command.end()),
            (std::vector<std::string>{"--server-key", "/srv/opforge/keys/local/server.key",
                                      "--key-file", "/srv/opforge/keys/local/worker.key_secret"}));
}

TEST(WorkerCommand, LocalWorkersConnectToLoopbackForAWildcardBind) {
  EXPECT_EQ(connect_endpoint("tcp://0.0.0.0:5555"), "tcp://127.0.0.1:5555");
  EXPECT_EQ(connect_endpoint("tcp://*:5555"), "tcp://127.0.0.1:5555");
  EXPECT_EQ(connect_endpoint("tcp://10.0.0.7:5555"), "tcp://10.0.0.7:5555");
  EXPECT_EQ(connect_endpoint("ipc:///run/opforge/workers.sock"), "ipc:///run/opforge/workers.sock");
}

TEST_F(Supervisor, RejectsInvalidEntries) {
  config.workers = {{.device_kind = "cuda", .count = 1, .slots = 0, .role = "device"}};
  auto started = supervisor::start(config);
  ASSERT_FALSE(started);
  EXPECT_EQ(render(started.error()),
            "config_invalid: local worker 1 (cuda): slots must be at least 1");
  config.workers = {{.device_kind = "none", .count = 1, .slots = 1, .role = "linter"}};
  EXPECT_EQ(supervisor::start(config).error(), errc::config_invalid);
}

TEST_F(Supervisor, RestartsWorkersThatExit) {
  config.workers = {{.device_kind = "interpreter", .count = 2, .slots = 3, .role = "device"}};
  run_script("echo \"$1 $2 $3\" >> " + (dir / "starts").string() + "; exit 3");
  auto started = supervisor::start(config);
  ASSERT_TRUE(started) << render(started.error());
  auto& sup = **started;
  ASSERT_TRUE(eventually([&] { return lines("starts").size() >= 8; }));
  sup.stop();
  for (auto& line : lines("starts"))
    EXPECT_EQ(line, "interpreter 3 device");
  auto processes = sup.processes();
  ASSERT_EQ(processes.size(), 2u);
  for (auto& p : processes) {
    EXPECT_GE(p.starts, 2);
    EXPECT_EQ(p.pid, 0);
  }
}

// SIGTERM first; a worker that ignores it, and whatever it started in its group, get SIGKILL.
TEST_F(Supervisor, StopKillsTheWholeGroupOfAWorkerThatIgnoresSigterm) {
  config.workers = {{.device_kind = "interpreter", .count = 1, .slots = 1, .role = "device"}};
  auto worker_pid = (dir / "worker.pid").string();
  auto child_pid = (dir / "child.pid").string();
  run_script("trap '' TERM; sleep 1000 & echo $! > " + child_pid + ".tmp; mv " + child_pid +
             ".tmp " + child_pid + "; echo $$ > " + worker_pid + ".tmp; mv " + worker_pid +
             ".tmp " + worker_pid + "; wait");
  auto started = supervisor::start(config);
  ASSERT_TRUE(started) << render(started.error());
  ASSERT_TRUE(eventually([&] { return pid_in("worker.pid") && pid_in("child.pid"); }));
  auto worker = *pid_in("worker.pid");
  auto child = *pid_in("child.pid");
  EXPECT_FALSE(finished(worker));
  EXPECT_FALSE(finished(child));
  (*started)->stop();
  EXPECT_TRUE(finished(worker));
  EXPECT_TRUE(eventually([&] { return finished(child); }));
  auto processes = (*started)->processes();
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0].starts, 1);
  EXPECT_TRUE(WIFSIGNALED(processes[0].last_status));
  EXPECT_EQ(WTERMSIG(processes[0].last_status), SIGKILL);
}
