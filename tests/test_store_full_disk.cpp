// The store on a full disk: its data directory is a small tmpfs that the test fills to ENOSPC and
// frees again. Writes are held back (sessions pause), reads go on, the failure shows in status and
// metrics, and once space is back every held write is applied exactly once. Needs root for the
// mount (CI and the dev machines run as root); elsewhere it is skipped.

#include "actors/sessions/campaign.hpp"
#include "actors/store/store.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/session_messages.hpp"
#include "messages/system_config.hpp"
#include "persistence/keys.hpp"
#include "tests/test_session_support.hpp"
#include "tests/test_store_support.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

using namespace opforge;
using namespace std::chrono_literals;
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
  std::shared_ptr<std::atomic<size_t>> tests;
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
           std::shared_ptr<std::atomic<size_t>> tests) {
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

/// Writes `batch` from an actor of its own; the future holds the answer (no error for ok).
std::future<caf::error> write_async(caf::actor_system& sys, store_actor store, write_batch batch) {
  auto answer = std::make_shared<std::promise<caf::error>>();
  auto future = answer->get_future();
  sys.spawn([=, batch = std::move(batch)](caf::event_based_actor* requester) mutable {
    requester->request(store, caf::infinite, atom::write_v, std::move(batch))
        .then([=](atom::ok) { answer->set_value(caf::error{}); },
              [=](const caf::error& err) { answer->set_value(err); });
  });
  return future;
}

bool ready(const std::future<caf::error>& future, std::chrono::milliseconds wait = 0ms) {
  return future.wait_for(wait) == std::future_status::ready;
}

template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit = 20s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

class StoreFullDiskTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (auto why = disk_.mount(); !why.empty())
      GTEST_SKIP() << "cannot mount a tmpfs (" << why << "); this test needs root";
    auto spawned = spawn_store(sys_, disk_.path() / "db", telemetry_);
    ASSERT_TRUE(spawned) << render(spawned.error());
    store_ = *spawned;
  }

  void TearDown() override {
    if (store_)
      self_->request(store_, caf::infinite, atom::shutdown_v)
          .receive([](atom::ok) {}, [](const caf::error&) {});
  }

  template <class Reply, class... Ts>
  Reply ask(Ts... request) {
    Reply reply{};
    self_->request(store_, caf::infinite, std::move(request)...)
        .receive([&](Reply& value) { reply = std::move(value); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return reply;
  }

  store_status status() { return ask<store_status>(atom::status_v); }

  std::vector<key_value> scan(family f) {
    return ask<std::vector<key_value>>(atom::scan_v, f, std::string{}, uint64_t{1'000'000});
  }

  small_disk disk_;
  system_config cfg_;
  caf::actor_system sys_{cfg_};
  caf::scoped_actor self_{sys_};
  std::shared_ptr<metrics> telemetry_ = std::make_shared<metrics>("test");
  store_actor store_;
};

TEST_F(StoreFullDiskTest, WritesWaitForSpaceWhileReadsGoOn) {
  ask<atom::ok>(atom::write_v, write_batch{{{family::validations, "before", "v"}}, true});
  disk_.fill();
  // Big enough to cross a page of the log, so it cannot slip into space the log already has.
  std::string value(64 * 1024, 'v');
  std::vector<std::future<caf::error>> writes;
  for (int i = 0; i < 3; ++i)
    writes.push_back(write_async(
        sys_, store_,
        write_batch{{{family::validations, "during/" + std::to_string(i), value}}, true}));
  ASSERT_TRUE(eventually([&] { return status().paused_writes == 3; }));
  auto paused = status();
  EXPECT_THAT(paused.write_failure, HasSubstr("space"));
  EXPECT_EQ(paused.batches_written, 1u); // the first write, before the disk filled
  for (const auto& write : writes)
    EXPECT_FALSE(ready(write));
  EXPECT_GE(telemetry_->store_errors("write").Value(), 1);
  EXPECT_EQ(telemetry_->store_paused_writes().Value(), 3);
  // Reads are served meanwhile.
  auto before = ask<stored_value>(atom::get_v, family::validations, std::string{"before"});
  EXPECT_EQ(before.value, std::optional<std::string>{"v"});

  disk_.free_space();
  for (auto& write : writes) {
    ASSERT_TRUE(ready(write, 20s));
    EXPECT_FALSE(write.get());
  }
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
  auto write =
      write_async(sys_, store_,
                  write_batch{{{family::validations, "never", std::string(64 * 1024, 'v')}}, true});
  ASSERT_TRUE(eventually([&] { return status().paused_writes == 1; }));
  auto store = std::exchange(store_, store_actor{});
  // Whether the close could sync its log does not matter here; that it ends does.
  self_->request(store, caf::infinite, atom::shutdown_v)
      .receive([](atom::ok) {}, [](const caf::error&) {});
  self_->wait_for(store);
  ASSERT_TRUE(ready(write, 5s));
  auto err = write.get();
  EXPECT_EQ(test::opforge_code(err), errc::store_io_failed);
  EXPECT_THAT(render(err), HasSubstr("closed while writes were failing"));
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
  auto tests = std::make_shared<std::atomic<size_t>>(0);
  auto jobs = sys_.spawn(gated_jobs, tests);
  session_services services;
  services.store = store_;
  services.llm = sys_.spawn(opforge::testing::scripted_chat, chat);
  services.jobs = jobs;
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
  auto run = sys_.spawn(campaign, spec, services, std::vector<session_record>{});
  auto outcome = std::make_shared<std::promise<campaign_status>>();
  auto finished = outcome->get_future();
  sys_.spawn([=](caf::event_based_actor* requester) {
    requester->request(run, caf::infinite, atom::run_v)
        .then([=](campaign_status& s) { outcome->set_value(std::move(s)); },
              [=](const caf::error& err) {
                ADD_FAILURE() << render(err);
                outcome->set_value({});
              });
  });
  ASSERT_TRUE(eventually([&] { return *tests == sessions; })); // every session waits at TEST

  disk_.fill();
  self_->send(jobs, atom::run_v); // every SUCCESS checkpoint now meets a full disk
  ASSERT_TRUE(eventually([&] { return status().paused_writes > 0; }));
  // The campaign stays paused, it does not fail.
  EXPECT_EQ(finished.wait_for(300ms), std::future_status::timeout);
  EXPECT_EQ(scan(family::sessions).size(), sessions); // reads go on
  EXPECT_LT(scan(family::kernels).size(), sessions);

  disk_.free_space();
  ASSERT_EQ(finished.wait_for(20s), std::future_status::ready);
  auto result = finished.get();
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
  for (auto actor : {caf::actor_cast<caf::actor>(services.llm), caf::actor_cast<caf::actor>(jobs)})
    self_->send_exit(actor, caf::exit_reason::user_shutdown);
}

} // namespace
