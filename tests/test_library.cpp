#include "actors/library/kernels.hpp"
#include "actors/library/library.hpp"
#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/test_store_support.hpp"

#include <fstream>
#include <sstream>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace opforge;
using json = nlohmann::json;

namespace {

kernel_record relu_kernel() {
  kernel_record k;
  k.op = "nn.functional.relu";
  k.wrapper = "nn_functional_relu_wrapper";
  k.source = "def nn_functional_relu_wrapper(input):\n    return launch(input)\n";
  k.dtypes = {"float32"};
  k.skipped_dtypes = {{"int64", "no CPU reference for int64"}};
  k.campaign_id = "c1";
  k.session_id = "c1/nn.functional.relu";
  k.endpoint = "demo";
  k.model = "replayed";
  k.dialogs = 1;
  k.llm_calls = 2;
  k.calls_in_last_dialog = 2;
  k.tests_run = 12;
  k.tests_passed = 12;
  k.toolchain = "torch-2.13/triton-3.6";
  k.device_kind = "interpreter";
  k.accepted_at_ms = 1764000000000;
  return k;
}

std::string bytes_of(const json& value) {
  auto bytes = json::to_msgpack(value);
  return {bytes.begin(), bytes.end()};
}

} // namespace

TEST(Library, KernelKeyIsTheOperatorIdThenAStableHashOfTheSource) {
  // FNV-1a's offset basis and a published test vector: the hash is part of stored keys.
  EXPECT_EQ(content_hash(""), "cbf29ce484222325");
  EXPECT_EQ(content_hash("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(kernel_key("max/binary", "src"), prefix_of("max/binary") + content_hash("src"));
  EXPECT_NE(kernel_key("max/binary", "src"), kernel_key("max/binary", "src2"));
}

// The map that op_session wrote as a JSON literal before kernels had a type, and that builds
// before the library actor wrote (no aten_overloads, origin or toolchain versions).
json legacy_kernel(const kernel_record& k) {
  return {{"op", k.op},
          {"variant", ""},
          {"wrapper", k.wrapper},
          {"source", k.source},
          {"hash", content_hash(k.source)},
          {"dtypes", {"float32"}},
          {"skipped_dtypes", {{"int64", "no CPU reference for int64"}}},
          {"campaign_id", "c1"},
          {"session_id", "c1/nn.functional.relu"},
          {"endpoint", "demo"},
          {"model", "replayed"},
          {"dialogs", 1u},
          {"llm_calls", 2u},
          {"calls_in_last_dialog", 2u},
          {"tests_run", 12},
          {"tests_passed", 12},
          {"toolchain", "torch-2.13/triton-3.6"},
          {"device_kind", "interpreter"},
          {"accepted_at_ms", int64_t{1764000000000}}};
}

TEST(Library, KernelsEarlierBuildsWroteDecodeWithTheNewFieldsEmpty) {
  auto k = relu_kernel();
  auto decoded = decode_kernel(bytes_of(legacy_kernel(k)));
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(decoded->hash, content_hash(k.source));
  EXPECT_EQ(decoded->skipped_dtypes, k.skipped_dtypes);
  EXPECT_EQ(decoded->tests_passed, 12);
  EXPECT_EQ(decoded->accepted_at_ms, k.accepted_at_ms);
  EXPECT_TRUE(decoded->aten_overloads.empty());
  EXPECT_EQ(decoded->origin, "");
  EXPECT_TRUE(decoded->toolchain_versions.empty());
  // Before origins were kept, every kernel came from a campaign.
  auto view = to_library_kernel(*decoded, {});
  EXPECT_EQ(view.provenance.at("origin"), "campaign");
  EXPECT_EQ(view.provenance.at("campaign_id"), "c1");
  EXPECT_EQ(view.provenance.at("llm_calls"), "2");
  EXPECT_EQ(view.dtypes, std::vector{contract::dtype::float32});
}

TEST(Library, AddedKernelKeepsEveryFieldAndItsHash) {
  auto k = relu_kernel();
  k.aten_overloads = {"aten::relu", "aten::relu_"};
  k.origin = "campaign";
  k.toolchain_versions = {{"torch", "2.13.0"}, {"triton", "3.6.0"}};
  auto op = add_kernel(k);
  EXPECT_EQ(op.family, family::kernels);
  EXPECT_EQ(op.key, kernel_key("nn.functional.relu", k.source));
  ASSERT_TRUE(op.value);
  auto decoded = decode_kernel(*op.value);
  ASSERT_TRUE(decoded) << render(decoded.error());
  k.hash = content_hash(k.source);
  EXPECT_EQ(encode_kernel(*decoded), encode_kernel(k));
  EXPECT_EQ(decoded->aten_overloads, k.aten_overloads);
  EXPECT_EQ(decoded->toolchain_versions, k.toolchain_versions);
  // Only the new keys were added to what earlier builds wrote.
  auto stored = json::from_msgpack(*op.value);
  auto legacy = legacy_kernel(k);
  for (const auto& [key, value] : legacy.items())
    EXPECT_EQ(stored.at(key), value) << key;
  EXPECT_EQ(stored.size(), legacy.size() + 3);
}

TEST(Library, AcceptingAKernelWritesItAndItsAcceptanceAsItsFirstValidation) {
  auto k = relu_kernel();
  k.toolchain_versions = {{"torch", "2.13.0"}};
  auto ops = accept_kernel(k);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].key, kernel_key("nn.functional.relu", k.source));
  EXPECT_EQ(ops[1].family, family::validations);
  EXPECT_EQ(ops[1].key, validation_key(content_hash(k.source), "torch-2.13/triton-3.6"));
  ASSERT_TRUE(ops[1].value);
  auto proof = decode_proof(*ops[1].value);
  ASSERT_TRUE(proof) << render(proof.error());
  EXPECT_EQ(*proof, (contract::toolchain_proof{.fingerprint = "torch-2.13/triton-3.6",
                                               .device_kind = "interpreter",
                                               .toolchain = {{"torch", "2.13.0"}},
                                               .outcome = contract::outcome::pass,
                                               .tests_run = 12,
                                               .tests_passed = 12,
                                               .validated_at_ms = 1764000000000}));
  auto corrupt = decode_proof("\x81\xa1x\x01");
  ASSERT_FALSE(corrupt);
  EXPECT_EQ(corrupt.error().code(), static_cast<uint8_t>(errc::store_corrupt));
}

TEST(Library, AnImportedKernelKeepsItsOriginAndProof) {
  contract::toolchain_proof proof{.fingerprint = "f00d",
                                  .device_kind = "cuda",
                                  .toolchain = {{"triton", "3.6.0"}},
                                  .outcome = contract::outcome::pass,
                                  .tests_run = 7,
                                  .tests_passed = 7,
                                  .validated_at_ms = 42};
  contract::library_kernel given{.op = "max",
                                 .variant = "binary",
                                 .wrapper = "max_wrapper",
                                 .source = "def max_wrapper(a, b): ...\n",
                                 .dtypes = {contract::dtype::float16, contract::dtype::int32},
                                 .aten_overloads = {"aten::maximum"},
                                 .provenance = {{"origin", "imported:kernelbook"}},
                                 .proofs = {proof}};
  auto record = from_library_kernel(given, proof);
  EXPECT_EQ(record.hash, content_hash(given.source));
  EXPECT_EQ(record.dtypes, (std::vector<std::string>{"float16", "int32"}));
  EXPECT_EQ(record.device_kind, "cuda");
  EXPECT_EQ(record.toolchain, "f00d");
  EXPECT_EQ(record.accepted_at_ms, 42);
  EXPECT_EQ(acceptance_proof(record), proof);
  auto back = to_library_kernel(record, {proof});
  EXPECT_EQ(back.provenance, (std::map<std::string, std::string>{{"origin", "imported:kernelbook"},
                                                                 {"device_kind", "cuda"},
                                                                 {"accepted_at_ms", "42"}}));
  back.provenance = given.provenance;
  given.hash = record.hash;
  EXPECT_EQ(back, given);
}

TEST(Library, CorruptKernelBytesAreErrors) {
  for (std::string bytes : {std::string{}, std::string{"\xc1"}, bytes_of({{"tests_run", "x"}})}) {
    auto decoded = decode_kernel(bytes);
    ASSERT_FALSE(decoded);
    EXPECT_EQ(decoded.error().code(), static_cast<uint8_t>(errc::store_corrupt));
  }
}

// tests/fixtures/records/kernel.msgpack: what the nlohmann codec before this one wrote, every field
// other than its default. It reads with every value, and is written back with every key and value.
TEST(Library, TheGoldenKernelReadsAndIsWrittenBackWithEveryKeyAndValue) {
  std::ifstream in{std::string{OPFORGE_SOURCE_DIR} + "/tests/fixtures/records/kernel.msgpack",
                   std::ios::binary};
  std::stringstream bytes;
  bytes << in.rdbuf();
  ASSERT_FALSE(bytes.str().empty());
  auto decoded = decode_kernel(bytes.str());
  ASSERT_TRUE(decoded) << render(decoded.error());
  const auto& k = *decoded;
  EXPECT_EQ(k.op, "nn.functional.relu");
  EXPECT_EQ(k.variant, "inplace");
  EXPECT_EQ(k.wrapper, "nn_functional_relu_wrapper");
  EXPECT_EQ(k.source, "def nn_functional_relu_wrapper(input):\n    return launch(input)\n");
  EXPECT_EQ(k.hash, "6fc3d2b2ed224bc8");
  EXPECT_EQ(k.hash, content_hash(k.source));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"float32", "bfloat16"}));
  EXPECT_EQ(k.skipped_dtypes,
            (std::map<std::string, std::string>{{"int64", "no CPU reference for int64"}}));
  EXPECT_EQ(k.aten_overloads, (std::vector<std::string>{"aten::relu", "aten::relu_"}));
  EXPECT_EQ(k.origin, "repair");
  EXPECT_EQ(k.campaign_id, "c1");
  EXPECT_EQ(k.session_id, "c1/nn.functional.relu");
  EXPECT_EQ(k.endpoint, "demo");
  EXPECT_EQ(k.model, "replayed");
  EXPECT_EQ(k.dialogs, 1u);
  EXPECT_EQ(k.llm_calls, 2u);
  EXPECT_EQ(k.calls_in_last_dialog, 2u);
  EXPECT_EQ(k.tests_run, 12);
  EXPECT_EQ(k.tests_passed, 11);
  EXPECT_EQ(k.toolchain, "torch-2.13/triton-3.6");
  EXPECT_EQ(k.toolchain_versions,
            (std::map<std::string, std::string>{
                {"device", "cpu"}, {"torch", "2.13.0"}, {"triton", "3.6.0"}}));
  EXPECT_EQ(k.device_kind, "interpreter");
  EXPECT_EQ(k.accepted_at_ms, 1764000000000);
  // Every key with its value, and no other: the maps compare whatever order the keys are in.
  auto golden = json::from_msgpack(bytes.str());
  auto again = json::from_msgpack(encode_kernel(k));
  EXPECT_EQ(again, golden);
  EXPECT_EQ(golden.size(), 22u);
}

TEST(Library, AKernelFieldOfTheWrongTypeIsNamed) {
  auto decoded = decode_kernel(bytes_of({{"op", "exp"}, {"tests_run", "x"}}));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(render(decoded.error()),
            "store_corrupt: kernel record: key 'tests_run': expected an integer, got str");
}

TEST(Library, CoveredOperatorsAreThoseWithAStoredKernel) {
  test::temp_dir dir;
  auto db = open_rocksdb_store(dir.db());
  ASSERT_TRUE(db) << render(db.error());
  auto relu = relu_kernel();
  auto relu_again = relu;
  relu_again.source += "# another accepted kernel\n";
  auto max = relu;
  max.op = "max";
  max.variant = "binary";
  // `max/binary` must not make `max` (another variant's prefix) covered.
  write_batch batch{{add_kernel(relu), add_kernel(relu_again), add_kernel(max)}, true};
  ASSERT_FALSE((*db)->write(batch));

  std::vector<key_value> kernels;
  ASSERT_FALSE((*db)->scan(family::kernels, "", [&](std::string_view key, std::string_view value) {
    kernels.push_back({std::string{key}, std::string{value}});
    return true;
  }));
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(covered_operators(kernels),
            (std::set<std::string>{"max/binary", "nn.functional.relu"}));
  EXPECT_EQ(covered_operators({}), std::set<std::string>{});
}

namespace {

contract::toolchain_proof verdict(const std::string& fingerprint, contract::outcome outcome,
                                  int64_t at_ms, const std::string& device_kind = "cuda") {
  return {.fingerprint = fingerprint,
          .device_kind = device_kind,
          .outcome = outcome,
          .tests_run = 4,
          .tests_passed = outcome == contract::outcome::pass ? 4 : 3,
          .validated_at_ms = at_ms};
}

stored_kernel version_of(const std::string& op, const std::string& variant, int64_t accepted_ms,
                         std::vector<contract::toolchain_proof> proofs,
                         const std::string& device_kind = "cuda") {
  kernel_record k;
  k.op = op;
  k.variant = variant;
  k.wrapper = op + "_wrapper";
  k.source = "def " + op + "_wrapper(x):  # accepted at " + std::to_string(accepted_ms) + "\n";
  k.hash = content_hash(k.source);
  k.device_kind = device_kind;
  k.accepted_at_ms = accepted_ms;
  return {k, std::move(proofs)};
}

std::vector<std::string> chosen_sources(const std::vector<contract::library_kernel>& kernels) {
  std::vector<std::string> out;
  for (const auto& k : kernels)
    out.push_back(operator_id(k.op, k.variant) + " " + k.source.substr(k.source.find('#')));
  return out;
}

} // namespace

TEST(Library, VersionsAreNumberedByAcceptanceAndTheNewestPerDeviceKindIsCurrent) {
  using contract::outcome;
  auto listed =
      versions({version_of("abs", "", 300, {}), version_of("abs", "", 100, {}),
                version_of("abs", "", 200, {}, "interpreter"), version_of("max", "binary", 50, {})},
               false);
  ASSERT_EQ(listed.size(), 4u);
  std::vector<std::tuple<std::string, uint32_t, int64_t, bool>> got;
  for (const auto& v : listed) {
    got.emplace_back(operator_id(v.kernel.op, v.kernel.variant), v.version, v.accepted_at_ms,
                     v.current);
    EXPECT_TRUE(v.kernel.source.empty());
    EXPECT_EQ(v.kernel.hash.size(), 16u);
  }
  EXPECT_EQ(got, (std::vector<std::tuple<std::string, uint32_t, int64_t, bool>>{
                     {"abs", 1, 100, false},
                     {"abs", 2, 200, true}, // the only one accepted on the interpreter
                     {"abs", 3, 300, true},
                     {"max/binary", 1, 50, true}}));
  EXPECT_FALSE(versions({version_of("abs", "", 1, {})}, true).front().kernel.source.empty());
}

// Issue 19's rule: on a toolchain where the newest kernel fails, the older one that still passes
// there is exported; elsewhere the newest is.
TEST(Library, ABundleTakesPerOperatorTheNewestKernelProvenOnTheFingerprint) {
  using contract::outcome;
  std::vector<stored_kernel> library{
      version_of("abs", "", 100,
                 {verdict("new", outcome::pass, 900), verdict("old", outcome::pass, 100)}),
      version_of(
          "abs", "", 200,
          {verdict("new", outcome::accuracy_error, 900), verdict("old", outcome::pass, 200)}),
      version_of("max", "binary", 100, {verdict("old", outcome::pass, 100)}),
      version_of("neg", "", 100, {verdict("old", outcome::pass, 100, "interpreter")},
                 "interpreter"),
      // Proven on `new` for another device kind only.
      version_of("sin", "", 100, {verdict("new", outcome::pass, 100, "interpreter")})};

  EXPECT_EQ(chosen_sources(choose(library, "cuda", "")),
            (std::vector<std::string>{"abs # accepted at 200\n", "max/binary # accepted at 100\n",
                                      "sin # accepted at 100\n"}));
  EXPECT_EQ(
      chosen_sources(choose(library, "cuda", "old")),
      (std::vector<std::string>{"abs # accepted at 200\n", "max/binary # accepted at 100\n"}));
  EXPECT_EQ(chosen_sources(choose(library, "cuda", "new")),
            (std::vector<std::string>{"abs # accepted at 100\n"}));
  EXPECT_EQ(chosen_sources(choose(library, "interpreter", "")),
            (std::vector<std::string>{"neg # accepted at 100\n"}));
  EXPECT_TRUE(choose(library, "cuda", "unknown").empty());
  // A chosen kernel carries its proofs, newest first, as stored.
  auto abs = choose(library, "cuda", "new").front();
  ASSERT_EQ(abs.proofs.size(), 2u);
  EXPECT_EQ(abs.proofs[0].fingerprint, "new");
}
