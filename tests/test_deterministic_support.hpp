#pragma once

// Actors on CAF's test coordinator, where nothing runs and no time passes until the test says so,
// beside the real store (RocksDB) on a threaded actor system of its own. The coordinator's job
// queue belongs to the test thread alone: were the store's RocksDB thread to answer a coordinated
// actor, it would push onto that queue concurrently. So the coordinated actors write their
// checkpoints to a stand-in that holds them, and the test thread applies each one to the store
// and hands the acknowledgement back.

#include "actors/store/store.hpp"
#include "messages/actors.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/system_config.hpp"
#include "messages/write_batch.hpp"
#include "tests/test_store_support.hpp"

#include <deque>
#include <memory>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <gtest/gtest.h>

namespace opforge::testing {

/// Checkpoints of coordinated actors not yet applied, in arrival order. Touched only on the test
/// thread, where coordinated actors run.
using held_checkpoints = std::deque<write_batch>;

using held_checkpoint_actor = checkpoint_actor::extend<
    // The store's answer to the oldest checkpoint handed to the test thread: none once applied.
    caf::reacts_to<atom::io_done, caf::error>>;

struct held_checkpoint_state {
  std::shared_ptr<held_checkpoints> held;
  // The acknowledgements owed, oldest first. They are delivered from inside the actor: the
  // coordinator runs an actor on a worker that lives only while the actor runs.
  std::deque<caf::typed_response_promise<atom::ok>> owed;
  static inline const char* name = "held_checkpoints";
};

inline held_checkpoint_actor::behavior_type
held_checkpoint_writer(held_checkpoint_actor::stateful_pointer<held_checkpoint_state> self,
                       std::shared_ptr<held_checkpoints> held) {
  self->state.held = std::move(held);
  return {
      [self](atom::write, write_batch& batch) -> caf::result<atom::ok> {
        self->state.held->push_back(std::move(batch));
        return self->state.owed.emplace_back(self->make_response_promise<atom::ok>());
      },
      [self](atom::io_done, caf::error& outcome) {
        auto promise = std::move(self->state.owed.front());
        self->state.owed.pop_front();
        if (outcome)
          promise.deliver(std::move(outcome));
        else
          promise.deliver(atom::ok_v);
      },
  };
}

class DeterministicWithStore : public ::testing::Test {
protected:
  void SetUp() override {
    auto spawned = spawn_store(store_sys, dir.db(), std::make_shared<metrics>("test"));
    ASSERT_TRUE(spawned) << render(spawned.error());
    store = *spawned;
    checkpoints = sys.spawn(held_checkpoint_writer, held);
  }

  void TearDown() override {
    caf::anon_send_exit(checkpoints, caf::exit_reason::user_shutdown);
    sched.run();
    caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
  }

  /// Runs the coordinated actors until none has anything left to do: each delayed message is
  /// delivered as soon as everything else is idle (virtual time jumps to it), and each held
  /// checkpoint is applied to the store, in order, once the store has acknowledged the one before.
  void run_until_idle() {
    for (;;) {
      sched.run();
      if (!held->empty()) {
        apply_next_checkpoint();
        continue;
      }
      if (!sched.trigger_timeout())
        return;
    }
  }

  /// The reply to `pending`, a request of `self`, once every coordinated actor is idle.
  template <class Reply, class Handle>
  Reply reply_to(Handle& pending) {
    run_until_idle();
    Reply reply{};
    if (self->mailbox().empty()) {
      ADD_FAILURE() << "every actor is idle and the request has no reply";
      return reply;
    }
    pending.receive([&](Reply& value) { reply = std::move(value); },
                    [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return reply;
  }

  test::temp_dir dir;
  system_config store_cfg;
  caf::actor_system store_sys{store_cfg};
  caf::scoped_actor store_self{store_sys}; // reads the store, and applies held checkpoints
  store_actor store;
  system_config cfg{system_config::scheduling::deterministic};
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched =
      dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::scoped_actor self{sys};
  std::shared_ptr<held_checkpoints> held = std::make_shared<held_checkpoints>();
  held_checkpoint_actor checkpoints; // where coordinated actors write

private:
  void apply_next_checkpoint() {
    auto batch = std::move(held->front());
    held->pop_front();
    caf::error outcome;
    store_self->request(store, caf::infinite, atom::write_v, std::move(batch))
        .receive([](atom::ok) {}, [&](caf::error& err) { outcome = std::move(err); });
    caf::anon_send(checkpoints, atom::io_done_v, std::move(outcome));
  }
};

} // namespace opforge::testing
