// The test harness for actors beside I/O threads (test_coordinated_io.hpp): what a plain thread
// sends reaches coordinated actors whole and in order while the test runs them, and timers fire
// in virtual time only once no I/O is under way.

#include "tests/test_coordinated_io.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

using namespace std::chrono_literals;

namespace {

using opforge::testing::CoordinatedIo;

caf::behavior collector(caf::event_based_actor*, std::shared_ptr<std::vector<uint64_t>> got) {
  return {[got](uint64_t value) { got->push_back(value); }};
}

TEST_F(CoordinatedIo, MessagesFromAPlainThreadArriveWholeAndInOrder) {
  constexpr uint64_t count = 20000;
  auto got = std::make_shared<std::vector<uint64_t>>();
  auto actor = sys.spawn(collector, got);
  helpers.push_back(actor);
  auto started = sched.clock().now();
  // The thread sends while the test thread runs the actor, so that the actor is woken from
  // outside both while it sleeps and while it runs.
  std::thread io{[actor] {
    for (uint64_t i = 0; i < count; ++i)
      caf::anon_send(actor, i);
  }};
  EXPECT_TRUE(drive([&] { return got->size() == count; }));
  io.join();
  ASSERT_EQ(got->size(), count);
  for (uint64_t i = 0; i < count; ++i)
    ASSERT_EQ((*got)[i], i);
  EXPECT_EQ(sched.clock().now(), started) << "virtual time moved while I/O was awaited";
}

class CoordinatedTimers : public CoordinatedIo {
protected:
  bool io_under_way() override { return false; }
};

TEST_F(CoordinatedTimers, IdleActorsJumpToTheirNextTimer) {
  auto got = std::make_shared<std::vector<uint64_t>>();
  auto actor = sys.spawn(collector, got);
  helpers.push_back(actor);
  auto started = sched.clock().now();
  auto real_start = std::chrono::steady_clock::now();
  sys.spawn([actor](caf::event_based_actor* self) {
    self->delayed_send(actor, 30s, uint64_t{2});
    self->delayed_send(actor, 10s, uint64_t{1});
  });
  EXPECT_TRUE(drive([&] { return got->size() == 2; }));
  EXPECT_EQ(*got, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(sched.clock().now() - started, 30s);
  EXPECT_LT(std::chrono::steady_clock::now() - real_start, 10s);
}

} // namespace
