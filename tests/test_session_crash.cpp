// kill -9 in the middle of a campaign, restart: every session resumes from its last checkpoint and
// the final results equal those of an uninterrupted run.

#include "tests/test_store_support.hpp"

#include <csignal>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr const char* operators = "120";

// Runs the runner to completion and returns its "result" lines. The rest (its errors, and the
// store's log: reopened after a kill -9, RocksDB may drop the torn tail of its write-ahead log,
// a write never acknowledged) only explains a failed run.
std::string run_to_end(const std::string& dir, const char* mode) {
  auto command = std::string{OPFORGE_SESSION_CRASH_RUNNER} + " " + dir + " " + mode + " " +
                 operators + " 2>&1";
  auto* pipe = popen(command.c_str(), "r");
  std::string results;
  std::string everything;
  char line[512];
  while (fgets(line, sizeof line, pipe)) {
    everything += line;
    if (std::string{line}.rfind("result", 0) == 0)
      results += line;
  }
  EXPECT_EQ(pclose(pipe), 0) << everything;
  return results;
}

// Starts a fresh run and SIGKILLs it once it has acknowledged `checkpoints` checkpoints.
void kill_after(const std::string& dir, int checkpoints) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  auto pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execl(OPFORGE_SESSION_CRASH_RUNNER, OPFORGE_SESSION_CRASH_RUNNER, dir.c_str(), "fresh",
          operators, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  auto* stream = fdopen(out[0], "r");
  char line[512];
  int seen = 0;
  std::string finished;
  while (seen < checkpoints && fgets(line, sizeof line, stream)) {
    seen += std::string{line}.rfind("checkpoint", 0) == 0;
    if (std::string{line}.rfind("result", 0) == 0)
      finished += line;
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  fclose(stream);
  ASSERT_EQ(seen, checkpoints) << "the run ended before it could be killed";
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_TRUE(finished.empty()) << "the campaign finished before the kill";
}

} // namespace

TEST(SessionCrash, KilledCampaignResumesToTheSameResults) {
  opforge::test::temp_dir uninterrupted;
  auto expected = run_to_end(uninterrupted.db().string(), "fresh");
  ASSERT_EQ(std::count(expected.begin(), expected.end(), '\n'), 120);
  ASSERT_NE(expected.find("result op1000 SUCCESS calls=2 dialogs=1 kernel="), std::string::npos)
      << expected;

  opforge::test::temp_dir crashed;
  // Each session checkpoints 7 times: killing at 300 leaves some done, some mid-way, some unborn.
  kill_after(crashed.db().string(), 300);
  EXPECT_EQ(run_to_end(crashed.db().string(), "resume"), expected);
}
