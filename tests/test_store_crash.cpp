// Kills a writer process with SIGKILL at random points and checks that the database it leaves
// holds every acknowledged batch whole, no batch in part, and at most the one batch that was in
// flight beyond the acknowledged ones. Set OPFORGE_CRASH_SEED to replay a failing run.

#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/store_crash_batch.hpp"
#include "tests/test_store_support.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

using namespace opforge;
using namespace opforge::test;
using testing::HasSubstr;

namespace {

/// tests/store_crash_writer.cpp running on a database, its stdout read line by line.
class writer_process {
public:
  writer_process(const std::filesystem::path& dir, uint64_t first) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error{"pipe2 failed"};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::string program = OPFORGE_STORE_CRASH_WRITER;
    auto dir_arg = dir.string();
    auto first_arg = std::to_string(first);
    char* argv[] = {program.data(), dir_arg.data(), first_arg.data(), nullptr};
    auto spawned = posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (spawned != 0) {
      close(fds[0]);
      throw std::runtime_error{"cannot start " + program};
    }
    out_ = fdopen(fds[0], "r");
  }

  writer_process(const writer_process&) = delete;
  writer_process& operator=(const writer_process&) = delete;

  ~writer_process() {
    kill_and_reap();
    std::fclose(out_);
  }

  /// The number of the next acknowledged batch, or nothing once the writer's stdout is closed.
  std::optional<uint64_t> next_ack() {
    char* line = nullptr;
    size_t capacity = 0;
    auto length = getline(&line, &capacity, out_);
    std::unique_ptr<char, decltype(&std::free)> owned{line, &std::free};
    unsigned long long n = 0;
    if (length < 0 || std::sscanf(line, "ack %llu", &n) != 1)
      return std::nullopt;
    return n;
  }

  /// Sends SIGKILL and waits for the process; returns how it ended, as waitpid reports it.
  int kill_and_reap() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
      pid_ = -1;
    }
    return status_;
  }

private:
  pid_t pid_ = -1;
  int status_ = 0;
  FILE* out_ = nullptr;
};

/// The numbers of the batches present in the database, after checking that each one is present
/// whole and with the values it was written with.
std::set<uint64_t> present_batches(store& db) {
  std::set<uint64_t> sessions;
  std::set<uint64_t> events;
  std::set<uint64_t> validations;
  auto collect = [&](family f, std::string_view prefix, std::set<uint64_t>& found, auto number_of,
                     size_t size) {
    auto err = db.scan(f, prefix, [&](std::string_view key, std::string_view value) {
      auto n = number_of(key);
      EXPECT_EQ(value, crash_value(f, n, size)) << to_string(f) << " of batch " << n;
      found.insert(n);
      return true;
    });
    EXPECT_FALSE(err) << render(err);
  };
  auto from_crash_key = [](std::string_view key) {
    return std::stoull(std::string{key.substr(key.find('/') + 1)});
  };
  auto from_event_key = [](std::string_view key) { return event_seq(key).value_or(0); };
  collect(family::sessions, "batch/", sessions, from_crash_key, 2048);
  collect(family::events, prefix_of(crash_session), events, from_event_key, 4096);
  collect(family::validations, "batch/", validations, from_crash_key, 64);
  EXPECT_EQ(sessions, events) << "a batch is present in part";
  EXPECT_EQ(sessions, validations) << "a batch is present in part";
  auto last = sessions.empty() ? 0 : *sessions.rbegin();
  auto latest = db.get(family::campaigns, "latest");
  EXPECT_TRUE(latest) << render(latest.error());
  if (latest) {
    EXPECT_EQ(*latest, last == 0 ? std::nullopt : std::optional{std::to_string(last)});
  }
  std::vector<std::string> pending;
  EXPECT_FALSE(db.scan(family::kernels, "pending/", [&](std::string_view key, std::string_view) {
    pending.emplace_back(key);
    return true;
  }));
  EXPECT_EQ(pending, last == 0 ? std::vector<std::string>{}
                               : std::vector<std::string>{crash_pending_key(last)});
  return sessions;
}

uint64_t crash_seed() {
  if (auto* seed = std::getenv("OPFORGE_CRASH_SEED"))
    return std::stoull(seed);
  return 20261122;
}

TEST(StoreCrash, KilledWriterLosesNoAcknowledgedBatchAndLeavesNoPartialOne) {
  constexpr int rounds = 8;
  auto seed = crash_seed();
  SCOPED_TRACE("OPFORGE_CRASH_SEED=" + std::to_string(seed));
  std::mt19937_64 random{seed};
  temp_dir dir;
  uint64_t acknowledged = 0;
  for (int round = 0; round < rounds; ++round) {
    auto acks_before_kill = std::uniform_int_distribution<uint64_t>{1, 40}(random);
    auto delay = std::chrono::microseconds{std::uniform_int_distribution<int>{0, 3000}(random)};
    SCOPED_TRACE("round " + std::to_string(round) + ": kill after " +
                 std::to_string(acks_before_kill) + " acks and " + std::to_string(delay.count()) +
                 " us");
    writer_process writer{dir.db(), acknowledged + 1};
    for (uint64_t seen = 0; seen < acks_before_kill; ++seen) {
      auto ack = writer.next_ack();
      ASSERT_EQ(ack, acknowledged + 1) << "the writer stopped or skipped a batch";
      acknowledged = *ack;
    }
    std::this_thread::sleep_for(delay);
    auto status = writer.kill_and_reap();
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the writer ended on its own, status " << status;
    // Acks the writer printed before it died were acknowledged too, even if not yet read.
    while (auto ack = writer.next_ack())
      acknowledged = *ack;
    auto db = open_rocksdb_store(dir.db());
    ASSERT_TRUE(db) << render(db.error());
    auto present = present_batches(**db);
    ASSERT_FALSE(present.empty());
    EXPECT_EQ(*present.begin(), 1u);
    EXPECT_EQ(present.size(), *present.rbegin()) << "batches are missing in the middle";
    EXPECT_GE(*present.rbegin(), acknowledged) << "an acknowledged batch was lost";
    EXPECT_LE(*present.rbegin(), acknowledged + 1) << "more than the in-flight batch appeared";
    acknowledged = *present.rbegin();
    ASSERT_FALSE((*db)->close());
  }
}

TEST(StoreCrash, DatabaseHeldByAnotherProcessIsReportedAsLocked) {
  temp_dir dir;
  writer_process writer{dir.db(), 1};
  ASSERT_EQ(writer.next_ack(), 1u);
  auto refused = open_rocksdb_store(dir.db());
  ASSERT_FALSE(refused);
  EXPECT_EQ(opforge_code(refused.error()), errc::store_open_failed);
  EXPECT_THAT(render(refused.error()), HasSubstr("the database is locked"));
  EXPECT_THAT(render(refused.error()), HasSubstr(dir.db().string()));
  writer.kill_and_reap();
  EXPECT_TRUE(open_rocksdb_store(dir.db())) << "the lock dies with its process";
}

} // namespace
