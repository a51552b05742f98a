// The store on a full disk: its data directory is a small tmpfs that the test fills to ENOSPC and
// frees again. Writes are held back (sessions pause), reads go on, the failure shows in status and
// metrics, and once space is back every held write is applied exactly once. Needs root for the
// mount (CI and the dev machines run as root); elsewhere it is skipped.
//
// The actors (store, campaign, sessions) run on CAF's test coordinator, on the test thread, and
// every step before the disk is freed is ordered by messages alone: the store's thread serves
// requests in the order they reach the actor, so a status asked after some writes sees them held.
// Only the recovery once the disk is freed takes real time, and cannot take virtual time, as no
// actor's timer drives it: RocksDB clears its full-disk error from a thread of its own, which
// looks at the free space every 5 s (SstFileManagerImpl::ClearError), and the store's thread
// retries the held writes on its own steady-clock backoff (100 ms doubling to 2 s, store.cpp's
// io_thread). There the test thread blocks until the store's thread answers (CoordinatedIo::drive,
// at most io_limit), without sleeping or polling: about 5.5 s for each test that frees the disk.

#include "actors/sessions/campaign.hpp"
#include "actors/store/store.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/session_messages.hpp"
#include "messages/system_config.hpp"
#include "persistence/keys.hpp"
#include "tests/test_coordinated_io.hpp"
#include "tests/test_session_support.hpp"
#include "tests/test_store_support.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

using namespace opforge;
using opforge::testing::awaited;
using ::testing::HasSubstr;

namespace {

/// A tmpfs mounted for the test's lifetime, and files that fill it. RocksDB recovers from a full
/// disk only once 64 MiB (its write buffer) are free, and preallocates 70 MiB for its log when
/// it can: a ballast keeps it from doing so, or writes would go on into that space.
class small_disk {
public:
  /// An empty string when mounted, or why not.
  std::string mount() {
    std::filesystem::create_directories(path());
    if (::mount("tmpfs", path().c_str(), "tmpfs", 0, "size=100m") != 0)
      return std::strerror(errno);
    mounted_ = true;
    write_file(ballast(), 40 << 20);
    return {};
  }

  ~small_disk() {
    if (mounted_)
      ::umount2(path().c_str(), MNT_DETACH);
  }

  std::filesystem::path path() const { return dir_.path() / "disk"; }

  /// Writes one file until not a byte more fits.
  void fill() {
    write_file(filler(), SIZE_MAX);
    struct statvfs fs {};
    ASSERT_EQ(::statvfs(path().c_str(), &fs), 0);
    ASSERT_EQ(fs.f_bavail, 0u);
  }

  void free_space() {
    std::filesystem::remove(filler());
    std::filesystem::remove(ballast());
  }

private:
  std::filesystem::path filler() const { return path() / "filler"; }
  std::filesystem::path ballast() const { return path() / "ballast"; }

  // Up to `bytes`, or as much as fits.
  static void write_file(const std::filesystem::path& file, size_t bytes) {
    auto fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    std::string chunk(1 << 20, 'x');
    for (auto size = chunk.size(); size > 0 && bytes > 0; size /= 2)
      for (ssize_t n; bytes > 0 && (n = ::write(fd, chunk.data(), std::min(size, bytes))) > 0;)
        bytes -= static_cast<size_t>(n);
    ::close(fd);
  }

  test::temp_dir dir_;
  bool mounted_ = false;
};

/// A device manager that lints at once and holds every test job until it receives `run`, then
/// passes them all, and every later one at once: sessions wait at TEST until the test is ready.
using gated_jobs_actor = job_runner_actor::extend<caf::reacts_to<atom::run>>;

struct gated_jobs_state {
  std::vector<std::pair<std::string, caf::typed_response_promise<device_job_result>>> held;
  bool open = false;
  std::shared_ptr<size_t> tests;
  static inline const char* name = "gated_jobs";
};

device_job_result answer(const std::string& job_id, const opforge::testing::job_reply& reply) {
  device_job_result r;
  r.job_id = job_id;
  r.status = contract::job_status::done;
  r.payload = reply.payload;
  r.worker_id = "gated";
  r.fingerprint = "gated-toolchain";
  return r;
}

opforge::testing::job_reply passed() {
  return opforge::testing::done(opforge::testing::test_verdict(contract::outcome::pass, 4, 4));
}

gated_jobs_actor::behavior_type
gated_jobs(gated_jobs_actor::stateful_pointer<gated_jobs_state> self,
           std::shared_ptr<size_t> tests) {
  self->state.tests = std::move(tests);
  return {
      [self](atom::submit, device_job& job) -> caf::result<device_job_result> {
        if (job.kind == contract::job_kind::lint)
          return answer(job.id, opforge::testing::done(opforge::testing::clean_lint()));
        ++*self->state.tests;
        if (self->state.open)
          return answer(job.id, passed());
        auto promise = self->make_response_promise<device_job_result>();
        self->state.held.emplace_back(job.id, promise);
        return promise;
      },
      [](atom::cancel, const std::string&) {},
      [self](atom::run) {
        self->state.open = true;
        for (auto& [id, promise] : self->state.held)
          promise.deliver(answer(id, passed()));
        self->state.held.clear();
      },
  };
}

using pending_write = std::shared_ptr<awaited<atom::ok>>;

class StoreFullDiskTest : public opforge::testing::CoordinatedIo {
protected:
  void SetUp() override {
    if (auto why = disk_.mount(); !why.empty())
      GTEST_SKIP() << "cannot mount a tmpfs (" << why << "); this test needs root";
    auto spawned = spawn_store(sys, disk_.path() / "db", telemetry_);
    ASSERT_TRUE(spawned) << render(spawned.error());
    store_ = *spawned;
  }

  void TearDown() override {
    if (store_)
      stop(store_);
    CoordinatedIo::TearDown();
  }

  template <class Reply, class... Ts>
  Reply ask(Ts... request) {
    return CoordinatedIo::ask<Reply>(store_, std::move(request)...);
  }

  /// Sends a write that is answered once the actors run and the store's thread has applied it.
  pending_write send_write(write_batch batch) {
    return send_request<atom::ok>(store_, atom::write_v, std::move(batch));
  }

  store_status status() { return ask<store_status>(atom::status_v); }

  std::vector<key_value> scan(family f) {
    return ask<std::vector<key_value>>(atom::scan_v, f, std::string{}, uint64_t{1'000'000});
  }

  // After the actor system (CoordinatedIo's), so destroyed before it: the store is stopped by
  // then, in TearDown.
  small_disk disk_;
  std::shared_ptr<metrics> telemetry_ = std::make_shared<metrics>("test");
  store_actor store_;
};

bool all_answered(const std::vector<pending_write>& writes) {
  return std::all_of(writes.begin(), writes.end(), [](const auto& w) { return w->arrived; });
}

TEST_F(StoreFullDiskTest, WritesWaitForSpaceWhileReadsGoOn) {
  ask<atom::ok>(atom::write_v, write_batch{{{family::validations, "before", "v"}}, true});
  disk_.fill();
  // Big enough to cross a page of the log, so it cannot slip into space the log already has.
  std::string value(64 * 1024, 'v');
  std::vector<pending_write> writes;
  for (int i = 0; i < 3; ++i)
    writes.push_back(send_write(
        write_batch{{{family::validations, "during/" + std::to_string(i), value}}, true}));
  // Asked after the writes, so served after the store's thread tried them.
  auto paused = status();
  ASSERT_EQ(paused.paused_writes, 3u);
  EXPECT_THAT(paused.write_failure, HasSubstr("space"));
  EXPECT_EQ(paused.batches_written, 1u); // the first write, before the disk filled
  for (const auto& write : writes)
    EXPECT_FALSE(write->arrived);
  EXPECT_GE(telemetry_->store_errors(store_operation::write).Value(), 1);
  EXPECT_EQ(telemetry_->store_paused_writes().Value(), 3);
  // Reads are served meanwhile.
  auto before = ask<stored_value>(atom::get_v, family::validations, std::string{"before"});
  EXPECT_EQ(before.value, std::optional<std::string>{"v"});

  disk_.free_space();
  ASSERT_TRUE(drive([&] { return all_answered(writes); })); // the store's retry, in real time
  for (const auto& write : writes)
    EXPECT_FALSE(write->error) << render(write->error);
  auto resumed = status();
  EXPECT_EQ(resumed.write_failure, "");
  EXPECT_EQ(resumed.paused_writes, 0u);
  EXPECT_EQ(resumed.batches_written, 4u);
  EXPECT_EQ(telemetry_->store_paused_writes().Value(), 0);
  // Each batch's wait ends once, with the write that applied it, however often it was retried.
  EXPECT_EQ(telemetry_->store_queue_wait().Collect().histogram.sample_count, 4u);
  EXPECT_EQ(telemetry_->store_handback().Collect().histogram.sample_count, 4u);
  auto jobs = scan(family::validations);
  ASSERT_EQ(jobs.size(), 4u);
  EXPECT_EQ(jobs[1].key, "during/0");
  EXPECT_EQ(jobs[3].value, value);
}

TEST_F(StoreFullDiskTest, ShutdownWithHeldWritesAnswersThemAndCloses) {
  disk_.fill();
  auto held =
      send_write(write_batch{{{family::validations, "never", std::string(64 * 1024, 'v')}}, true});
  ASSERT_EQ(status().paused_writes, 1u);
  auto store = std::exchange(store_, store_actor{});
  // Whether the close could sync its log does not matter here; that it ends does.
  wait(send_request<atom::ok>(store, atom::shutdown_v));
  wait_until_terminated(store);
  ASSERT_TRUE(held->arrived);
  EXPECT_EQ(test::opforge_code(held->error), errc::store_io_failed);
  EXPECT_THAT(render(held->error), HasSubstr("closed while writes were failing"));
}

TEST_F(StoreFullDiskTest, CampaignPausesOnAFullDiskAndFinishesOnceFreed) {
  constexpr size_t sessions = 24;
  auto templates = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
  ASSERT_TRUE(templates) << render(templates.error());
  auto chat = std::make_shared<opforge::testing::chat_script>();
  chat->answer_for = [](const chat_request& request) {
    return opforge::testing::chat_script::answer(
        chat_outcome::ok, "```python\n@triton.jit\ndef k(x_ptr):\n    pass\n\n\ndef " +
                              wrapper_name(request.op) +
                              "(input):\n    k[(1,)](input)\n    return input\n```\n");
  };
  auto tests = std::make_shared<size_t>(0);
  auto jobs = sys.spawn(gated_jobs, tests);
  session_services services;
  services.store = store_;
  services.llm = sys.spawn(opforge::testing::scripted_chat, chat);
  services.jobs = jobs;
  helpers.push_back(caf::actor_cast<caf::actor>(services.llm));
  helpers.push_back(caf::actor_cast<caf::actor>(jobs));
  services.templates = std::make_shared<const prompt_templates>(std::move(*templates));
  services.examples = "EXAMPLES";
  campaign_spec spec;
  spec.campaign_id = "full-disk";
  spec.endpoint = "scripted";
  spec.concurrency = sessions;
  for (size_t i = 0; i < sessions; ++i) {
    auto op = "op" + std::to_string(i);
    spec.operators.push_back({op, "", "test", op + "(input) -> Tensor", {"float32"}});
  }
  auto run = sys.spawn(campaign, spec, services, std::vector<session_record>{});
  helpers.push_back(caf::actor_cast<caf::actor>(run));
  auto finished = send_request<campaign_status>(run, atom::run_v);
  ASSERT_TRUE(drive([&] { return *tests == sessions; })); // every session waits at TEST

  disk_.fill();
  caf::anon_send(jobs, atom::run_v); // every SUCCESS checkpoint now meets a full disk
  // Each status is served after the checkpoints that reached the store before it. A small one
  // may still fit the log's last page, and its session goes on to its next, until one is held.
  auto paused = status();
  while (paused.paused_writes == 0 && !finished->arrived)
    paused = status();
  ASSERT_GT(paused.paused_writes, 0u);
  // The campaign stays paused, it does not fail: every actor has run until idle, and what is
  // left waits on the held writes.
  EXPECT_FALSE(finished->arrived);
  EXPECT_EQ(scan(family::sessions).size(), sessions); // reads go on
  EXPECT_LT(scan(family::kernels).size(), sessions);

  disk_.free_space();
  ASSERT_TRUE(drive([&] { return finished->arrived; })); // the store's retry, in real time
  ASSERT_FALSE(finished->error) << render(finished->error);
  auto result = finished->value.value_or(campaign_status{});
  EXPECT_EQ(result.succeeded, sessions);
  EXPECT_EQ(result.failed, 0u);
  EXPECT_EQ(status().paused_writes, 0u);
  // Nothing asked twice, nothing lost: one answer and one test per session, one kernel each,
  // and every session's events numbered without a gap.
  EXPECT_EQ(chat->requests.size(), sessions);
  EXPECT_EQ(*tests, sessions);
  EXPECT_EQ(scan(family::kernels).size(), sessions);
  std::map<std::string, std::vector<uint64_t>> events;
  for (const auto& kv : scan(family::events))
    events[kv.key.substr(0, kv.key.find('\0'))].push_back(event_seq(kv.key).value_or(0));
  ASSERT_EQ(events.size(), sessions);
  for (const auto& [session, seqs] : events) {
    EXPECT_EQ(seqs.size(), events.begin()->second.size()) << session;
    for (size_t i = 0; i < seqs.size(); ++i)
      EXPECT_EQ(seqs[i], seqs.front() + i) << session;
  }
}

} // namespace
