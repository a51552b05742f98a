#pragma once

// Running the real opforge binary from a test: spawning it with its output captured, bounded
// waits, and a fixture that serves a daemon on a temporary data directory without local workers.

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

namespace opforge::cli_testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline const std::string opforge_binary = OPFORGE_BINARY_DIR "/opforge";

// Generous bounds that only keep a broken binary from hanging the suite; nothing asserts speed.
constexpr auto process_bound = 60s;

inline std::string slurp(const fs::path& path) {
  std::stringstream text;
  text << std::ifstream{path}.rdbuf();
  return text.str();
}

inline pid_t spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    std::vector<char*> argv{const_cast<char*>(opforge_binary.c_str())};
    for (auto& arg : args)
      argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// The exit code of `pid`, or -1 (after killing it) when it outlives the bound.
inline int wait_for(pid_t pid, std::chrono::milliseconds bound = process_bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct outcome {
  int code;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("opforge-cli-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    data = dir / "var";
    // The daemon's workers and replay server import this tree's worker package, not whichever
    // the interpreter has installed (a worktree shares the main checkout's venv).
    ::setenv("PYTHONPATH", OPFORGE_SOURCE_DIR "/worker", 1);
    // No local workers and a private workers socket, so that suites can run side by side; a slow
    // heartbeat, so that a scripted worker stays alive without beating; no CURVE on that ipc
    // socket, so that scripted workers need no keys (test_worker_auth_cli tests keys).
    write("quiet.yaml", "local_workers: []\nworkers: {listen: '" + workers_endpoint() +
                            "', heartbeat_ms: 600000, allow_unauthenticated: true}\n");
  }

  std::string workers_endpoint() const { return "ipc://" + (dir / "workers.sock").string(); }

  void TearDown() override {
    if (daemon > 0) {
      ::kill(daemon, SIGKILL);
      ::waitpid(daemon, nullptr, 0);
    }
    fs::remove_all(dir);
  }

  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream{dir / name} << text;
    return dir / name;
  }

  outcome run(const std::vector<std::string>& args) {
    auto pid = spawn(args, dir / "cli.out", dir / "cli.err");
    int code = wait_for(pid);
    return {code, slurp(dir / "cli.out"), slurp(dir / "cli.err")};
  }

  // Starts `opforge serve` on the test's data directory and waits until it answers `status`.
  nlohmann::json serve(const std::string& metrics_listen = "127.0.0.1:0") {
    std::vector<std::string> args{"serve",       "--config",    (dir / "quiet.yaml").string(),
                                  "--data-dir",  data.string(), "--metrics-listen",
                                  metrics_listen};
    daemon = spawn(args, dir / "serve.out", dir / "serve.err");
    auto deadline = std::chrono::steady_clock::now() + process_bound;
    while (std::chrono::steady_clock::now() < deadline) {
      auto status = run({"status", "--json", "--data-dir", data.string()});
      if (status.code == 0)
        return nlohmann::json::parse(status.out);
      int rc = 0;
      if (::waitpid(daemon, &rc, WNOHANG) == daemon) {
        daemon = 0;
        ADD_FAILURE() << "serve exited early: " << slurp(dir / "serve.err");
        return {};
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "serve never answered status: " << slurp(dir / "serve.err");
    return {};
  }

  int wait_for_daemon() {
    int code = wait_for(daemon);
    daemon = 0;
    return code;
  }

  // Replaces the temporary directory with "DIR" so expected lines read the same on every run.
  std::string shorten(std::string text) {
    for (auto at = text.find(dir.string()); at != std::string::npos; at = text.find(dir.string()))
      text.replace(at, dir.string().size(), "DIR");
    return text;
  }

  void expect_bad_config(const std::vector<std::string>& args, const std::string& line) {
    auto result = run(args);
    EXPECT_EQ(result.code, 2) << result.err;
    EXPECT_EQ(shorten(result.err), "opforge: " + line + "\n");
    EXPECT_EQ(result.out, "");
  }

  fs::path dir;
  fs::path data;
  pid_t daemon = 0;
};

} // namespace opforge::cli_testing
