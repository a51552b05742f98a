#pragma once

// Actors on CAF's test coordinator beside the plain threads they own for blocking I/O (the LLM
// endpoint's HTTP client, the store's RocksDB thread). Actors run on the test thread only, and
// their timers fire only when the test lets virtual time jump; the I/O stays real.
//
// The stock coordinator cannot take a message from such a thread: when the message wakes an idle
// actor, the thread pushes the actor onto the coordinator's job queue, which the test thread
// reads without a lock. Here the thread hands the actor over through a locked queue instead, and
// the test thread moves it onto the job queue when it next looks.

#include "messages/errors.hpp"
#include "messages/system_config.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <caf/abstract_actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

namespace opforge::testing {

class io_test_coordinator : public caf::scheduler::test_coordinator {
public:
  explicit io_test_coordinator(caf::actor_system& sys) : test_coordinator{sys} {}

  /// Moves the actors that other threads woke onto the job queue, in the order they woke.
  void take_handed_over() {
    std::deque<caf::resumable*> arrived;
    {
      std::lock_guard lock{mutex_};
      arrived.swap(handed_over_);
    }
    jobs.insert(jobs.end(), arrived.begin(), arrived.end());
  }

  /// Waits until another thread wakes an actor, or `deadline`; false when the deadline passed.
  bool wait_for_hand_over(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock{mutex_};
    return arrived_.wait_until(lock, deadline, [this] { return !handed_over_.empty(); });
  }

protected:
  void enqueue(caf::resumable* job) override {
    if (std::this_thread::get_id() == test_thread_) {
      test_coordinator::enqueue(job);
      return;
    }
    {
      std::lock_guard lock{mutex_};
      handed_over_.push_back(job);
    }
    arrived_.notify_one();
  }

  void stop() override {
    take_handed_over();
    test_coordinator::stop();
  }

private:
  // The system is built on the test thread, which alone runs actors.
  const std::thread::id test_thread_ = std::this_thread::get_id();
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<caf::resumable*> handed_over_;
};

struct io_coordinated_config : system_config {
  io_coordinated_config() : system_config{scheduling::deterministic} {
    module_factories.emplace_back([](caf::actor_system& sys) -> caf::actor_system::module* {
      return new io_test_coordinator(sys);
    });
  }
};

/// The reply to one request, filled in when it arrives.
template <class Reply>
struct awaited {
  bool arrived = false;
  std::optional<Reply> value;
  caf::error error;
};

class CoordinatedIo : public ::testing::Test {
protected:
  /// The longest a test waits for real I/O (a transfer, a RocksDB call) before it fails.
  static constexpr std::chrono::seconds io_limit{60};

  void TearDown() override {
    for (auto& helper : helpers)
      caf::anon_send_exit(helper, caf::exit_reason::user_shutdown);
    helpers.clear();
    sched.run();
  }

  /// Whether an I/O thread still owes an actor an answer. While it does, the test waits for the
  /// answer; once none is owed and every actor is idle, virtual time jumps to the next timer.
  /// By default the I/O threads are always waited for and no timer ever fires.
  virtual bool io_under_way() { return true; }

  /// Runs the actors until `done()` holds, taking what the I/O threads send as it comes. False
  /// (and a test failure) when nothing left could make it hold, or after `io_limit` of waiting.
  template <class Done>
  bool drive(Done done) {
    auto deadline = std::chrono::steady_clock::now() + io_limit;
    for (;;) {
      sched.take_handed_over();
      sched.run();
      if (done())
        return true;
      if (io_under_way()) {
        if (!sched.wait_for_hand_over(deadline)) {
          ADD_FAILURE() << "no I/O thread answered within " << io_limit.count() << " s";
          return false;
        }
      } else if (!sched.trigger_timeout()) {
        ADD_FAILURE() << "every actor is idle, no I/O is under way and no timer is left";
        return false;
      }
    }
  }

  /// Sends a request from an actor of its own; the result fills in once the actors run.
  template <class Reply, class Handle, class... Ts>
  std::shared_ptr<awaited<Reply>> send_request(const Handle& dest, Ts... xs) {
    auto out = std::make_shared<awaited<Reply>>();
    helpers.push_back(sys.spawn([=](caf::event_based_actor* requester) {
      requester->request(dest, caf::infinite, xs...)
          .then(
              [out](Reply& reply) {
                out->value = std::move(reply);
                out->arrived = true;
              },
              [out](caf::error& err) {
                out->error = std::move(err);
                out->arrived = true;
              });
    }));
    return out;
  }

  /// Drives the actors until `pending` is answered, and returns the answer.
  template <class Reply>
  awaited<Reply> wait(const std::shared_ptr<awaited<Reply>>& pending) {
    drive([&] { return pending->arrived; });
    return std::move(*pending);
  }

  /// Sends a request and returns its reply; an error reply fails the test.
  template <class Reply, class Handle, class... Ts>
  Reply ask(const Handle& dest, Ts... xs) {
    auto reply = wait(send_request<Reply>(dest, std::move(xs)...));
    if (reply.error)
      ADD_FAILURE() << render(reply.error);
    return reply.value.value_or(Reply{});
  }

  /// Drives the actors until `actor` has terminated: its state, and any thread it owns, is gone.
  template <class Handle>
  void wait_until_terminated(const Handle& actor) {
    auto gone = std::make_shared<bool>(false);
    caf::actor_cast<caf::abstract_actor*>(actor)->attach_functor([gone] { *gone = true; });
    drive([&] { return *gone; });
  }

  template <class Handle>
  void stop(const Handle& actor, caf::exit_reason reason = caf::exit_reason::user_shutdown) {
    caf::anon_send_exit(actor, reason);
    wait_until_terminated(actor);
  }

  io_coordinated_config cfg;
  caf::actor_system sys{cfg};
  io_test_coordinator& sched = dynamic_cast<io_test_coordinator&>(sys.scheduler());
  std::vector<caf::actor> helpers; // actors the test spawned to send or watch; stopped at the end
};

} // namespace opforge::testing
