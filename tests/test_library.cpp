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

// A record of tests/fixtures/records, as its file holds it.
std::string golden(const std::string& name) {
  std::ifstream in{std::string{OPFORGE_SOURCE_DIR} + "/tests/fixtures/records/" + name + ".msgpack",
                   std::ios::binary};
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
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
  k.timings = {{.fingerprint = "f1",
                .device_kind = "interpreter",
                .dtype = contract::dtype::float32,
                .shape_class = "n<=1M",
                .kernel_us = 2,
                .peak_share = 0.5}};
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
  EXPECT_EQ(decoded->timings, k.timings);
  // Only the new keys were added to what earlier builds wrote.
  auto stored = json::from_msgpack(*op.value);
  auto legacy = legacy_kernel(k);
  for (const auto& [key, value] : legacy.items())
    EXPECT_EQ(stored.at(key), value) << key;
  EXPECT_EQ(stored.size(), legacy.size() + 4);
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
  auto bytes = golden("kernel");
  ASSERT_FALSE(bytes.empty());
  auto decoded = decode_kernel(bytes);
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
  EXPECT_TRUE(k.timings.empty()); // written before kernels had timings
  // Every key with its value, and besides them only the keys of later fields, at their defaults:
  // the maps compare whatever order the keys are in.
  auto golden = json::from_msgpack(bytes);
  auto again = json::from_msgpack(encode_kernel(k));
  EXPECT_EQ(golden.size(), 22u);
  auto later = again;
  for (const auto& [key, value] : golden.items())
    later.erase(key);
  EXPECT_EQ(later, (json{{"timings", json::array()}}));
  for (const auto& [key, value] : golden.items())
    EXPECT_EQ(again.at(key), value) << key;
}

// tests/fixtures/records/kernel_timed.msgpack: a kernel with two timings as this build writes it
// (one on a kind without a peak, so without peak_share). Builds after it must read it.
TEST(Library, TheGoldenTimedKernelReadsWithItsTimings) {
  auto bytes = golden("kernel_timed");
  ASSERT_FALSE(bytes.empty());
  auto decoded = decode_kernel(bytes);
  ASSERT_TRUE(decoded) << render(decoded.error());
  ASSERT_EQ(decoded->timings.size(), 2u);
  const auto& cuda = decoded->timings[0];
  EXPECT_EQ(cuda.fingerprint, "0123456789abcdef");
  EXPECT_EQ(cuda.device_kind, "cuda");
  EXPECT_EQ(cuda.dtype, contract::dtype::bfloat16);
  EXPECT_EQ(cuda.shape_class, "n<=16M");
  EXPECT_EQ(cuda.baseline, "aten");
  EXPECT_DOUBLE_EQ(cuda.kernel_us, 41.5);
  EXPECT_DOUBLE_EQ(cuda.baseline_us, 45.25);
  EXPECT_DOUBLE_EQ(cuda.speedup, 45.25 / 41.5);
  EXPECT_DOUBLE_EQ(cuda.noise, 0.02);
  EXPECT_FALSE(cuda.launch_bound);
  ASSERT_TRUE(cuda.peak_share);
  EXPECT_DOUBLE_EQ(*cuda.peak_share, 0.81);
  EXPECT_EQ(cuda.measured_at_ms, 1764000000000);
  const auto& interpreter = decoded->timings[1];
  EXPECT_EQ(interpreter.device_kind, "interpreter");
  EXPECT_EQ(interpreter.baseline, "library:6fc3d2b2ed224bc8");
  EXPECT_TRUE(interpreter.launch_bound);
  EXPECT_FALSE(interpreter.peak_share);
  // Written back as it was read.
  EXPECT_EQ(json::from_msgpack(encode_kernel(*decoded)), json::from_msgpack(bytes));
}

namespace {

contract::kernel_timing timed(const std::string& fingerprint, const std::string& shape_class,
                              double kernel_us, double noise = 0.01, bool launch_bound = false,
                              contract::dtype dtype = contract::dtype::float32) {
  return {.fingerprint = fingerprint,
          .device_kind = "cuda",
          .dtype = dtype,
          .shape_class = shape_class,
          .baseline = "aten",
          .kernel_us = kernel_us,
          .baseline_us = 100,
          .speedup = 100 / kernel_us,
          .noise = noise,
          .launch_bound = launch_bound,
          .measured_at_ms = 5};
}

} // namespace

TEST(Library, FreshTimingsReplaceThoseOfTheirClassAndKeepTheOthersInOneOrder) {
  auto kept =
      merge_timings({}, {timed("b", "n<=1M", 10), timed("a", "n<=4K", 3), timed("a", "n<=1M", 20)});
  auto merged = merge_timings(kept, {timed("a", "n<=1M", 15), timed("c", "n<=1M", 9)});
  std::vector<std::tuple<std::string, std::string, double>> got;
  for (const auto& t : merged)
    got.emplace_back(t.fingerprint, t.shape_class, t.kernel_us);
  EXPECT_EQ(got,
            (std::vector<std::tuple<std::string, std::string, double>>{
                {"a", "n<=1M", 15}, {"a", "n<=4K", 3}, {"b", "n<=1M", 10}, {"c", "n<=1M", 9}}));
  // Another dtype or device kind is another class.
  auto bf16 = timed("a", "n<=1M", 30, 0.01, false, contract::dtype::bfloat16);
  auto other_kind = timed("a", "n<=1M", 40);
  other_kind.device_kind = "interpreter";
  EXPECT_EQ(merge_timings(merged, {bf16, other_kind}).size(), 6u);
}

TEST(Library, ABenchmarkBecomesOneTimingPerDtypeAndShapeClassOfItsMedians) {
  auto shape = [](contract::dtype dtype, const std::string& shape_class, double candidate_us,
                  double baseline_us, bool launch_bound, std::optional<double> peak = {}) {
    return contract::shape_timing{.shape_class = shape_class,
                                  .dtype = dtype,
                                  .launch_bound = launch_bound,
                                  .candidate_us = candidate_us,
                                  .candidate_iqr_us = candidate_us / 20,
                                  .baseline_us = baseline_us,
                                  .baseline_iqr_us = baseline_us / 10,
                                  .peak_share = peak};
  };
  using contract::dtype;
  contract::benchmark_result result{
      .outcome = contract::outcome::pass,
      .baseline = "aten",
      .timer = "cuda_events",
      .timings = {shape(dtype::float32, "n<=1M", 30, 60, false, 0.5),
                  shape(dtype::float32, "n<=1M", 10, 40, false, 0.7),
                  shape(dtype::float32, "n<=1M", 20, 20, false, 0.6),
                  // Left out: the class has inputs that measure the kernel.
                  shape(dtype::float32, "n<=1M", 2, 3, true),
                  shape(dtype::float32, "n<=4K", 4, 5, true),
                  shape(dtype::float32, "n<=4K", 6, 5, true),
                  shape(dtype::bfloat16, "n<=1M", 8, 16, false)}};
  auto timings = class_timings(result, "f1", "cuda", 77);
  ASSERT_EQ(timings.size(), 3u); // ordered by dtype as the contract lists them, then class
  EXPECT_EQ(timings[0].dtype, dtype::bfloat16);
  const auto& f32 = timings[1];
  EXPECT_EQ(f32.dtype, dtype::float32);
  EXPECT_EQ(f32.shape_class, "n<=1M");
  EXPECT_EQ(f32.fingerprint, "f1");
  EXPECT_EQ(f32.device_kind, "cuda");
  EXPECT_EQ(f32.baseline, "aten");
  EXPECT_EQ(f32.measured_at_ms, 77);
  EXPECT_DOUBLE_EQ(f32.kernel_us, 20);
  EXPECT_DOUBLE_EQ(f32.baseline_us, 40);
  EXPECT_DOUBLE_EQ(f32.speedup, 2);
  EXPECT_DOUBLE_EQ(f32.noise, 0.1); // the baseline's IQR is a tenth of its median
  EXPECT_FALSE(f32.launch_bound);
  ASSERT_TRUE(f32.peak_share);
  EXPECT_DOUBLE_EQ(*f32.peak_share, 0.6);
  const auto& small = timings[2];
  EXPECT_EQ(small.shape_class, "n<=4K");
  EXPECT_TRUE(small.launch_bound);
  EXPECT_DOUBLE_EQ(small.kernel_us, 5); // the median of an even count: the middle two's mean
  EXPECT_FALSE(small.peak_share);
  // A benchmark whose outputs were wrong after timing, or that a timing check stopped, is none.
  result.outcome = contract::outcome::accuracy_error;
  EXPECT_TRUE(class_timings(result, "f1", "cuda", 77).empty());
  result.outcome = contract::outcome::cheat_detected;
  EXPECT_TRUE(class_timings(result, "f1", "cuda", 77).empty());
}

TEST(Library, RelativeTimeIsTheGeometricMeanOverSharedClassesThatAreNotLaunchBound) {
  std::vector<contract::kernel_timing> a{timed("f", "n<=1M", 10), timed("f", "n<=16M", 40),
                                         timed("f", "n<=4K", 100, 0.01, true),
                                         timed("f", "n>16M", 1)};
  std::vector<contract::kernel_timing> b{timed("f", "n<=1M", 40), timed("f", "n<=16M", 40),
                                         timed("f", "n<=4K", 1, 0.01, true)};
  // sqrt(10/40 * 40/40): the launch-bound class and the one b lacks do not count.
  EXPECT_DOUBLE_EQ(*relative_time(a, b), 0.5);
  EXPECT_DOUBLE_EQ(*relative_time(b, a), 2);
  // Where every shared class is launch-bound, those are what there is.
  EXPECT_DOUBLE_EQ(*relative_time({a[2]}, {b[2]}), 100);
  EXPECT_FALSE(relative_time(a, {timed("other", "n<=1M", 1)}));
  EXPECT_FALSE(relative_time({}, b));
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

// Issue 28: on a fingerprint the fastest version that passes there is exported, with its timings
// there; a timed version goes before an untimed one; speed on another toolchain does not count.
TEST(Library, ABundleTakesPerOperatorTheFastestKernelProvenOnTheFingerprint) {
  using contract::outcome;
  auto passes = [](int64_t at) {
    return std::vector{verdict("new", outcome::pass, at), verdict("old", outcome::pass, at)};
  };
  auto slow = version_of("abs", "", 100, passes(100));
  slow.record.timings = {timed("new", "n<=1M", 40), timed("old", "n<=1M", 5)};
  auto fast = version_of("abs", "", 200, passes(200));
  fast.record.timings = {timed("new", "n<=1M", 20), timed("old", "n<=1M", 50)};
  auto untimed = version_of("abs", "", 300, passes(300));
  // Faster than all on `new`, but it fails there.
  auto failing = version_of(
      "abs", "", 400,
      {verdict("new", outcome::accuracy_error, 400), verdict("old", outcome::pass, 400)});
  failing.record.timings = {timed("new", "n<=1M", 1)};
  std::vector<stored_kernel> library{slow, fast, untimed, failing};

  auto on_new = choose(library, "cuda", "new");
  EXPECT_EQ(chosen_sources(on_new), (std::vector<std::string>{"abs # accepted at 200\n"}));
  ASSERT_EQ(on_new.front().timings.size(), 1u); // its timings there only
  EXPECT_EQ(on_new.front().timings[0].fingerprint, "new");
  EXPECT_DOUBLE_EQ(on_new.front().timings[0].kernel_us, 20);
  EXPECT_EQ(chosen_sources(choose(library, "cuda", "old")),
            (std::vector<std::string>{"abs # accepted at 100\n"}));
  // Where none is timed, the newest that passes; without a fingerprint, the newest, with every
  // timing of the device kind.
  EXPECT_EQ(chosen_sources(choose({slow, untimed}, "cuda", "")),
            (std::vector<std::string>{"abs # accepted at 300\n"}));
  EXPECT_EQ(
      chosen_sources(choose({untimed, version_of("abs", "", 250, passes(250))}, "cuda", "new")),
      (std::vector<std::string>{"abs # accepted at 300\n"}));
  auto newest = choose({fast, failing}, "cuda", "");
  EXPECT_EQ(chosen_sources(newest), (std::vector<std::string>{"abs # accepted at 400\n"}));
  EXPECT_EQ(newest.front().timings.size(), 1u);
  EXPECT_EQ(choose({fast}, "cuda", "").front().timings.size(), 2u);
  EXPECT_TRUE(choose({fast}, "interpreter", "").empty());
}
