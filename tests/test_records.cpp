// The stored records read as older builds wrote them (tests/fixtures/records), and are written back
// as the same maps.

#include "messages/errors.hpp"
#include "persistence/records.hpp"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace opforge;
using json = nlohmann::json;

namespace {

std::string golden(const std::string& name) {
  std::ifstream in{std::string{OPFORGE_SOURCE_DIR} + "/tests/fixtures/records/" + name + ".msgpack",
                   std::ios::binary};
  std::stringstream bytes;
  bytes << in.rdbuf();
  EXPECT_FALSE(bytes.str().empty()) << name;
  return bytes.str();
}

json value_of(const std::string& bytes) {
  return json::from_msgpack(bytes);
}

// `now` cut down to the keys `golden` has, at every depth: a record written today keeps every key
// an older build wrote, with its value, and may add fields that came since.
json as_of(const json& now, const json& golden) {
  if (golden.is_object() && now.is_object()) {
    json out = json::object();
    for (const auto& [key, value] : golden.items())
      if (now.contains(key))
        out[key] = as_of(now.at(key), value);
    return out;
  }
  if (golden.is_array() && now.is_array() && golden.size() == now.size()) {
    json out = json::array();
    for (size_t i = 0; i < golden.size(); ++i)
      out.push_back(as_of(now.at(i), golden.at(i)));
    return out;
  }
  return now;
}

std::string bytes_of(const json& value) {
  auto bytes = json::to_msgpack(value);
  return {bytes.begin(), bytes.end()};
}

using contract::attempt_outcome;
using contract::attempt_stage;

} // namespace

TEST(GoldenRecords, AFailedSessionReadsWithEveryField) {
  auto bytes = golden("session_failed");
  auto record = decode_record(bytes);
  ASSERT_TRUE(record) << render(record.error());
  EXPECT_EQ(record->session_id, "c7/nn.functional.gelu/tanh");
  EXPECT_EQ(record->campaign_id, "c7");
  EXPECT_EQ(record->op, "nn.functional.gelu");
  EXPECT_EQ(record->variant, "tanh");
  EXPECT_EQ(record->wrapper, "gelu_wrapper");
  EXPECT_EQ(record->dtypes, (std::vector<std::string>{"float32", "bfloat16"}));
  EXPECT_EQ(record->docstring, "gelu(input, approximate='none') -> Tensor");
  EXPECT_EQ(record->seed_kernel,
            "def gelu_wrapper(input, approximate='none'):\n    return old(input)\n");
  EXPECT_EQ(record->endpoint, "vllm-a");
  EXPECT_EQ(record->model, "qwen-coder");
  EXPECT_EQ(record->budgets.max_dialogs, 2u);
  EXPECT_EQ(record->budgets.max_calls_per_dialog, 5u);
  EXPECT_EQ(record->budgets.context_window_tokens, 32768u);
  EXPECT_EQ(record->budgets.reply_reserve_tokens, 4096u);
  EXPECT_EQ(record->state, session_state::failed);
  EXPECT_EQ(record->revision, 23u);
  EXPECT_EQ(record->dialog, 2u);
  EXPECT_EQ(record->calls_in_dialog, 5u);
  EXPECT_EQ(record->total_calls, 10u);
  EXPECT_EQ(record->consecutive_faults, 1u);
  EXPECT_EQ(record->total_faults, 3u);
  ASSERT_EQ(record->messages.size(), 2u);
  EXPECT_EQ(record->messages[0].role, "user");
  EXPECT_EQ(record->messages[0].content, "Write gelu.");
  EXPECT_EQ(record->messages[1].role, "assistant");
  EXPECT_EQ(record->proposal,
            "def gelu_wrapper(input, approximate='none'):\n    return k(input)\n");
  EXPECT_EQ(record->last_feedback, "bfloat16: values differ");
  EXPECT_EQ(record->toolchain, "0123456789abcdef");
  EXPECT_EQ(record->device_kind, "interpreter");
  EXPECT_EQ(record->toolchain_versions,
            (std::map<std::string, std::string>{{"torch", "2.13.0"}, {"triton", "3.6.0"}}));
  EXPECT_EQ(record->aten_overloads, (std::vector<std::string>{"aten::gelu", "aten::gelu.out"}));
  EXPECT_EQ(record->prompt_tokens, 123456u);
  EXPECT_EQ(record->completion_tokens, 7890u);
  EXPECT_EQ(record->end_reason, "budget spent: 2 dialogs");

  ASSERT_EQ(record->history.size(), 3u);
  const auto& format = record->history[0];
  EXPECT_EQ(format.dialog, 1u);
  EXPECT_EQ(format.call, 1u);
  EXPECT_EQ(format.stage, attempt_stage::format);
  EXPECT_EQ(format.outcome, attempt_outcome::format_error);
  EXPECT_EQ(format.detail, "no python block");
  EXPECT_EQ(record->history[1].stage, attempt_stage::lint);
  EXPECT_EQ(record->history[1].outcome, attempt_outcome::lint_violation);
  EXPECT_EQ(record->history[2].stage, attempt_stage::test);
  EXPECT_EQ(record->history[2].outcome, attempt_outcome::accuracy_error);
  EXPECT_EQ(record->history[2].call, 5u);

  const auto* verdict = record->verdict.test();
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->outcome, contract::outcome::accuracy_error);
  EXPECT_EQ(verdict->tests_run, 9);
  EXPECT_EQ(verdict->tests_passed, 8);
  EXPECT_EQ(verdict->per_dtype.at("bfloat16").outcome, contract::dtype_outcome::accuracy_error);
  EXPECT_EQ(verdict->per_dtype.at("float32").sets.at("sample_inputs").passed, 8);
  EXPECT_EQ(verdict->compile_s, 1.5);
  EXPECT_EQ(verdict->run_s, 0.25);
  EXPECT_EQ(verdict->sandbox.at("namespaces"), "on");
  ASSERT_TRUE(verdict->failure);
  EXPECT_EQ(verdict->failure->sample, "input: bfloat16[4, 4]");
  EXPECT_EQ(verdict->failure->check, contract::failure_check::accuracy);
  EXPECT_FALSE(verdict->failure->exit_code);
  // The open map that builds wrote before the diff was typed reads as no diff.
  EXPECT_FALSE(verdict->failure->diff);
  EXPECT_EQ(record->verdict.hosts.passed_on, std::vector<std::string>{"host-a"});
  EXPECT_EQ(record->verdict.hosts.failed_on, "host-b");
  EXPECT_TRUE(record->verdict.hosts.confirmed_on.empty());

  // Written back as the same map: same keys, same values (floats may change their width), but
  // the untyped diff, which is nil.
  auto written = value_of(bytes);
  written["verdict"]["failure"]["diff"] = nullptr;
  EXPECT_EQ(as_of(value_of(encode_record(*record)), written), written);
  auto again = decode_record(encode_record(*record));
  ASSERT_TRUE(again) << render(again.error());
  EXPECT_EQ(encode_record(*again), encode_record(*record));
}

TEST(GoldenRecords, AnAccuracyVerdictKeepsItsTypedDiff) {
  auto bytes = golden("session_accuracy");
  auto record = decode_record(bytes);
  ASSERT_TRUE(record) << render(record.error());
  ASSERT_TRUE(record->verdict.test() && record->verdict.test()->failure);
  const auto& diff = record->verdict.test()->failure->diff;
  ASSERT_TRUE(diff);
  EXPECT_EQ(diff->reason, "values differ");
  EXPECT_EQ(diff->actual_shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(diff->expected_shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(diff->actual_dtype, "float32");
  EXPECT_EQ(diff->expected_dtype, "float32");
  EXPECT_EQ(diff->atol, 1e-5);
  EXPECT_EQ(diff->rtol, 1.3e-6);
  EXPECT_EQ(diff->max_abs_error, 0.5);
  EXPECT_EQ(diff->max_rel_error, 0.25);
  EXPECT_EQ(diff->nan_inf_mismatches, 1);
  EXPECT_EQ(diff->signed_zero_mismatches, 1);
  EXPECT_FALSE(diff->accepted);
  EXPECT_EQ(diff->mismatched, 3);
  EXPECT_EQ(diff->total, 4);
  EXPECT_EQ(diff->first_mismatches, (std::vector<contract::element_mismatch>{
                                        {.index = {0, 1}, .actual = "2.5", .expected = "2.0"},
                                        {.index = {1, 0}, .actual = "nan", .expected = "1.0"},
                                        {.index = {1, 1}, .actual = "-0.0", .expected = "0.0"}}));
  // Written back with every key and value, the diff's included.
  EXPECT_EQ(as_of(value_of(encode_record(*record)), value_of(bytes)), value_of(bytes));
}

// What builds before the typed diff stored for an accuracy failure: compare.py's map, its element
// values the elements' own msgpack types. The record reads, the diff as none.
TEST(GoldenRecords, AnUntypedDiffWithElementValuesReadsAsNone) {
  auto value = value_of(golden("session_accuracy"));
  value["verdict"]["failure"]["diff"]["first_mismatches"] =
      json::array({{{"index", {0, 1}}, {"actual", 2.5}, {"expected", 2.0}},
                   {{"index", {1, 0}}, {"actual", "nan"}, {"expected", true}}});
  auto record = decode_record(bytes_of(value));
  ASSERT_TRUE(record) << render(record.error());
  EXPECT_FALSE(record->verdict.test()->failure->diff);
  EXPECT_EQ(record->verdict.test()->failure->sample, "input: bfloat16[4, 4]");
}

TEST(GoldenRecords, ASessionAfterLintAndAFreshOneRead) {
  auto lint_bytes = golden("session_lint");
  auto linted = decode_record(lint_bytes);
  ASSERT_TRUE(linted) << render(linted.error());
  EXPECT_EQ(linted->state, session_state::test);
  ASSERT_TRUE(std::holds_alternative<contract::lint_result>(linted->verdict.result));
  const auto& lint = std::get<contract::lint_result>(linted->verdict.result);
  EXPECT_FALSE(lint.ok);
  ASSERT_EQ(lint.violations.size(), 1u);
  EXPECT_EQ(lint.violations[0].rule, "no-torch-compute");
  EXPECT_EQ(lint.violations[0].col, 11);
  ASSERT_TRUE(lint.syntax_error);
  EXPECT_EQ(lint.syntax_error->message, "eh");
  EXPECT_EQ(as_of(value_of(encode_record(*linted)), value_of(lint_bytes)), value_of(lint_bytes));

  auto fresh_bytes = golden("session_fresh");
  auto fresh = decode_record(fresh_bytes);
  ASSERT_TRUE(fresh) << render(fresh.error());
  EXPECT_EQ(fresh->state, session_state::prompt);
  EXPECT_EQ(fresh->op, "exp");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(fresh->verdict.result));
  EXPECT_TRUE(fresh->history.empty());
  EXPECT_EQ(fresh->budgets.max_dialogs, session_budgets{}.max_dialogs);
  EXPECT_EQ(as_of(value_of(encode_record(*fresh)), value_of(fresh_bytes)), value_of(fresh_bytes));
}

TEST(GoldenRecords, TransitionsAndCampaignsRead) {
  auto event_bytes = golden("transition");
  auto event = decode_transition(event_bytes);
  ASSERT_TRUE(event) << render(event.error());
  EXPECT_EQ(event->revision, 23u);
  EXPECT_EQ(event->from, session_state::feedback);
  EXPECT_EQ(event->to, session_state::failed);
  EXPECT_EQ(event->detail, "budget spent");
  EXPECT_EQ(event->at_ms, 1764100000123);
  EXPECT_EQ(event->content, "the feedback\nprompt");
  EXPECT_EQ(as_of(value_of(encode_transition(*event)), value_of(event_bytes)),
            value_of(event_bytes));

  auto campaign_bytes = golden("campaign");
  auto campaign = decode_campaign(campaign_bytes);
  ASSERT_TRUE(campaign) << render(campaign.error());
  const auto& spec = campaign->spec;
  EXPECT_EQ(spec.campaign_id, "c7");
  EXPECT_EQ(spec.endpoint, "vllm-a");
  EXPECT_EQ(spec.failover, (std::vector<std::string>{"vllm-b", "hosted"}));
  EXPECT_EQ(spec.model, "qwen-coder");
  EXPECT_EQ(spec.device_kind, "cuda");
  EXPECT_EQ(spec.created_ms, 1764100000000);
  EXPECT_EQ(spec.budgets.context_window_tokens, 32768u);
  EXPECT_EQ(spec.concurrency, 4u);
  ASSERT_EQ(spec.operators.size(), 2u);
  EXPECT_EQ(spec.operators[0].op, "abs");
  EXPECT_EQ(spec.operators[0].category, "unary");
  EXPECT_EQ(spec.operators[0].dtypes, (std::vector<std::string>{"int32", "float32"}));
  EXPECT_EQ(spec.operators[0].aten_overloads,
            (std::vector<std::string>{"aten::abs", "aten::abs.out"}));
  EXPECT_EQ(spec.operators[1].variant, "tanh");
  EXPECT_EQ(spec.operators[1].seed_kernel, "def gelu_wrapper(x): ...");
  EXPECT_EQ(spec.operators[1].seed_feedback, "accuracy_error on bfloat16");
  EXPECT_EQ(campaign->state, contract::campaign_state::done);
  EXPECT_EQ(campaign->ended_ms, 1764100999000);
  EXPECT_EQ(as_of(value_of(encode_campaign(*campaign)), value_of(campaign_bytes)),
            value_of(campaign_bytes));

  auto rejected = decode_campaign(golden("campaign_rejected"));
  ASSERT_TRUE(rejected) << render(rejected.error());
  EXPECT_EQ(rejected->state, contract::campaign_state::rejected);
  EXPECT_EQ(rejected->error, "no operator matched");
  EXPECT_EQ(rejected->spec.device_kind, "interpreter");
}

// An attempt's stage and outcome are stored by their contract names; a name this build does not
// know, or a missing one, makes the record unreadable and says which.
TEST(GoldenRecords, AnAttemptWithAnUnknownNameIsCorrupt) {
  auto value = value_of(golden("session_failed"));
  value["history"][1]["stage"] = "review";
  auto decoded = decode_record(bytes_of(value));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(render(decoded.error()),
            "store_corrupt: session record: key 'history.stage': attempt stage \"review\": not one "
            "of format, lint or test");

  value = value_of(golden("session_failed"));
  value["history"][2]["outcome"] = "slow";
  decoded = decode_record(bytes_of(value));
  ASSERT_FALSE(decoded);
  EXPECT_NE(render(decoded.error()).find("attempt outcome \"slow\": not one of pass, "),
            std::string::npos)
      << render(decoded.error());

  value = value_of(golden("session_failed"));
  value["history"][0].erase("outcome");
  decoded = decode_record(bytes_of(value));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(render(decoded.error()),
            "store_corrupt: session record: missing key 'history.outcome'");

  value = value_of(golden("session_failed"));
  value["revision"] = -1;
  decoded = decode_record(bytes_of(value));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(render(decoded.error()),
            "store_corrupt: session record: key 'revision': must not be negative");
  value["revision"] = "23";
  decoded = decode_record(bytes_of(value));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(render(decoded.error()),
            "store_corrupt: session record: key 'revision': expected an integer, got str");
  value["revision"] = 23;
  value["dialog"] = uint64_t{1} << 32;
  decoded = decode_record(bytes_of(value));
  ASSERT_FALSE(decoded);
  EXPECT_EQ(render(decoded.error()),
            "store_corrupt: session record: key 'dialog': integer out of range");
}
