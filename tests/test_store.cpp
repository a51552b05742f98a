#include "actors/store/store.hpp"
#include "messages/system_config.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "persistence/schema.hpp"
#include "tests/test_store_support.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/message.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>

using namespace opforge;
using opforge::test::opforge_code;
using testing::HasSubstr;

namespace {

using entries = std::vector<std::pair<std::string, std::string>>;

class StoreTest : public ::testing::Test {
protected:
  /// Opens the database in `dir_.db()`; a failure fails the test.
  std::unique_ptr<store> open() {
    auto db = open_rocksdb_store(dir_.db());
    EXPECT_TRUE(db) << render(db.error());
    return db ? std::move(*db) : nullptr;
  }

  static entries scan_all(store& db, family f, std::string_view prefix) {
    entries found;
    auto err = db.scan(f, prefix, [&](std::string_view key, std::string_view value) {
      found.emplace_back(key, value);
      return true;
    });
    EXPECT_FALSE(err) << render(err);
    return found;
  }

  static std::optional<std::string> get(store& db, family f, std::string_view key) {
    auto value = db.get(f, key);
    EXPECT_TRUE(value) << render(value.error());
    return value ? *value : std::nullopt;
  }

  /// Creates a database by hand with RocksDB, as an older build or another program would have,
  /// with `contents` in the families it names.
  void build_by_hand(const std::vector<std::string>& families,
                     const std::map<std::string, entries>& contents) {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, dir_.db().string(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db{raw};
    for (const auto& name : families) {
      rocksdb::ColumnFamilyHandle* handle = nullptr;
      ASSERT_TRUE(db->CreateColumnFamily(rocksdb::ColumnFamilyOptions{}, name, &handle).ok());
      if (auto content = contents.find(name); content != contents.end())
        for (const auto& [key, value] : content->second)
          ASSERT_TRUE(db->Put(rocksdb::WriteOptions{}, handle, key, value).ok());
      ASSERT_TRUE(db->DestroyColumnFamilyHandle(handle).ok());
    }
    ASSERT_TRUE(db->Close().ok());
  }

  /// Stores `version` as the schema version of a new database and returns the error of opening
  /// it again (none if it opens).
  caf::error reopen_with_schema_version(const std::string& version) {
    auto db = open();
    if (!db)
      return caf::make_error(errc::store_open_failed, "the first open failed");
    auto err = db->write({{{family::meta, std::string{schema_version_key}, version}}, true});
    EXPECT_FALSE(err) << render(err);
    db.reset();
    auto reopened = open_rocksdb_store(dir_.db());
    return reopened ? caf::error{} : reopened.error();
  }

  static std::vector<std::string> names_of_all_families() {
    std::vector<std::string> names;
    for (auto f : all_families)
      names.emplace_back(to_string(f));
    return names;
  }

  /// The families of a database the first builds made: today's and the retired ones.
  static std::vector<std::string> names_of_version_0() {
    auto names = names_of_all_families();
    names.insert(names.end(), retired_families.begin(), retired_families.end());
    return names;
  }

  std::vector<std::string> families_on_disk() const {
    std::vector<std::string> names;
    EXPECT_TRUE(rocksdb::DB::ListColumnFamilies({}, dir_.db().string(), &names).ok());
    return names;
  }

  test::temp_dir dir_;
};

// -- keys ----------------------------------------------------------------------------------------

TEST(StoreKeys, EventKeysSortBySequenceNumberNotByDigits) {
  std::vector<uint64_t> seqs{0, 1, 9, 10, 255, 256, 65536, uint64_t{1} << 40, UINT64_MAX};
  for (size_t i = 1; i < seqs.size(); ++i)
    EXPECT_LT(event_key("s", seqs[i - 1]), event_key("s", seqs[i])) << seqs[i];
}

TEST(StoreKeys, SessionPrefixesDoNotOverlap) {
  EXPECT_LT(event_key("a", UINT64_MAX), event_key("ab", 0));
  EXPECT_FALSE(event_key("ab", 1).starts_with(prefix_of("a")));
  EXPECT_TRUE(event_key("a", 1).starts_with(prefix_of("a")));
  EXPECT_FALSE(validation_key("kernel1", "toolchain").starts_with(prefix_of("kernel")));
  EXPECT_TRUE(validation_key("kernel", "toolchain").starts_with(prefix_of("kernel")));
}

TEST(StoreKeys, EventSequenceRoundTrips) {
  for (uint64_t seq : {uint64_t{0}, uint64_t{10}, uint64_t{0x0102030405060708}, UINT64_MAX})
    EXPECT_EQ(event_seq(event_key("session-7", seq)), seq);
  EXPECT_EQ(event_seq("session-7/10"), std::nullopt);
  EXPECT_EQ(event_seq(""), std::nullopt);
}

TEST(StoreKeys, PrintableEscapesBinaryBytes) {
  EXPECT_EQ(printable(event_key("s", 258)), "s\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x01\\x02");
  EXPECT_EQ(printable("plain key"), "plain key");
}

// -- messages ------------------------------------------------------------------------------------

// What CAF does to a batch that crosses a node boundary.
TEST(StoreMessages, WriteBatchSurvivesSerializationWithPutsAndDeletes) {
  system_config cfg;
  caf::actor_system sys{cfg};
  write_batch batch{{{family::events, event_key("s", 3), std::string{"\0\x01value", 7}},
                     {family::kernels, "gone", std::nullopt}},
                    true};
  auto original = caf::make_message(batch);
  std::vector<char> buffer;
  caf::binary_serializer sink{sys, buffer};
  ASSERT_FALSE(original.save(sink));
  caf::message loaded;
  caf::binary_deserializer source{sys, buffer};
  ASSERT_FALSE(loaded.load(source));
  ASSERT_TRUE(loaded.match_elements<write_batch>());
  const auto& copy = loaded.get_as<write_batch>(0);
  ASSERT_EQ(copy.ops.size(), 2u);
  EXPECT_EQ(copy.ops[0].family, family::events);
  EXPECT_EQ(copy.ops[0].key, event_key("s", 3));
  EXPECT_EQ(copy.ops[0].value, std::string("\0\x01value", 7));
  EXPECT_EQ(copy.ops[1].family, family::kernels);
  EXPECT_EQ(copy.ops[1].value, std::nullopt);
  EXPECT_TRUE(copy.sync);
  EXPECT_THAT(to_string(original), HasSubstr("kernels"));
}

TEST(StoreMessages, FamiliesRoundTripThroughTheirNames) {
  for (auto f : all_families)
    EXPECT_EQ(from_string<family>(to_string(f)), f);
  EXPECT_EQ(from_string<family>("default"), std::nullopt);
}

// -- reading and writing -------------------------------------------------------------------------

TEST_F(StoreTest, WriteGetAndDelete) {
  auto db = open();
  ASSERT_TRUE(db);
  EXPECT_EQ(get(*db, family::sessions, "s1"), std::nullopt);
  ASSERT_FALSE(db->write({{{family::sessions, "s1", "record"}}}));
  EXPECT_EQ(get(*db, family::sessions, "s1"), "record");
  EXPECT_EQ(get(*db, family::campaigns, "s1"), std::nullopt) << "families are separate";
  ASSERT_FALSE(db->write({{{family::sessions, "s1", std::nullopt}}}));
  EXPECT_EQ(get(*db, family::sessions, "s1"), std::nullopt);
}

TEST_F(StoreTest, ScanVisitsThePrefixInKeyOrderAndCanStop) {
  auto db = open();
  ASSERT_TRUE(db);
  ASSERT_FALSE(db->write({{{family::kernels, "op/mul", "3"},
                           {family::kernels, "op/add", "1"},
                           {family::kernels, "oq/zzz", "x"},
                           {family::kernels, "op/div", "2"}}}));
  EXPECT_EQ(scan_all(*db, family::kernels, "op/"),
            (entries{{"op/add", "1"}, {"op/div", "2"}, {"op/mul", "3"}}));
  std::vector<std::string> visited;
  ASSERT_FALSE(db->scan(family::kernels, "op/", [&](std::string_view key, std::string_view) {
    visited.emplace_back(key);
    return visited.size() < 2;
  }));
  EXPECT_EQ(visited, (std::vector<std::string>{"op/add", "op/div"}));
}

TEST_F(StoreTest, EventsOfASessionScanInSequenceOrder) {
  auto db = open();
  ASSERT_TRUE(db);
  write_batch batch;
  for (uint64_t seq : {10, 9, 256, 1, 100000})
    batch.ops.push_back({family::events, event_key("a", seq), std::to_string(seq)});
  batch.ops.push_back({family::events, event_key("ab", 5), "other session"});
  ASSERT_FALSE(db->write(batch));
  std::vector<uint64_t> seqs;
  for (const auto& [key, value] : scan_all(*db, family::events, prefix_of("a"))) {
    seqs.push_back(event_seq(key).value_or(UINT64_MAX));
    EXPECT_EQ(value, std::to_string(seqs.back()));
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 9, 10, 256, 100000}));
}

TEST_F(StoreTest, BatchWithAnUnknownFamilyWritesNothing) {
  auto db = open();
  ASSERT_TRUE(db);
  auto err = db->write({{{family::sessions, "s1", "record"},
                         {family::events, event_key("s1", 1), "event"},
                         {static_cast<family>(42), "k", "v"}}});
  EXPECT_EQ(opforge_code(err), errc::request_invalid);
  EXPECT_THAT(render(err), HasSubstr("unknown column family number 42"));
  EXPECT_EQ(get(*db, family::sessions, "s1"), std::nullopt);
  EXPECT_EQ(get(*db, family::events, event_key("s1", 1)), std::nullopt);
  EXPECT_EQ(opforge_code(db->get(static_cast<family>(8), "k").error()), errc::request_invalid);
}

TEST_F(StoreTest, BatchAcrossFamiliesIsVisibleWhole) {
  auto db = open();
  ASSERT_TRUE(db);
  ASSERT_FALSE(db->write({{{family::sessions, "s1", "old"}}}));
  ASSERT_FALSE(db->write({{{family::sessions, "s1", "new"},
                           {family::events, event_key("s1", 1), "transition"},
                           {family::kernels, "hash-1", "kernel"},
                           {family::sessions, "s0", std::nullopt}},
                          true}));
  EXPECT_EQ(get(*db, family::sessions, "s1"), "new");
  EXPECT_EQ(get(*db, family::events, event_key("s1", 1)), "transition");
  EXPECT_EQ(get(*db, family::kernels, "hash-1"), "kernel");
}

TEST_F(StoreTest, ReopenFindsWhatWasWritten) {
  {
    auto db = open();
    ASSERT_TRUE(db);
    ASSERT_FALSE(db->write({{{family::kernels, "hash-1", "kernel"}}, false}));
    ASSERT_FALSE(
        db->write({{{family::validations, validation_key("hash-1", "tc"), "pass"}}, true}));
    ASSERT_FALSE(db->close());
  }
  auto db = open();
  ASSERT_TRUE(db);
  EXPECT_EQ(get(*db, family::kernels, "hash-1"), "kernel");
  EXPECT_EQ(get(*db, family::validations, validation_key("hash-1", "tc")), "pass");
}

TEST_F(StoreTest, StatsCountKeysPerFamily) {
  auto db = open();
  ASSERT_TRUE(db);
  ASSERT_FALSE(db->write({{{family::validations, "v1", "a"}, {family::validations, "v2", "b"}}}));
  auto validations = db->stats(family::validations);
  ASSERT_TRUE(validations) << render(validations.error());
  EXPECT_EQ(validations->family, "validations");
  EXPECT_EQ(validations->estimated_keys, 2u);
  EXPECT_GT(validations->estimated_bytes, 0u);
  auto kernels = db->stats(family::kernels);
  ASSERT_TRUE(kernels);
  EXPECT_EQ(kernels->estimated_keys, 0u);
}

TEST_F(StoreTest, ClosedStoreRefusesCallsAndClosesOnce) {
  auto db = open();
  ASSERT_TRUE(db);
  ASSERT_FALSE(db->close());
  EXPECT_FALSE(db->close());
  auto err = db->write({{{family::sessions, "s", "v"}}});
  EXPECT_EQ(opforge_code(err), errc::store_io_failed);
  EXPECT_THAT(render(err), HasSubstr("closed"));
}

// -- opening -------------------------------------------------------------------------------------

TEST_F(StoreTest, NewDatabaseHasEveryFamilyAndTheCurrentSchemaVersion) {
  {
    auto db = open();
    ASSERT_TRUE(db);
    EXPECT_EQ(db->schema_version(), current_schema_version);
    EXPECT_EQ(get(*db, family::meta, schema_version_key), std::to_string(current_schema_version));
    EXPECT_EQ(db->path(), dir_.db());
  }
  std::vector<std::string> names;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies({}, dir_.db().string(), &names).ok());
  auto expected = names_of_all_families();
  expected.insert(expected.begin(), rocksdb::kDefaultColumnFamilyName);
  EXPECT_EQ(names, expected);
}

TEST_F(StoreTest, MigrationRegistryCoversEveryOlderVersion) {
  auto steps = migrations();
  ASSERT_EQ(steps.size(), current_schema_version);
  for (uint32_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].from, i);
    EXPECT_FALSE(steps[i].summary.empty());
  }
}

TEST_F(StoreTest, MigratesAHandBuiltVersion0Database) {
  build_by_hand(
      names_of_version_0(),
      {{"events", {{"s1/9", "nine"}, {"s1/10", "ten"}, {"s2/1", "one"}, {"a/b/3", "slashed id"}}}});
  auto db = open();
  ASSERT_TRUE(db);
  EXPECT_EQ(db->schema_version(), 1u);
  EXPECT_EQ(get(*db, family::meta, schema_version_key), "1");
  EXPECT_EQ(scan_all(*db, family::events, prefix_of("s1")),
            (entries{{event_key("s1", 9), "nine"}, {event_key("s1", 10), "ten"}}));
  EXPECT_EQ(get(*db, family::events, event_key("s2", 1)), "one");
  EXPECT_EQ(get(*db, family::events, event_key("a/b", 3)), "slashed id");
  EXPECT_EQ(get(*db, family::events, "s1/9"), std::nullopt);
  EXPECT_EQ(scan_all(*db, family::events, "").size(), 4u);
}

TEST_F(StoreTest, FailedMigrationLeavesTheOldVersionAndSaysWhy) {
  build_by_hand(names_of_version_0(), {{"events", {{"s1/9", "nine"}, {"s1/nine", "bad"}}}});
  auto failed = open_rocksdb_store(dir_.db());
  ASSERT_FALSE(failed);
  EXPECT_EQ(opforge_code(failed.error()), errc::store_corrupt);
  EXPECT_THAT(render(failed.error()), HasSubstr("migration from schema version 0"));
  EXPECT_THAT(render(failed.error()), HasSubstr("key 's1/nine'"));
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors{
      {rocksdb::kDefaultColumnFamilyName, {}}, {"meta", {}}, {"events", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(
      rocksdb::DB::OpenForReadOnly({}, dir_.db().string(), descriptors, &handles, &raw).ok());
  std::unique_ptr<rocksdb::DB> untouched{raw};
  std::string value;
  EXPECT_TRUE(untouched->Get({}, handles[1], schema_version_key, &value).IsNotFound());
  EXPECT_TRUE(untouched->Get({}, handles[2], "s1/9", &value).ok());
  EXPECT_TRUE(untouched->Get({}, handles[2], event_key("s1", 9), &value).IsNotFound());
  for (auto* handle : handles)
    ASSERT_TRUE(untouched->DestroyColumnFamilyHandle(handle).ok());
}

TEST_F(StoreTest, OpensADatabaseThatLacksNewerFamilies) {
  build_by_hand({"meta", "sessions", "events"}, {});
  auto db = open();
  ASSERT_TRUE(db);
  ASSERT_FALSE(db->write({{{family::kernels, "k", "v"}}}));
  EXPECT_EQ(get(*db, family::kernels, "k"), "v");
}

TEST_F(StoreTest, DropsTheRetiredFamiliesOfAnOlderDatabase) {
  build_by_hand(names_of_version_0(), {{"sessions", {{"s1", "record"}}}});
  {
    auto db = open();
    ASSERT_TRUE(db);
    EXPECT_EQ(get(*db, family::sessions, "s1"), "record");
  }
  auto expected = names_of_all_families();
  expected.insert(expected.begin(), rocksdb::kDefaultColumnFamilyName);
  EXPECT_EQ(families_on_disk(), expected);
}

TEST_F(StoreTest, RefusesARetiredFamilyThatHoldsData) {
  build_by_hand(names_of_version_0(), {{"jobs", {{"job-1", "queued"}}}});
  auto refused = open_rocksdb_store(dir_.db());
  ASSERT_FALSE(refused);
  EXPECT_EQ(opforge_code(refused.error()), errc::store_schema_mismatch);
  EXPECT_THAT(render(refused.error()), HasSubstr("column family 'jobs' holds data"));
  auto names = families_on_disk();
  EXPECT_NE(std::find(names.begin(), names.end(), "jobs"), names.end());
}

TEST_F(StoreTest, RefusesANewerSchemaNamingBothVersions) {
  auto refused = reopen_with_schema_version("7");
  EXPECT_EQ(opforge_code(refused), errc::store_schema_mismatch);
  EXPECT_EQ(render(refused),
            "store_schema_mismatch: " + dir_.db().string() +
                ": the database has schema version 7, newer than version 1 of this opforge "
                "build: run a newer opforge");
}

TEST_F(StoreTest, RefusesAnUnreadableSchemaVersion) {
  auto refused = reopen_with_schema_version("v1");
  EXPECT_EQ(opforge_code(refused), errc::store_corrupt);
  EXPECT_THAT(render(refused), HasSubstr("got 'v1'"));
}

TEST_F(StoreTest, RefusesAnUnknownColumnFamilyByName) {
  auto names = names_of_all_families();
  names.push_back("shadows");
  build_by_hand(names, {});
  auto refused = open_rocksdb_store(dir_.db());
  ASSERT_FALSE(refused);
  EXPECT_EQ(opforge_code(refused.error()), errc::store_schema_mismatch);
  EXPECT_THAT(render(refused.error()), HasSubstr("unknown column family 'shadows'"));
  EXPECT_THAT(render(refused.error()), HasSubstr(dir_.db().string()));
}

TEST_F(StoreTest, SecondOpenInTheSameProcessSaysTheDatabaseIsLocked) {
  auto db = open();
  ASSERT_TRUE(db);
  auto second = open_rocksdb_store(dir_.db());
  ASSERT_FALSE(second);
  EXPECT_EQ(opforge_code(second.error()), errc::store_open_failed);
  EXPECT_THAT(render(second.error()), HasSubstr("the database is locked"));
  ASSERT_FALSE(db->close());
  EXPECT_TRUE(open()) << "closing releases the lock";
}

TEST_F(StoreTest, UnusableDirectoryIsAnOpenError) {
  auto blocked = dir_.path() / "plain";
  { std::ofstream{blocked} << "not a directory"; }
  auto refused = open_rocksdb_store(blocked / "db");
  ASSERT_FALSE(refused);
  EXPECT_EQ(opforge_code(refused.error()), errc::store_open_failed);
  EXPECT_THAT(render(refused.error()), HasSubstr(blocked.string()));
}

} // namespace
