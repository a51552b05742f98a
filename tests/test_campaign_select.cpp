#include "actors/sessions/campaign.hpp"
#include "messages/errors.hpp"

#include <gtest/gtest.h>

using namespace opforge;

namespace {

contract::catalog_operator op(const std::string& name, const std::string& variant,
                              const std::string& category, std::vector<std::string> dtypes) {
  return {.name = name,
          .variant = variant,
          .category = category,
          .dtypes = std::move(dtypes),
          .aten_overloads = {"aten::" + name, "aten::" + name + ".out"},
          .docstring = contract::docstring{
              .root = name,
              .nodes = {{.name = name, .depth = 0, .text = name + "(input) -> Tensor"},
                        {.name = "torch.Tensor", .depth = 1, .text = "A tensor."}}}};
}

const contract::catalog_result catalog{
    .torch = "2.13.0",
    .operators = {op("abs", "", "elementwise", {"bfloat16", "float32", "int64"}),
                  op("max", "binary", "elementwise", {"float32"}),
                  op("max", "reduction_with_dim", "reduction", {"float32", "int64"}),
                  op("nn.functional.relu", "", "deep learning", {"float32"}),
                  op("logical_not", "", "elementwise", {"bool"})},
    .excluded = {{.name = "fft.fft", .variant = "", .reason = "complex-only"}}};

std::vector<std::string> ids(const selected_operators& selected) {
  std::vector<std::string> out;
  for (const auto& spec : selected.operators)
    out.push_back(operator_id(spec.op, spec.variant));
  return out;
}

} // namespace

TEST(CampaignSelect, ByNameTakesEveryVariantAndIntersectsDtypes) {
  operator_selection selection;
  selection.names = {"max", "abs"};
  auto selected = select_operators(catalog, selection, {"float32", "int64"});
  ASSERT_TRUE(selected) << render(selected.error());
  EXPECT_EQ(ids(*selected),
            (std::vector<std::string>{"abs", "max/binary", "max/reduction_with_dim"}));
  EXPECT_EQ(selected->operators[0].dtypes, (std::vector<std::string>{"float32", "int64"}));
  EXPECT_EQ(selected->operators[1].dtypes, (std::vector<std::string>{"float32"}));
  EXPECT_EQ(selected->operators[0].docstring,
            "abs(input) -> Tensor\n\n### Referenced: torch.Tensor\nA tensor.");
  // The library's kernels say which aten overloads they serve, as the catalog read them.
  EXPECT_EQ(selected->operators[0].aten_overloads,
            (std::vector<std::string>{"aten::abs", "aten::abs.out"}));
}

TEST(CampaignSelect, ByCategoryAllAndOnlyWhatIsNotCovered) {
  operator_selection selection;
  selection.categories = {"elementwise"};
  auto selected = select_operators(catalog, selection, {"float32"});
  ASSERT_TRUE(selected);
  EXPECT_EQ(ids(*selected), (std::vector<std::string>{"abs", "max/binary"}));
  EXPECT_EQ(selected->skipped,
            (std::vector<std::string>{"logical_not: supports none of the requested dtypes"}));
  selection = {};
  selection.all = true;
  selection.covered = {"abs", "max/binary"};
  selected = select_operators(catalog, selection, {"float32"});
  ASSERT_TRUE(selected);
  EXPECT_EQ(ids(*selected),
            (std::vector<std::string>{"max/reduction_with_dim", "nn.functional.relu"}));
  EXPECT_EQ(selected->skipped[0], "abs: already has an accepted kernel");
}

TEST(CampaignSelect, UnknownNamesAndCategoriesAreErrorsNamingThem) {
  operator_selection selection;
  selection.names = {"fft.fft"};
  auto selected = select_operators(catalog, selection, {"float32"});
  ASSERT_FALSE(selected);
  EXPECT_EQ(render(selected.error()),
            "request_invalid: operator 'fft.fft' is excluded from the catalog: complex-only");
  selection.names = {"exq"};
  EXPECT_EQ(render(select_operators(catalog, selection, {"float32"}).error()),
            "request_invalid: operator 'exq' is not in the catalog");
  selection.names = {};
  selection.categories = {"pointwise"};
  EXPECT_EQ(render(select_operators(catalog, selection, {"float32"}).error()),
            "request_invalid: unknown category 'pointwise' (the catalog has: deep learning, "
            "elementwise, reduction)");
}

TEST(CampaignSelect, VariantsGetTheirOwnSessionsAndKeys) {
  campaign_spec spec;
  spec.campaign_id = "c9";
  operator_spec binary{"max", "binary", "elementwise", "", {"float32"}};
  operator_spec reduction{"max", "reduction_with_dim", "reduction", "", {"float32"}};
  EXPECT_EQ(session_id(spec, binary), "c9/max/binary");
  EXPECT_NE(session_key("c9", operator_id("max", "binary")),
            session_key("c9", operator_id("max", "reduction_with_dim")));
  auto record = new_session(spec, reduction);
  EXPECT_EQ(record.wrapper, "max_wrapper");
  EXPECT_EQ(record.variant, "reduction_with_dim");
  EXPECT_EQ(wrapper_name("nn.functional.relu"), "nn_functional_relu_wrapper");
}

TEST(CampaignFailover, ASessionStaysUntilItsEndpointIsDownThenTakesTheNextThatAnswers) {
  std::vector<session_endpoint> endpoints{{"a", "m", {}}, {"b", "m", {}}, {"c", "m", {}}};
  std::map<std::string, endpoint_health> health;
  auto set = [&](const std::string& name, const std::string& state) {
    health[name].name = name;
    health[name].state = from_string<endpoint_state>(state).value();
  };
  EXPECT_EQ(pick_endpoint(endpoints, health, "a"), "a"); // nothing polled yet: all up
  set("a", "failing");
  EXPECT_EQ(pick_endpoint(endpoints, health, "a"), "a"); // a blip is not an outage
  set("a", "down");
  set("b", "failing");
  EXPECT_EQ(pick_endpoint(endpoints, health, "a"), "c"); // one that answers beats one that fails
  set("c", "down");
  EXPECT_EQ(pick_endpoint(endpoints, health, "a"), "b");
  set("b", "down");
  EXPECT_EQ(pick_endpoint(endpoints, health, "a"), ""); // nowhere better to go
  // A record naming an endpoint the campaign no longer lists starts on the first that is not down.
  set("b", "up");
  EXPECT_EQ(pick_endpoint(endpoints, health, "gone"), "b");
}

TEST(CampaignSelect, SeedsStartTheirOperatorsFromAKernelAndSelectOnlyTheirVariant) {
  // As the campaign manager builds it from a request with seeds: a seed's name is named, and a
  // name only a seed brought in selects only the seeded variant.
  operator_selection selection;
  selection.names = {"abs", "max"};
  selection.seeds = {{"max", "binary", "def max_wrapper(a, b): ...", "accuracy_error: ..."}};
  selection.seeded_only = {"max"};
  auto selected = select_operators(catalog, selection, {"float32"});
  ASSERT_TRUE(selected) << render(selected.error());
  ASSERT_EQ(ids(*selected), (std::vector<std::string>{"abs", "max/binary"}));
  EXPECT_EQ(selected->operators[0].seed_kernel, "");
  EXPECT_EQ(selected->operators[1].seed_kernel, "def max_wrapper(a, b): ...");

  campaign_spec spec;
  spec.campaign_id = "c9";
  auto record = new_session(spec, selected->operators[1]);
  EXPECT_EQ(record.seed_kernel, "def max_wrapper(a, b): ...");
  EXPECT_EQ(record.last_feedback, "accuracy_error: ...");
}
