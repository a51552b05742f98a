// The library actor over the real store actor and RocksDB: adding kernels (the kernel and its
// first validation in one batch), versions, validations per toolchain, bundles, and the
// opforge_library_kernels gauge.

// CAF 0.17 deserializes a vector's items into a default-initialized local, which GCC takes for
// uninitialized when the item is an enum (library_kernel's dtypes).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "actors/library/library.hpp"
#include "actors/store/store.hpp"
#include "messages/errors.hpp"
#include "messages/system_config.hpp"
#include "persistence/keys.hpp"
#include "tests/test_store_support.hpp"

#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

using namespace opforge;
using opforge::test::opforge_code;
using testing::HasSubstr;

namespace {

contract::toolchain_proof proof(const std::string& fingerprint, contract::outcome outcome,
                                int64_t at_ms) {
  return {.fingerprint = fingerprint,
          .device_kind = "cuda",
          .toolchain = {{"triton", fingerprint == "f1" ? "3.6.0" : "3.7.0"}},
          .outcome = outcome,
          .tests_run = 9,
          .tests_passed = outcome == contract::outcome::pass ? 9 : 4,
          .validated_at_ms = at_ms};
}

contract::library_kernel imported(const std::string& op, const std::string& body,
                                  contract::toolchain_proof first) {
  return {.op = op,
          .wrapper = op + "_wrapper",
          .source = "def " + op + "_wrapper(x):\n    return " + body + "\n",
          .dtypes = {contract::dtype::float32},
          .aten_overloads = {"aten::" + op},
          .provenance = {{"origin", "imported:test"}},
          .proofs = {std::move(first)}};
}

class LibraryActor : public ::testing::Test {
protected:
  void SetUp() override {
    auto spawned = spawn_store(sys_, dir_.db(), telemetry_);
    ASSERT_TRUE(spawned) << render(spawned.error());
    store_ = *spawned;
    library_ = sys_.spawn(library, store_, telemetry_, std::string{"9.9.9"});
  }

  void TearDown() override {
    caf::anon_send_exit(library_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(store_, caf::exit_reason::user_shutdown);
  }

  /// The reply to `request`; an error fails the test.
  template <class Reply, class... Ts>
  Reply ask(Ts... request) {
    Reply reply{};
    self_->request(library_, caf::infinite, std::move(request)...)
        .receive([&](Reply& value) { reply = std::move(value); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return reply;
  }

  caf::error refusal(contract::library_kernel kernel) {
    caf::error result;
    self_->request(library_, caf::infinite, atom::add_v, std::move(kernel))
        .receive([&](kernel_version&) { ADD_FAILURE() << "the kernel was added"; },
                 [&](const caf::error& err) { result = err; });
    return result;
  }

  std::optional<std::string> stored(family f, const std::string& key) {
    std::optional<std::string> value;
    self_->request(store_, caf::infinite, atom::get_v, f, key)
        .receive([&](stored_value& v) { value = std::move(v.value); },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
    return value;
  }

  std::string scrape() const {
    return prometheus::TextSerializer{}.Serialize(telemetry_->registry()->Collect());
  }

  test::temp_dir dir_;
  system_config cfg_;
  caf::actor_system sys_{cfg_};
  caf::scoped_actor self_{sys_};
  std::shared_ptr<metrics> telemetry_ = std::make_shared<metrics>("test");
  store_actor store_;
  library_actor library_;
};

} // namespace

TEST_F(LibraryActor, AnAddedKernelIsStoredWithItsFirstValidationAndCounted) {
  using contract::outcome;
  auto added = ask<kernel_version>(atom::add_v,
                                   imported("abs", "x.abs()", proof("f1", outcome::pass, 1000)));
  EXPECT_EQ(added.version, 1u);
  EXPECT_TRUE(added.current);
  EXPECT_EQ(added.device_kind, "cuda");
  EXPECT_EQ(added.accepted_at_ms, 1000);
  EXPECT_EQ(added.kernel.provenance.at("origin"), "imported:test");
  EXPECT_EQ(added.kernel.aten_overloads, std::vector<std::string>{"aten::abs"});
  ASSERT_EQ(added.kernel.proofs.size(), 1u);
  EXPECT_EQ(added.kernel.proofs[0], proof("f1", outcome::pass, 1000));

  auto kernel = stored(family::kernels, kernel_key("abs", added.kernel.source));
  ASSERT_TRUE(kernel);
  auto record = decode_kernel(*kernel);
  ASSERT_TRUE(record) << render(record.error());
  EXPECT_EQ(record->origin, "imported:test");
  EXPECT_EQ(record->toolchain_versions, (std::map<std::string, std::string>{{"triton", "3.6.0"}}));
  auto validation = stored(family::validations, validation_key(added.kernel.hash, "f1"));
  ASSERT_TRUE(validation);
  EXPECT_EQ(decode_proof(*validation).value(), proof("f1", outcome::pass, 1000));
  EXPECT_THAT(scrape(), HasSubstr("opforge_library_kernels{device_kind=\"cuda\"} 1"));

  // The same source again is the same kernel: counted once.
  ask<kernel_version>(atom::add_v, imported("abs", "x.abs()", proof("f1", outcome::pass, 1000)));
  EXPECT_THAT(scrape(), HasSubstr("opforge_library_kernels{device_kind=\"cuda\"} 1"));
}

TEST_F(LibraryActor, AKernelWithoutAPassingValidationIsRefused) {
  using contract::outcome;
  auto no_proof = imported("abs", "x.abs()", proof("f1", outcome::pass, 1));
  no_proof.proofs.clear();
  auto failed = imported("abs", "x.abs()", proof("f1", outcome::accuracy_error, 1));
  auto anonymous = imported("abs", "x.abs()", proof("", outcome::pass, 1));
  auto nameless = imported("", "x.abs()", proof("f1", outcome::pass, 1));
  EXPECT_THAT(message(refusal(no_proof)), HasSubstr("with the validation that accepted it"));
  EXPECT_THAT(message(refusal(failed)), HasSubstr("its validation is accuracy_error, not pass"));
  EXPECT_THAT(message(refusal(anonymous)), HasSubstr("must name the toolchain fingerprint"));
  EXPECT_EQ(opforge_code(refusal(nameless)), errc::request_invalid);
  EXPECT_TRUE(ask<std::vector<kernel_version>>(atom::list_v, std::string{}, false).empty());
}

TEST_F(LibraryActor, VersionsValidationsAndBundlesFollowTheToolchains) {
  using contract::outcome;
  auto old_abs = ask<kernel_version>(atom::add_v,
                                     imported("abs", "x.abs()", proof("f1", outcome::pass, 1000)));
  auto new_abs = ask<kernel_version>(
      atom::add_v, imported("abs", "torch.where(x < 0, -x, x)", proof("f1", outcome::pass, 2000)));
  auto absolute = ask<kernel_version>(
      atom::add_v, imported("absolute", "x.abs()", proof("f1", outcome::pass, 500)));
  EXPECT_EQ(new_abs.version, 2u);
  // A new toolchain f2: the new kernel regressed there, the old one still passes.
  ask<atom::ok>(atom::validate_v, new_abs.kernel.hash, proof("f2", outcome::accuracy_error, 3000));
  ask<atom::ok>(atom::validate_v, old_abs.kernel.hash, proof("f2", outcome::pass, 3001));

  auto abs = ask<std::vector<kernel_version>>(atom::list_v, std::string{"abs"}, false);
  ASSERT_EQ(abs.size(), 2u) << "`abs` must not list `absolute`";
  EXPECT_EQ(abs[0].kernel.hash, old_abs.kernel.hash);
  EXPECT_FALSE(abs[0].current);
  EXPECT_TRUE(abs[1].current);
  EXPECT_TRUE(abs[1].kernel.source.empty());
  ASSERT_EQ(abs[1].kernel.proofs.size(), 2u);
  EXPECT_EQ(abs[1].kernel.proofs[0].outcome, outcome::accuracy_error); // newest first
  EXPECT_EQ(abs[1].kernel.proofs[1].fingerprint, "f1");
  auto with_sources = ask<std::vector<kernel_version>>(atom::list_v, std::string{"abs"}, true);
  EXPECT_EQ(with_sources[1].kernel.source, new_abs.kernel.source);
  EXPECT_EQ(ask<std::vector<kernel_version>>(atom::list_v, std::string{}, false).size(), 3u);

  auto hashes = [](const contract::library_bundle& bundle) {
    std::vector<std::string> out;
    for (const auto& k : bundle.kernels)
      out.push_back(k.op + ":" + k.hash);
    return out;
  };
  auto newest = ask<contract::library_bundle>(atom::bundle_v, std::string{"cuda"}, std::string{});
  EXPECT_EQ(newest.daemon_version, "9.9.9");
  EXPECT_EQ(newest.device_kind, "cuda");
  EXPECT_EQ(hashes(newest), (std::vector<std::string>{"abs:" + new_abs.kernel.hash,
                                                      "absolute:" + absolute.kernel.hash}));
  auto on_f2 =
      ask<contract::library_bundle>(atom::bundle_v, std::string{"cuda"}, std::string{"f2"});
  EXPECT_EQ(on_f2.fingerprint, "f2");
  EXPECT_EQ(hashes(on_f2), std::vector<std::string>{"abs:" + old_abs.kernel.hash});
  EXPECT_TRUE(
      ask<contract::library_bundle>(atom::bundle_v, std::string{"interpreter"}, std::string{})
          .kernels.empty());
  EXPECT_THAT(scrape(), HasSubstr("opforge_library_kernels{device_kind=\"cuda\"} 3"));
}

TEST_F(LibraryActor, ALibraryStartedOnAStoreCountsTheKernelsInIt) {
  using contract::outcome;
  ask<kernel_version>(atom::add_v, imported("abs", "x.abs()", proof("f1", outcome::pass, 1)));
  ask<kernel_version>(atom::add_v, imported("neg", "-x", proof("f1", outcome::pass, 2)));
  // What sessions store in their checkpoints, and then report.
  kernel_record from_session;
  from_session.op = "sin";
  from_session.wrapper = "sin_wrapper";
  from_session.source = "def sin_wrapper(x): ...\n";
  from_session.device_kind = "interpreter";
  from_session.toolchain = "f0";
  self_->request(store_, caf::infinite, atom::write_v, write_batch{accept_kernel(from_session)})
      .receive([](atom::ok) {}, [](const caf::error& err) { FAIL() << render(err); });

  auto fresh = std::make_shared<metrics>("test");
  auto restarted = sys_.spawn(library, store_, fresh, std::string{"9.9.9"});
  // The count at start reads the store before this request does, and the store answers in order.
  self_->request(restarted, caf::infinite, atom::list_v, std::string{"sin"}, false)
      .receive(
          [](std::vector<kernel_version>& sin) {
            ASSERT_EQ(sin.size(), 1u);
            EXPECT_EQ(sin[0].kernel.provenance.at("origin"), "campaign");
            EXPECT_EQ(sin[0].kernel.proofs.at(0).fingerprint, "f0");
          },
          [](const caf::error& err) { FAIL() << render(err); });
  auto text = prometheus::TextSerializer{}.Serialize(fresh->registry()->Collect());
  EXPECT_THAT(text, HasSubstr("opforge_library_kernels{device_kind=\"cuda\"} 2"));
  EXPECT_THAT(text, HasSubstr("opforge_library_kernels{device_kind=\"interpreter\"} 1"));
  // Sessions tell the library of what they stored.
  self_->send(restarted, atom::accepted_v, kernel_key("cos", "src"), std::string{"interpreter"});
  self_->request(restarted, caf::infinite, atom::list_v, std::string{"cos"}, false)
      .receive([](std::vector<kernel_version>&) {}, [](const caf::error&) {});
  EXPECT_THAT(prometheus::TextSerializer{}.Serialize(fresh->registry()->Collect()),
              HasSubstr("opforge_library_kernels{device_kind=\"interpreter\"} 2"));
  caf::anon_send_exit(restarted, caf::exit_reason::user_shutdown);
}

namespace {

contract::kernel_timing timing(const std::string& fingerprint, const std::string& shape_class,
                               double kernel_us) {
  return {.fingerprint = fingerprint,
          .device_kind = "cuda",
          .dtype = contract::dtype::float32,
          .shape_class = shape_class,
          .baseline = "aten",
          .kernel_us = kernel_us,
          .baseline_us = 30,
          .speedup = 30 / kernel_us,
          .noise = 0.01,
          .measured_at_ms = 7};
}

std::vector<std::pair<std::string, double>> times(const std::vector<contract::kernel_timing>& in) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& t : in)
    out.emplace_back(t.fingerprint + " " + t.shape_class, t.kernel_us);
  return out;
}

} // namespace

// Timings are merged into the stored kernel record: requests sent back to back all land (none
// overwrites another's read), a class measured again replaces its timing, and the timings are
// listed, survive a restart of the library and travel in the bundle.
TEST_F(LibraryActor, TimingsOfAKernelAreKeptPerToolchainAndClassAndTravel) {
  using contract::outcome;
  auto abs = ask<kernel_version>(atom::add_v,
                                 imported("abs", "x.abs()", proof("f1", outcome::pass, 1000)));
  std::vector<std::vector<contract::kernel_timing>> sent{
      {timing("f1", "n<=1M", 20), timing("f1", "n<=4K", 3)},
      {timing("f2", "n<=1M", 25)},
      {timing("f1", "n<=1M", 18)}};
  int answered = 0;
  for (auto& timings : sent)
    self_
        ->request(library_, caf::infinite, atom::timed_v, std::string{"abs"}, abs.kernel.hash,
                  timings)
        .receive([&](atom::ok) { ++answered; },
                 [&](const caf::error& err) { ADD_FAILURE() << render(err); });
  EXPECT_EQ(answered, 3);
  auto expected = std::vector<std::pair<std::string, double>>{
      {"f1 n<=1M", 18}, {"f1 n<=4K", 3}, {"f2 n<=1M", 25}};
  auto listed = ask<std::vector<kernel_version>>(atom::list_v, std::string{"abs"}, false);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(times(listed[0].kernel.timings), expected);
  // Stored with the record, so a library started anew reads them.
  auto restarted = sys_.spawn(library, store_, telemetry_, std::string{"9.9.9"});
  self_->request(restarted, caf::infinite, atom::list_v, std::string{"abs"}, false)
      .receive(
          [&](std::vector<kernel_version>& again) {
            ASSERT_EQ(again.size(), 1u);
            EXPECT_EQ(times(again[0].kernel.timings), expected);
          },
          [](const caf::error& err) { FAIL() << render(err); });
  caf::anon_send_exit(restarted, caf::exit_reason::user_shutdown);
  auto bundle =
      ask<contract::library_bundle>(atom::bundle_v, std::string{"cuda"}, std::string{"f1"});
  ASSERT_EQ(bundle.kernels.size(), 1u);
  EXPECT_EQ(times(bundle.kernels[0].timings),
            (std::vector<std::pair<std::string, double>>{{"f1 n<=1M", 18}, {"f1 n<=4K", 3}}));
}

TEST_F(LibraryActor, TimingsOfAnUnknownKernelOrWithoutAToolchainAreRefused) {
  using contract::outcome;
  auto abs = ask<kernel_version>(atom::add_v,
                                 imported("abs", "x.abs()", proof("f1", outcome::pass, 1000)));
  auto refused = [&](const std::string& op, const std::string& hash,
                     std::vector<contract::kernel_timing> timings) {
    caf::error result;
    self_->request(library_, caf::infinite, atom::timed_v, op, hash, std::move(timings))
        .receive([&](atom::ok) { ADD_FAILURE() << "the timings were recorded"; },
                 [&](const caf::error& err) { result = err; });
    return result;
  };
  auto unknown = refused("abs", "0000000000000000", {timing("f1", "n<=1M", 1)});
  EXPECT_EQ(opforge_code(unknown), errc::request_invalid);
  EXPECT_THAT(render(unknown), HasSubstr("no kernel"));
  // The right hash under another operator id is another key.
  EXPECT_EQ(opforge_code(refused("neg", abs.kernel.hash, {timing("f1", "n<=1M", 1)})),
            errc::request_invalid);
  auto nameless = timing("", "n<=1M", 1);
  EXPECT_EQ(opforge_code(refused("abs", abs.kernel.hash, {nameless})), errc::request_invalid);
  EXPECT_EQ(opforge_code(refused("abs", abs.kernel.hash, {timing("f1", "n<=1M", 0)})),
            errc::request_invalid);
  // Nothing of them was stored, and the library still answers.
  EXPECT_TRUE(ask<std::vector<kernel_version>>(atom::list_v, std::string{"abs"}, false)
                  .at(0)
                  .kernel.timings.empty());
}
