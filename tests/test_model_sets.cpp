// Model sample sets (`model:<name>`) in the daemon: how a campaign stores the sets it requires,
// the test jobs that carry them, the store's copy of a set, and the words a failure on one gets.

#include "actors/sessions/feedback.hpp"
#include "messages/errors.hpp"
#include "messages/jobs.hpp"
#include "messages/wire.hpp"
#include "persistence/keys.hpp"
#include "persistence/model_sets.hpp"
#include "persistence/records.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace opforge;
using json = nlohmann::json;

namespace {

TEST(ModelSets, ACampaignKeepsItsSetsAndEachOperatorsFileAcrossARestart) {
  stored_campaign campaign;
  campaign.spec.campaign_id = "c1";
  campaign.spec.sample_sets = {"model:llama"};
  campaign.spec.operators.push_back({"neg", "", "unary", "neg(x)", {"float32"}, {"aten::neg"}});
  campaign.spec.operators[0].model_samples = {{"model:llama", "UEsDBA=="}};
  campaign.spec.operators.push_back({"abs", "", "unary", "abs(x)", {"float32"}, {"aten::abs"}});
  campaign.spec.operators[1].model_samples = {{"model:llama", ""}};

  auto decoded = decode_campaign(encode_campaign(campaign));

  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(decoded->spec.sample_sets, std::vector<std::string>{"model:llama"});
  EXPECT_EQ(decoded->spec.operators[0].model_samples, campaign.spec.operators[0].model_samples);
  EXPECT_EQ(decoded->spec.operators[1].model_samples, campaign.spec.operators[1].model_samples);

  // A campaign stored before model sets requires none.
  auto old = json::from_msgpack(encode_campaign(campaign));
  old["spec"].erase("sample_sets");
  old["spec"]["operators"][0].erase("model_samples");
  auto bytes = json::to_msgpack(old);
  auto earlier = decode_campaign({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  ASSERT_TRUE(earlier) << render(earlier.error());
  EXPECT_TRUE(earlier->spec.sample_sets.empty());
  EXPECT_TRUE(earlier->spec.operators[0].model_samples.empty());
}

contract::test_request payload_of(const device_job& job) {
  auto request = wire::decode_as<contract::test_request>(job.payload, "test_request");
  EXPECT_TRUE(request) << render(request.error());
  return request ? *request : contract::test_request{};
}

TEST(ModelSets, ATestJobNamesEveryGeneratedSetThenTheModelsAndCarriesTheirFiles) {
  test_limits limits{"interpreter", 30, 60000, {"model:llama", "layouts"}, {}};
  limits.model_samples = {{"model:llama", "UEsDBA=="}};

  auto request = payload_of(test_job("j1", "neg", "", "src", "neg", {"float32"}, limits));

  ASSERT_TRUE(request.sample_sets);
  EXPECT_EQ(*request.sample_sets,
            (std::vector<std::string>{"sample_inputs", "reference_inputs", "extremal", "numerics",
                                      "layouts", "sizes", "model:llama"}));
  EXPECT_EQ(request.model_samples, limits.model_samples);

  // Without extra sets the worker's default stands: every generated set, no model's.
  auto plain = payload_of(test_job("j2", "neg", "", "src", "neg", {"float32"}, {"interpreter"}));
  EXPECT_FALSE(plain.sample_sets);
  EXPECT_FALSE(plain.model_samples);
}

TEST(ModelSets, ImportingASetReplacesTheOneOfItsNameWithinTheCaps) {
  std::vector<key_value> stored{{model_set_key("model:gpt2", "mul"), "b2xk"}};
  auto batch =
      replace_model_set("model:gpt2", {{"add", "YWRk"}, {"nn.functional.relu", ""}}, stored);

  ASSERT_TRUE(batch) << render(batch.error());
  EXPECT_TRUE(batch->sync);
  ASSERT_EQ(batch->ops.size(), 3u);
  EXPECT_EQ(batch->ops[0].key, model_set_key("model:gpt2", "mul"));
  EXPECT_FALSE(batch->ops[0].value);
  EXPECT_EQ(batch->ops[1].family, family::meta);
  EXPECT_EQ(batch->ops[1].value, "YWRk");
  std::vector<key_value> written;
  for (const auto& op : batch->ops)
    if (op.value)
      written.push_back({op.key, *op.value});
  written.push_back({model_set_key("model:gpt", "add"), "other set"});
  EXPECT_EQ(read_model_set("model:gpt2", written),
            (model_set_files{{"add", "YWRk"}, {"nn.functional.relu", ""}}));

  auto refused = [](std::string_view set, const model_set_files& files) {
    auto batch = replace_model_set(set, files, {});
    EXPECT_FALSE(batch);
    return batch ? std::string{} : message(batch.error());
  };
  EXPECT_EQ(refused("gpt2", {}), "model set gpt2: not a set name (model:<name>, the name of "
                                 "a-z0-9_.-)");
  EXPECT_EQ(refused("model:gpt2", {{std::string("add\0x", 5), "YWRk"}}),
            "model set model:gpt2: operator id 'add\\x00x' is not one");
  EXPECT_EQ(refused("model:gpt2", {{"add", "not base64!"}}),
            "model set model:gpt2: add: the file is not base64");
  EXPECT_EQ(refused("model:gpt2", {{"add", std::string(model_set_max_operator_bytes + 4, 'A')}}),
            "model set model:gpt2: add: its captured inputs are 9 MiB (base64); a test job "
            "carries at most 8 MiB per operator: capture a smaller model (--size tiny)");
  model_set_files big;
  for (int i = 0; i < 4; ++i)
    big["op" + std::to_string(i)] = std::string(model_set_max_operator_bytes, 'A');
  EXPECT_EQ(refused("model:gpt2", big),
            "model set model:gpt2: its captured inputs are 32 MiB (base64); the daemon keeps "
            "24 MiB per set: capture a smaller model (--size tiny)");
}

TEST(ModelSets, AFailureOnAModelsInputsSaysSo) {
  contract::test_failure failure;
  failure.sample_set = "layouts";
  EXPECT_EQ(model_set_failure(failure), "");
  failure.sample_set = "model:llama";
  EXPECT_EQ(model_set_failure(failure), "passes OpInfo's samples but fails model:llama inputs");
}

} // namespace
