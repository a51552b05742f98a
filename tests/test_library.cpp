#include "actors/library/kernels.hpp"
#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/test_store_support.hpp"

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

TEST(Library, AddedKernelHasTheBytesEarlierBuildsWrote) {
  auto k = relu_kernel();
  auto op = add_kernel(k);
  EXPECT_EQ(op.family, family::kernels);
  EXPECT_EQ(op.key, kernel_key("nn.functional.relu", k.source));
  // The map that op_session wrote as a JSON literal before kernels had a type.
  json legacy = {{"op", k.op},
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
  ASSERT_TRUE(op.value);
  EXPECT_EQ(*op.value, bytes_of(legacy));

  auto decoded = decode_kernel(*op.value);
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(decoded->hash, content_hash(k.source));
  EXPECT_EQ(decoded->skipped_dtypes, k.skipped_dtypes);
  EXPECT_EQ(decoded->tests_passed, 12);
  EXPECT_EQ(decoded->accepted_at_ms, k.accepted_at_ms);
  EXPECT_EQ(encode_kernel(*decoded), *op.value);
}

TEST(Library, CorruptKernelBytesAreErrors) {
  for (std::string bytes : {std::string{}, std::string{"\xc1"}, bytes_of({{"tests_run", "x"}})}) {
    auto decoded = decode_kernel(bytes);
    ASSERT_FALSE(decoded);
    EXPECT_EQ(decoded.error().code(), static_cast<uint8_t>(errc::store_corrupt));
  }
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
