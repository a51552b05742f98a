// The store actor on CAF's test coordinator over a real RocksDB in a temporary directory: the
// actors run on the test thread, the database calls on the store's own thread.

#include "actors/store/store.hpp"
#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "persistence/schema.hpp"
#include "tests/test_coordinated_io.hpp"
#include "tests/test_store_support.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using opforge::test::opforge_code;
using ::testing::HasSubstr;

namespace {

class StoreActorTest : public opforge::testing::CoordinatedIo {
protected:
  void SetUp() override {
    auto spawned = spawn_store(sys, dir_.db(), telemetry_);
    ASSERT_TRUE(spawned) << render(spawned.error());
    store_ = *spawned;
  }

  void TearDown() override {
    if (store_)
      stop(store_);
    CoordinatedIo::TearDown();
  }

  /// Sends `request` and returns the reply; an error reply fails the test.
  template <class Reply, class... Ts>
  Reply ask(Ts... request) {
    return CoordinatedIo::ask<Reply>(store_, std::move(request)...);
  }

  /// Writes `batch` and returns the error it is answered with.
  caf::error write_error(write_batch batch) {
    auto reply = wait(send_request<atom::ok>(store_, atom::write_v, std::move(batch)));
    if (!reply.error)
      ADD_FAILURE() << "the write succeeded";
    return reply.error;
  }

  /// Spawns an actor that, once the actors run, sends the store what `requests` sends.
  template <class Requests>
  void spawn_requester(Requests requests) {
    helpers.push_back(sys.spawn([requests, store = store_](caf::event_based_actor* requester) {
      requests(requester, store);
    }));
  }

  test::temp_dir dir_;
  std::shared_ptr<metrics> telemetry_ = std::make_shared<metrics>("test");
  store_actor store_;
};

write_batch put(family f, std::string key, std::string value) {
  return write_batch{{{f, std::move(key), std::move(value)}}};
}

TEST_F(StoreActorTest, GetFindsWhatWasWritten) {
  ask<atom::ok>(atom::write_v, put(family::sessions, "s1", "record"));
  EXPECT_EQ(ask<stored_value>(atom::get_v, family::sessions, std::string{"s1"}).value, "record");
  EXPECT_EQ(ask<stored_value>(atom::get_v, family::sessions, std::string{"s2"}).value,
            std::nullopt);
}

// One requester issues every write before any reply arrives: the replies come back in the order
// of the requests, and the database holds the last write to a shared key.
TEST_F(StoreActorTest, WritesAreAppliedAndAnsweredInArrivalOrder) {
  constexpr uint64_t writes = 200;
  auto answered = std::make_shared<std::vector<uint64_t>>();
  spawn_requester([=](caf::event_based_actor* requester, const store_actor& store) {
    for (uint64_t i = 0; i < writes; ++i) {
      write_batch batch{{{family::campaigns, "latest", std::to_string(i)},
                         {family::events, event_key("order", i), std::to_string(i)}},
                        i % 2 == 0};
      requester->request(store, caf::infinite, atom::write_v, std::move(batch))
          .then([=](atom::ok) { answered->push_back(i); },
                [=](const caf::error& err) {
                  answered->push_back(i);
                  ADD_FAILURE() << "write " << i << ": " << render(err);
                });
    }
  });
  drive([&] { return answered->size() == writes; });
  std::vector<uint64_t> in_order(writes);
  for (uint64_t i = 0; i < writes; ++i)
    in_order[i] = i;
  EXPECT_EQ(*answered, in_order);
  EXPECT_EQ(ask<stored_value>(atom::get_v, family::campaigns, std::string{"latest"}).value,
            std::to_string(writes - 1));
  auto events =
      ask<std::vector<key_value>>(atom::scan_v, family::events, prefix_of("order"), uint64_t{1000});
  ASSERT_EQ(events.size(), writes);
  for (uint64_t i = 0; i < writes; ++i)
    EXPECT_EQ(events[i].value, std::to_string(i));
}

TEST_F(StoreActorTest, ScanHonoursPrefixAndLimit) {
  ask<atom::ok>(atom::write_v, write_batch{{{family::kernels, "op/c", "3"},
                                            {family::kernels, "op/a", "1"},
                                            {family::kernels, "op/b", "2"},
                                            {family::kernels, "other", "x"}}});
  auto first_two =
      ask<std::vector<key_value>>(atom::scan_v, family::kernels, std::string{"op/"}, uint64_t{2});
  ASSERT_EQ(first_two.size(), 2u);
  EXPECT_EQ(first_two[0].key, "op/a");
  EXPECT_EQ(first_two[1].key, "op/b");
  EXPECT_EQ(first_two[1].value, "2");
  EXPECT_TRUE(
      ask<std::vector<key_value>>(atom::scan_v, family::kernels, std::string{"op/"}, uint64_t{0})
          .empty());
}

TEST_F(StoreActorTest, StatusReportsTheDatabaseAndItsWrites) {
  ask<atom::ok>(atom::write_v, put(family::kernels, "k1", "kernel"));
  ask<atom::ok>(
      atom::write_v,
      write_batch{{{family::kernels, "k2", "kernel"}, {family::validations, "k2", "pass"}}, true});
  auto status = ask<store_status>(atom::status_v);
  EXPECT_EQ(status.path, dir_.db().string());
  EXPECT_EQ(status.schema_version, current_schema_version);
  EXPECT_EQ(status.batches_written, 2u);
  EXPECT_EQ(status.last_error, "");
  ASSERT_EQ(status.families.size(), all_families.size());
  EXPECT_EQ(status.families[index_of(family::kernels)].family, "kernels");
  EXPECT_EQ(status.families[index_of(family::kernels)].estimated_keys, 2u);
  EXPECT_EQ(status.families[index_of(family::validations)].estimated_keys, 1u);
  EXPECT_EQ(status.families[index_of(family::campaigns)].estimated_keys, 0u);
}

TEST_F(StoreActorTest, EveryBatchIsTimed) {
  for (auto key : {"j0", "j1", "j2"})
    ask<atom::ok>(atom::write_v, put(family::sessions, key, "queued"));
  EXPECT_EQ(telemetry_->store_write_latency().Collect().histogram.sample_count, 3u);
  // Reads are not writes: they add no hand-back.
  ask<stored_value>(atom::get_v, family::sessions, std::string{"j0"});
  EXPECT_EQ(telemetry_->store_handback().Collect().histogram.sample_count, 3u);
}

TEST_F(StoreActorTest, FailuresReachTheRequesterAndStatus) {
  auto err = write_error(put(static_cast<family>(200), "k", "v"));
  EXPECT_EQ(opforge_code(err), errc::request_invalid);
  EXPECT_THAT(render(err), HasSubstr("unknown column family number 200"));
  auto status = ask<store_status>(atom::status_v);
  EXPECT_EQ(status.batches_written, 0u);
  EXPECT_THAT(status.last_error, HasSubstr("unknown column family number 200"));
  ask<atom::ok>(atom::write_v, put(family::sessions, "j", "still serving"));
}

TEST_F(StoreActorTest, ShutdownServesQueuedWritesThenClosesTheDatabase) {
  caf::anon_send(store_, atom::write_v,
                 write_batch{{{family::sessions, "queued", "before shutdown"}}});
  ask<atom::ok>(atom::shutdown_v);
  wait_until_terminated(store_);
  auto reopened = open_rocksdb_store(dir_.db());
  ASSERT_TRUE(reopened) << render(reopened.error());
  auto value = (*reopened)->get(family::sessions, "queued");
  ASSERT_TRUE(value);
  EXPECT_EQ(*value, "before shutdown");
}

TEST_F(StoreActorTest, RequestsAfterShutdownAreRefused) {
  auto answered = std::make_shared<std::optional<caf::error>>();
  spawn_requester([=](caf::event_based_actor* requester, const store_actor& store) {
    requester->request(store, caf::infinite, atom::shutdown_v).then([](atom::ok) {});
    requester->request(store, caf::infinite, atom::write_v, put(family::sessions, "late", "v"))
        .then([=](atom::ok) { *answered = caf::error{}; },
              [=](const caf::error& err) { *answered = err; });
  });
  drive([&] { return answered->has_value(); });
  auto err = answered->value_or(caf::error{});
  EXPECT_EQ(opforge_code(err), errc::store_io_failed);
  EXPECT_THAT(render(err), HasSubstr(dir_.db().string() + ": the store is shutting down"));
}

TEST_F(StoreActorTest, TerminatingWithoutShutdownStillClosesTheDatabase) {
  ask<atom::ok>(atom::write_v, put(family::sessions, "j", "v"));
  stop(store_, caf::exit_reason::kill);
  store_ = nullptr;
  auto reopened = open_rocksdb_store(dir_.db());
  EXPECT_TRUE(reopened) << render(reopened.error());
}

// Requests still queued when the store is killed get an answer, an error if they were not served.
TEST_F(StoreActorTest, EveryRequestIsAnsweredWhenTheStoreIsKilled) {
  constexpr int writes = 100;
  auto answers = std::make_shared<int>(0);
  spawn_requester([=](caf::event_based_actor* requester, const store_actor& store) {
    for (int i = 0; i < writes; ++i)
      requester->request(store, caf::infinite, atom::write_v, put(family::sessions, "j", "v"))
          .then([=](atom::ok) { ++*answers; }, [=](const caf::error&) { ++*answers; });
    caf::anon_send_exit(store, caf::exit_reason::kill);
  });
  drive([&] { return *answers == writes; });
  EXPECT_EQ(*answers, writes);
}

TEST_F(StoreActorTest, SpawnReportsOpenErrors) {
  auto second = spawn_store(sys, dir_.db(), telemetry_);
  ASSERT_FALSE(second);
  EXPECT_EQ(opforge_code(second.error()), errc::store_open_failed);
  EXPECT_THAT(render(second.error()), HasSubstr("locked"));
}

TEST_F(StoreActorTest, ScanContinuesAfterAKey) {
  ask<atom::ok>(atom::write_v, write_batch{{{family::validations, "op/c", "3"},
                                            {family::validations, "op/a", "1"},
                                            {family::validations, "op/b", "2"},
                                            {family::validations, "other", "x"}}});
  auto keys = [&](std::string after, uint64_t limit) {
    std::vector<std::string> out;
    for (auto& kv : ask<std::vector<key_value>>(atom::scan_v, family::validations,
                                                std::string{"op/"}, std::move(after), limit))
      out.push_back(kv.key);
    return out;
  };
  EXPECT_EQ(keys("", 2), (std::vector<std::string>{"op/a", "op/b"}));
  EXPECT_EQ(keys("op/b", 2), (std::vector<std::string>{"op/c"}));
  EXPECT_EQ(keys("op/a", 10), (std::vector<std::string>{"op/b", "op/c"}));
  EXPECT_EQ(keys("op/bb", 10), (std::vector<std::string>{"op/c"})); // need not be a key
  EXPECT_EQ(keys("o", 10), (std::vector<std::string>{"op/a", "op/b", "op/c"}));
  EXPECT_TRUE(keys("op/c", 10).empty());
}

// Synced writes that arrive while the disk syncs share the next sync: far fewer RocksDB writes
// than batches, each batch still answered in order and applied.
TEST_F(StoreActorTest, ConcurrentWritesShareGroupCommits) {
  constexpr uint64_t writes = 200;
  auto answered = std::make_shared<std::vector<uint64_t>>();
  spawn_requester([=](caf::event_based_actor* requester, const store_actor& store) {
    for (uint64_t i = 0; i < writes; ++i)
      requester
          ->request(store, caf::infinite, atom::write_v,
                    write_batch{{{family::events, event_key("group", i), "e"}}, true})
          .then([=](atom::ok) { answered->push_back(i); });
  });
  drive([&] { return answered->size() == writes; });
  ASSERT_EQ(answered->size(), writes);
  EXPECT_TRUE(std::is_sorted(answered->begin(), answered->end()));
  auto groups = telemetry_->store_write_latency().Collect().histogram.sample_count;
  EXPECT_LT(groups, writes / 2);
  // The breakdown: every batch waited for its group and was handed back once; the groups'
  // sizes add up to the batches.
  auto sizes = telemetry_->store_group_batches().Collect().histogram;
  EXPECT_EQ(sizes.sample_count, groups);
  EXPECT_EQ(sizes.sample_sum, static_cast<double>(writes));
  EXPECT_EQ(telemetry_->store_queue_wait().Collect().histogram.sample_count, writes);
  EXPECT_EQ(telemetry_->store_handback().Collect().histogram.sample_count, writes);
  EXPECT_EQ(ask<store_status>(atom::status_v).batches_written, writes);
  EXPECT_EQ(
      ask<std::vector<key_value>>(atom::scan_v, family::events, prefix_of("group"), uint64_t{1000})
          .size(),
      writes);
}

} // namespace
