#include "actors/library/kernels.hpp"
#include "actors/sessions/answer_parser.hpp"
#include "actors/sessions/feedback.hpp"
#include "actors/sessions/op_session.hpp"
#include "actors/sessions/session_machine.hpp"
#include "messages/errors.hpp"
#include "tests/test_diff_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace opforge;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

const std::string good_answer = R"(Here it is.
```python
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def exp_wrapper(input):
    out = torch.empty_like(input)
    exp_kernel[(triton.cdiv(input.numel(), 1024),)](input, out, input.numel(), BLOCK=1024)
    return out
```)";

// The same candidate with a different kernel body, so proposals can be told apart.
std::string answer_number(int n) {
  auto answer = good_answer;
  answer.replace(answer.find("tl.exp("), 7, "tl.exp(" + std::to_string(n) + " * ");
  return answer;
}

using contract::outcome;
using contract::test_failure;

const contract::lint_result lint_ok{.ok = true};
const contract::lint_result lint_bad{
    .ok = false,
    .violations = {{.rule = "no-torch-compute",
                    .line = 11,
                    .col = 11,
                    .text = "torch.exp(input)",
                    .hint = "compute the result in a @triton.jit kernel"}}};

contract::test_result test_result(outcome o, std::optional<test_failure> failure = test_failure{}) {
  return {.outcome = o,
          .tests_run = o == outcome::pass ? 12 : 3,
          .tests_passed = o == outcome::pass ? 12 : 2,
          .failure = std::move(failure)};
}

const contract::test_result pass = test_result(outcome::pass, std::nullopt);
const contract::test_result accuracy = test_result(
    outcome::accuracy_error, test_failure{.dtype = "bfloat16",
                                          .sample_index = 2,
                                          .sample = "input: bfloat16[5, 5]",
                                          .message = "values differ",
                                          .diff = opforge::testing::values_differ(0.5)});

// negate_bfloat16 as the interpreter's conformance probes record it (Triton 3.6).
contract::toolchain_defect negate_defect(std::string workaround) {
  return {.probe = "negate_bfloat16",
          .primitive = "negation",
          .dtype = "bfloat16",
          .expression = "-x",
          .inputs = "x=[0.5, -0.25, 1.0, -3.0], y=[0.5, -0.25, 1.0, -3.0]",
          .expected = "[-0.5, 0.25, -1.0, 3.0]",
          .actual = "[-8.0, 16.0, -4.0, 1.5]",
          .known = true,
          .workaround = std::move(workaround),
          .patch = "negation_sign_flip",
          .reproducer = "probe[(1,)](x, y, out, 4, BLOCK=4)"};
}

test_failure defect_failure(std::string workaround) {
  return {.dtype = "bfloat16",
          .sample = "input: bfloat16[5]",
          .message =
              "device_defect: negate_bfloat16: this toolchain computes -x on bfloat16 wrongly",
          .check = contract::failure_check::accuracy,
          .defects = {negate_defect(std::move(workaround))}};
}

session_record fresh_record() {
  session_record r;
  r.session_id = "c1/exp";
  r.campaign_id = "c1";
  r.op = "exp";
  r.wrapper = "exp_wrapper";
  r.dtypes = {"float32", "bfloat16"};
  r.docstring = "exp(input, *, out=None) -> Tensor\n\nReturns the exponential.";
  r.budgets.max_dialogs = 3;
  r.budgets.max_calls_per_dialog = 4;
  return r;
}

std::string describe(const session_action& action) {
  return std::visit(
      [](const auto& a) -> std::string {
        using type = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<type, ask_llm>) {
          std::string out = "ask_llm after " + std::to_string(a.delay.count()) + "ms:";
          for (const auto& m : a.messages)
            out += "\n[" + m.role + "] " + m.content;
          return out;
        } else if constexpr (std::is_same_v<type, lint_candidate>) {
          return "lint after " + std::to_string(a.delay.count()) + "ms:\n" + a.source;
        } else if constexpr (std::is_same_v<type, test_candidate>) {
          return "test after " + std::to_string(a.delay.count()) + "ms:\n" + a.source;
        } else if constexpr (std::is_same_v<type, benchmark_candidate>) {
          return "benchmark after " + std::to_string(a.delay.count()) + "ms:\n" + a.source;
        } else {
          return std::string{a.success ? "success: " : "failed: "} + a.reason;
        }
      },
      action);
}

class SessionMachine : public ::testing::Test {
protected:
  SessionMachine() {
    auto loaded = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
    EXPECT_TRUE(loaded) << render(loaded.error());
    templates = std::move(*loaded);
  }

  // Starts a session, checking after every step that a record restored from its stored bytes
  // asks for exactly the same next action.
  void begin(session_record r = fresh_record()) {
    record = std::move(r);
    check(start(record, context));
  }

  void feed(const session_event& event) { check(step(record, event, context)); }

  void check(step_result result) {
    EXPECT_FALSE(result.transitions.empty()) << "the event was ignored";
    for (const auto& t : result.transitions) {
      log.push_back(std::string{to_string(t.from)} + "->" + to_string(t.to));
      transitions.push_back(t);
    }
    record = std::move(result.record);
    auto restored = decode_record(encode_record(record));
    ASSERT_TRUE(restored) << render(restored.error());
    EXPECT_EQ(describe(next_action(*restored)), describe(next_action(record)));
    EXPECT_EQ(encode_record(*restored), encode_record(record));
  }

  session_action action() const { return next_action(record); }

  const std::string& last_prompt() const { return record.messages.back().content; }

  prompt_templates templates;
  session_context context{templates, "WORKED EXAMPLES"};
  session_record record;
  std::vector<std::string> log;
  std::vector<session_transition> transitions; // every transition made, in order
};

} // namespace

TEST_F(SessionMachine, StartsWithTheInitialPrompt) {
  begin();
  EXPECT_EQ(record.state, session_state::generate);
  EXPECT_EQ(record.dialog, 1u);
  EXPECT_EQ(log, (std::vector<std::string>{"PROMPT->GENERATE"}));
  auto next = action();
  auto* ask = std::get_if<ask_llm>(&next);
  ASSERT_NE(ask, nullptr);
  ASSERT_EQ(ask->messages.size(), 1u);
  EXPECT_EQ(ask->delay, 0ms);
  const auto& prompt = ask->messages[0].content;
  EXPECT_NE(prompt.find("Returns the exponential."), std::string::npos);
  EXPECT_NE(prompt.find("WORKED EXAMPLES"), std::string::npos);
  EXPECT_NE(prompt.find("`exp_wrapper`"), std::string::npos);
  EXPECT_NE(prompt.find("float32, bfloat16"), std::string::npos);
  EXPECT_EQ(transitions[0].content, prompt) << "the opening prompt is kept in full";
}

TEST_F(SessionMachine, PassingCandidateSucceeds) {
  begin();
  feed(llm_answered{good_answer, false, 1000, 300});
  auto next = action();
  auto* lint = std::get_if<lint_candidate>(&next);
  ASSERT_NE(lint, nullptr);
  EXPECT_EQ(lint->source.find("```"), std::string::npos);
  EXPECT_EQ(lint->source.rfind("@triton.jit\ndef exp_kernel", 0), 0u);
  feed(lint_finished{lint_ok});
  ASSERT_TRUE(std::holds_alternative<test_candidate>(action()));
  feed(test_finished{pass});
  EXPECT_EQ(describe(action()), "success: passed 12 tests on float32, bfloat16");
  EXPECT_EQ(log, (std::vector<std::string>{"PROMPT->GENERATE", "GENERATE->PARSE", "PARSE->LINT",
                                           "LINT->TEST", "TEST->SUCCESS"}));
  EXPECT_EQ(record.total_calls, 1u);
  EXPECT_EQ(record.prompt_tokens, 1000u);
  EXPECT_EQ(record.completion_tokens, 300u);
  EXPECT_EQ(record.revision, 5u);
  ASSERT_EQ(transitions.size(), 5u);
  EXPECT_EQ(transitions[1].content, good_answer) << "the answer is kept in full";
  for (auto i : {2, 3, 4})
    EXPECT_EQ(transitions[i].content, "") << log[i] << " carries no text";
}

TEST_F(SessionMachine, APassWithASkippedDtypeSaysWhichDtypesItCovers) {
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_ok});
  auto verdict = pass;
  verdict.per_dtype = {
      {"float32", {.run = 12, .passed = 12, .outcome = contract::dtype_outcome::pass}},
      {"bfloat16", {.outcome = contract::dtype_outcome::skipped, .reason = "no CPU reference"}}};
  feed(test_finished{verdict});
  EXPECT_EQ(describe(action()),
            "success: passed 12 tests on float32; skipped bfloat16: no CPU reference");
  ASSERT_TRUE(record.verdict.test());
  auto tested = dtypes_of_pass(*record.verdict.test(), record.dtypes);
  EXPECT_EQ(tested.passed, std::vector<std::string>{"float32"});
  EXPECT_EQ(tested.skipped,
            (std::vector<std::pair<std::string, std::string>>{{"bfloat16", "no CPU reference"}}));
}

TEST_F(SessionMachine, UnparsableAnswerGetsFormatFeedback) {
  begin();
  feed(llm_answered{"I would use tl.exp for this.", false, 0, 0});
  EXPECT_EQ(record.state, session_state::generate);
  ASSERT_EQ(record.messages.size(), 3u);
  EXPECT_EQ(record.messages[1].role, "assistant");
  EXPECT_NE(last_prompt().find("it contains no Python code: no ``` code block"), std::string::npos);
  EXPECT_EQ(record.history.back().outcome, contract::attempt_outcome::format_error);
  EXPECT_EQ(log.back(), "FEEDBACK->GENERATE");
}

TEST_F(SessionMachine, TruncatedAnswerIsToldItWasCutOff) {
  begin();
  feed(llm_answered{"Let me explain at length", true, 0, 0});
  EXPECT_NE(last_prompt().find("cut off at the token limit"), std::string::npos);
}

TEST_F(SessionMachine, LintViolationsAreReportedWithRuleLineAndHint) {
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_bad});
  EXPECT_EQ(record.state, session_state::generate);
  EXPECT_NE(last_prompt().find("- line 11, column 11 [no-torch-compute]: `torch.exp(input)`: "
                               "compute the result in a @triton.jit kernel"),
            std::string::npos);
  EXPECT_EQ(record.history.back().outcome, contract::attempt_outcome::lint_violation);
  EXPECT_EQ(record.history.back().detail, "no-torch-compute");
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[3], "LINT->FEEDBACK");
  EXPECT_EQ(transitions[3].detail, "lint: lint_violation (no-torch-compute)");
  EXPECT_EQ(transitions[3].content, last_prompt()) << "the feedback sent is kept in full";
  EXPECT_EQ(transitions[4].content, "") << "FEEDBACK->GENERATE repeats nothing";
}

TEST_F(SessionMachine, AFallbackTheGateFoundIsRecordedAsTheCheatItIs) {
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  auto fallback = lint_bad;
  fallback.violations[0].rule = "fallback";
  fallback.violations[0].hint = "Compute it in a Triton kernel";
  fallback.gate_outcome = outcome::cheat_detected;
  fallback.gate_check = "fallback";
  feed(lint_finished{fallback});
  EXPECT_EQ(record.state, session_state::generate);
  EXPECT_NE(last_prompt().find("Compute it in a Triton kernel"), std::string::npos);
  EXPECT_EQ(record.history.back().outcome, contract::attempt_outcome::cheat_detected);
  EXPECT_EQ(record.history.back().detail, "fallback: fallback");
}

TEST_F(SessionMachine, SyntaxErrorsGoBackAsLintFeedback) {
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(
      lint_finished{{.ok = false, .syntax_error = contract::syntax_error{3, 9, "invalid syntax"}}});
  EXPECT_NE(last_prompt().find("- syntax error at line 3, column 9: invalid syntax"),
            std::string::npos);
}

struct outcome_case {
  contract::outcome outcome;
  test_failure failure;
  std::vector<std::string> shown; // what the feedback prompt must show
};

class SessionFeedback : public SessionMachine,
                        public ::testing::WithParamInterface<outcome_case> {};

TEST_P(SessionFeedback, EveryTestOutcomeGetsItsOwnFeedback) {
  const auto& c = GetParam();
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{test_result(c.outcome, c.failure)});
  EXPECT_EQ(record.state, session_state::generate);
  EXPECT_EQ(record.history.back().outcome, contract::to_attempt_outcome(c.outcome));
  for (const auto& text : c.shown)
    EXPECT_NE(last_prompt().find(text), std::string::npos) << text << "\nnot in\n" << last_prompt();
  EXPECT_EQ(last_prompt().find("{{"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Outcomes, SessionFeedback,
    ::testing::Values(
        outcome_case{outcome::compile_error,
                     {.dtype = "float16",
                      .message = "CompilationError",
                      .compile_log = "at 5:12: unsupported tensor index"},
                     {"failed to compile for dtype float16", "at 5:12: unsupported tensor index"}},
        outcome_case{outcome::runtime_error,
                     {.dtype = "float32",
                      .sample = "input: float32[0]",
                      .message = "ZeroDivisionError: division by zero",
                      .backtrace = "File \"candidate.py\", line 14, in exp_wrapper"},
                     {"input: float32[0]", "ZeroDivisionError", "line 14, in exp_wrapper"}},
        outcome_case{outcome::crash,
                     {.dtype = "float32",
                      .message = "the candidate process died",
                      .cuda_error = "an illegal memory access was encountered"},
                     {"crashed", "Device error: an illegal memory access was encountered"}},
        outcome_case{outcome::accuracy_error,
                     {.dtype = "bfloat16",
                      .sample = "input: bfloat16[5, 5]",
                      .diff = opforge::testing::values_differ(0.5, 3, 25)},
                     {"wrong values for dtype bfloat16", "max_abs_error: 0.5", "mismatched: 3",
                      "total: 25"}},
        outcome_case{outcome::accuracy_error,
                     {.dtype = "float32",
                      .sample = "layouts: transposed (sample #0): (Tensor[float32](33, 64) "
                                "strides=(1, 33))",
                      .message = "output: layout differs: strides (64, 1), ATen (1, 33)",
                      .check = contract::failure_check::layout},
                     {"right values but returns them in another memory layout",
                      "output: layout differs: strides (64, 1), ATen (1, 33)",
                      "torch.empty_like(input)", "strides=(1, 33)"}},
        outcome_case{outcome::timeout,
                     {.dtype = "int64", .message = "sample 4 ran past 10 s"},
                     {"did not finish in time for dtype int64", "sample 4 ran past 10 s"}},
        outcome_case{
            outcome::cheat_detected,
            {.message = "aten::exp ran outside a Triton kernel"},
            {"does not compute the operator in Triton", "aten::exp ran outside a Triton kernel"}},
        outcome_case{
            outcome::lint_violation,
            {.message = "static: refused before running: import at line 1 `import "
                        "torch`: No imports. (1 more in findings)",
             .check = contract::failure_check::static_,
             .findings = {"static: import at line 1 `import torch`: No imports.",
                          "static: module_attribute at line 9 `torch.sin`: Use only allowed "
                          "names."}},
            {"breaks the rules for generated kernels",
             "- import at line 1 `import torch`: "
             "No imports.\n- module_attribute at line 9 `torch.sin`: Use only allowed names.",
             "(`exp_wrapper`"}},
        outcome_case{outcome::device_defect,
                     defect_failure("(-x.to(tl.float32)).to(tl.bfloat16)"),
                     {"right for dtype bfloat16 except where a defect of this\ndevice's toolchain",
                      "expression: out = -x", "dtype: bfloat16",
                      "expected: [-0.5, 0.25, -1.0, 3.0]", "actual: [-8.0, 16.0, -4.0, 1.5]",
                      "probe[(1,)](x, y, out, 4, BLOCK=4)",
                      "    (-x.to(tl.float32)).to(tl.bfloat16)", "input: bfloat16[5]"}}),
    [](const auto& info) {
      auto name = std::string{to_string(info.param.outcome)};
      if (info.param.failure.check == contract::failure_check::layout)
        name += "_layout";
      return name;
    });

// The typed diff goes into the prompt field by field, the element values as the worker wrote them
// (Python's repr) and the numbers as Python writes them.
TEST_F(SessionMachine, ATensorDiffIsShownFieldByField) {
  contract::tensor_diff diff{
      .reason = "values differ",
      .actual_shape = {2, 3},
      .expected_shape = {2, 3},
      .actual_dtype = "bfloat16",
      .expected_dtype = "bfloat16",
      .atol = 1e-5,
      .rtol = 0.016,
      .max_abs_error = 2.0,
      .max_rel_error = 1e20,
      .nan_inf_mismatches = 1,
      .signed_zero_mismatches = 1,
      .accepted = "within tolerance of expected or of precise",
      .mismatched = 3,
      .total = 6,
      .first_mismatches = {{.index = {0, 1}, .actual = "2.5", .expected = "0.5", .precise = "0.5"},
                           {.index = {1, 0}, .actual = "nan", .expected = "1.0"},
                           {.index = {1, 2}, .actual = "-0.0", .expected = "0.0"}}};
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{
      test_result(outcome::accuracy_error, test_failure{.dtype = "bfloat16", .diff = diff})});
  EXPECT_NE(last_prompt().find("Difference from PyTorch:\n"
                               "reason: values differ\n"
                               "actual_shape: [2, 3]\n"
                               "expected_shape: [2, 3]\n"
                               "actual_dtype: bfloat16\n"
                               "expected_dtype: bfloat16\n"
                               "atol: 1e-05\n"
                               "rtol: 0.016\n"
                               "max_abs_error: 2.0\n"
                               "max_rel_error: 1e+20\n"
                               "nan_inf_mismatches: 1\n"
                               "signed_zero_mismatches: 1\n"
                               "accepted: within tolerance of expected or of precise\n"
                               "mismatched: 3\n"
                               "total: 6\n"
                               "first_mismatches:\n"
                               "  [0, 1]: actual 2.5, expected 0.5, precise 0.5\n"
                               "  [1, 0]: actual nan, expected 1.0\n"
                               "  [1, 2]: actual -0.0, expected 0.0\n\n"),
            std::string::npos)
      << last_prompt();

  // A diff of shapes has no errors to show; a verdict without a diff says what the worker said.
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{
      test_result(outcome::accuracy_error,
                  test_failure{.diff = contract::tensor_diff{.reason = "shape differs",
                                                             .actual_shape = {3},
                                                             .expected_shape = {},
                                                             .actual_dtype = "float32",
                                                             .expected_dtype = "float32"}})});
  EXPECT_NE(last_prompt().find("Difference from PyTorch:\nreason: shape differs\n"
                               "actual_shape: [3]\nexpected_shape: []\n"
                               "actual_dtype: float32\nexpected_dtype: float32\n\n"),
            std::string::npos)
      << last_prompt();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{
      test_result(outcome::accuracy_error, test_failure{.message = "output: values differ"})});
  EXPECT_NE(last_prompt().find("Difference from PyTorch:\noutput: values differ\n"),
            std::string::npos)
      << last_prompt();
}

TEST_F(SessionMachine, LongFieldsAreCutInTheMiddleDeterministically) {
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_ok});
  std::string log_text = "FIRST ERROR\n" + std::string(20000, 'x') + "\nLAST LINE";
  feed(test_finished{test_result(outcome::compile_error, test_failure{.compile_log = log_text})});
  auto prompt = last_prompt();
  EXPECT_NE(prompt.find("FIRST ERROR"), std::string::npos);
  EXPECT_NE(prompt.find("LAST LINE"), std::string::npos);
  EXPECT_NE(prompt.find("[... 14022 characters left out ...]"), std::string::npos);
  EXPECT_LT(prompt.size(), 8000u);
}

TEST_F(SessionMachine, CallBudgetOpensANewDialogFromTheLatestProposal) {
  auto r = fresh_record();
  r.budgets.max_calls_per_dialog = 2;
  begin(r);
  feed(llm_answered{answer_number(1), false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{accuracy});
  feed(llm_answered{answer_number(2), false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{accuracy});
  EXPECT_EQ(record.dialog, 2u);
  EXPECT_EQ(record.calls_in_dialog, 0u);
  EXPECT_EQ(record.total_calls, 2u);
  ASSERT_EQ(record.messages.size(), 1u);
  const auto& prompt = record.messages[0].content;
  EXPECT_NE(prompt.find("existing Triton implementation"), std::string::npos);
  EXPECT_NE(prompt.find("tl.exp(2 * "), std::string::npos);
  EXPECT_EQ(prompt.find("tl.exp(1 * "), std::string::npos);
  EXPECT_NE(prompt.find("wrong values for dtype bfloat16"), std::string::npos);
  EXPECT_EQ(log[log.size() - 2], "FEEDBACK->PROMPT");
  EXPECT_EQ(log.back(), "PROMPT->GENERATE");
  EXPECT_EQ(transitions.back().content, prompt) << "the second dialog's opening prompt is kept";
  EXPECT_EQ(transitions[log.size() - 3].content, record.last_feedback)
      << "the feedback that ended the first dialog is kept, though never sent in it";
}

TEST_F(SessionMachine, BudgetExhaustionFails) {
  auto r = fresh_record();
  r.budgets.max_dialogs = 2;
  r.budgets.max_calls_per_dialog = 2;
  begin(r);
  for (int call = 0; call < 4; ++call)
    feed(llm_answered{"no code, sorry", false, 0, 0});
  EXPECT_EQ(describe(action()),
            "failed: budget spent: 2 dialogs of at most 2 calls (4 calls in all)");
  EXPECT_EQ(record.history.size(), 4u);
  // Without any proposal the second dialog started from scratch.
  EXPECT_EQ(record.messages[0].content.find("existing Triton implementation"), std::string::npos);
  EXPECT_EQ(log.back(), "PROMPT->FAILED");
}

TEST_F(SessionMachine, ContextSaturationOpensANewDialogFromTheLatestProposal) {
  auto r = fresh_record();
  begin(r);
  // A window that holds the first exchange but not a feedback round on top of it.
  record.budgets.reply_reserve_tokens = 100;
  record.budgets.context_window_tokens =
      estimated_tokens(record.messages) + good_answer.size() / 4 + 150;
  feed(llm_answered{answer_number(7), false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{accuracy});
  EXPECT_EQ(record.dialog, 2u);
  EXPECT_EQ(record.total_calls, 1u);
  ASSERT_EQ(record.messages.size(), 1u);
  EXPECT_NE(record.messages[0].content.find("tl.exp(7 * "), std::string::npos);
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[log.size() - 2], "FEEDBACK->PROMPT");
}

TEST_F(SessionMachine, PromptThatCannotFitFails) {
  auto r = fresh_record();
  r.budgets.context_window_tokens = 1000;
  r.budgets.reply_reserve_tokens = 900;
  begin(r);
  EXPECT_EQ(record.state, session_state::failed);
  EXPECT_NE(record.end_reason.find("does not fit the endpoint's context window"),
            std::string::npos);
}

TEST_F(SessionMachine, ContextExhaustedByTheEndpointOpensANewDialog) {
  begin();
  feed(llm_answered{answer_number(3), false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{accuracy});
  feed(llm_context_exhausted{"maximum context length is 32768 tokens"});
  EXPECT_EQ(record.dialog, 2u);
  EXPECT_NE(record.messages[0].content.find("tl.exp(3 * "), std::string::npos);
  // The first prompt of a dialog not fitting ends the session: no new dialog could do better.
  feed(llm_context_exhausted{"maximum context length is 32768 tokens"});
  EXPECT_EQ(record.state, session_state::failed);
  EXPECT_EQ(record.dialog, 2u);
}

TEST_F(SessionMachine, EndpointFaultsRetryWithoutCounting) {
  begin();
  auto first = describe(action());
  feed(llm_faulted{"HTTP 503"});
  feed(llm_faulted{"connection refused"});
  EXPECT_EQ(record.state, session_state::generate);
  EXPECT_EQ(record.total_calls, 0u);
  EXPECT_EQ(record.calls_in_dialog, 0u);
  EXPECT_EQ(record.total_faults, 2u);
  auto next = action();
  auto* ask = std::get_if<ask_llm>(&next);
  ASSERT_NE(ask, nullptr);
  EXPECT_EQ(ask->delay, 2000ms);
  EXPECT_EQ(ask->messages.size(), 1u);
  EXPECT_EQ(log.back(), "GENERATE->GENERATE");
  feed(llm_answered{good_answer, false, 0, 0});
  EXPECT_EQ(record.consecutive_faults, 0u);
  EXPECT_EQ(record.total_calls, 1u);
}

TEST_F(SessionMachine, ARefusedRequestFailsTheSessionSayingWhy) {
  begin();
  feed(llm_faulted{"rejected: HTTP 404: cassette c.jsonl holds no answer #0", true});
  EXPECT_EQ(record.state, session_state::failed);
  EXPECT_EQ(describe(action()), "failed: the endpoint refused the request for good: rejected: "
                                "HTTP 404: cassette c.jsonl holds no answer #0");
}

TEST_F(SessionMachine, AMoveToAnotherEndpointAsksItAtOnce) {
  begin();
  feed(llm_faulted{"connection refused"});
  feed(llm_faulted{"connection refused"});
  feed(endpoint_moved{"second", "model-b", "endpoint first down for 61 s: connection refused"});
  EXPECT_EQ(record.state, session_state::generate);
  EXPECT_EQ(record.endpoint, "second");
  EXPECT_EQ(record.model, "model-b");
  EXPECT_EQ(record.total_faults, 2u);
  EXPECT_EQ(std::get<ask_llm>(action()).delay, 0ms);
  EXPECT_EQ(log.back(), "GENERATE->GENERATE");
  // Only a session waiting for an answer moves: one that has it goes on where it is.
  feed(llm_answered{good_answer, false, 0, 0});
  EXPECT_TRUE(step(record, endpoint_moved{"third", "m", "why"}, context).transitions.empty());
}

TEST_F(SessionMachine, HarnessFaultsRetryTheStepWithoutCounting) {
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(harness_faulted{"lint worker lost"});
  EXPECT_EQ(record.state, session_state::lint);
  feed(lint_finished{lint_ok});
  feed(harness_faulted{"worker lost"});
  feed(test_finished{
      test_result(outcome::harness_error, test_failure{.message = "reference failed"})});
  // A pass that ran nothing is not believed.
  feed(test_finished{{.outcome = outcome::pass}});
  EXPECT_EQ(record.state, session_state::test);
  EXPECT_EQ(record.total_calls, 1u);
  EXPECT_TRUE(record.history.empty());
  EXPECT_EQ(std::get<test_candidate>(action()).delay, 4000ms);
  feed(test_finished{pass});
  EXPECT_EQ(record.state, session_state::success);
}

TEST_F(SessionMachine, ADeviceDefectIsNeitherTheKernelsFaultNorTheHarnesss) {
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{
      test_result(outcome::device_defect, defect_failure("(-x.to(tl.float32)).to(tl.bfloat16)"))});
  EXPECT_EQ(record.state, session_state::generate);
  EXPECT_EQ(record.total_faults, 0u);
  ASSERT_EQ(record.history.size(), 1u);
  EXPECT_EQ(record.history.back().outcome, contract::attempt_outcome::device_defect);
  EXPECT_EQ(log, (std::vector<std::string>{"PROMPT->GENERATE", "GENERATE->PARSE", "PARSE->LINT",
                                           "LINT->TEST", "TEST->FEEDBACK", "FEEDBACK->GENERATE"}));
  EXPECT_EQ(last_prompt().find("wrong values"), std::string::npos) << last_prompt();
}

TEST_F(SessionMachine, ADeviceDefectWithoutAWorkaroundEndsTheSessionNamingIt) {
  begin();
  feed(llm_answered{good_answer, false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{test_result(outcome::device_defect, defect_failure(""))});
  EXPECT_EQ(record.state, session_state::failed);
  EXPECT_EQ(record.total_calls, 1u);
  EXPECT_EQ(record.total_faults, 0u);
  ASSERT_EQ(record.history.size(), 1u);
  EXPECT_EQ(record.history.back().outcome, contract::attempt_outcome::device_defect);
  EXPECT_EQ(record.end_reason,
            "device_defect: negate_bfloat16: this toolchain computes -x on bfloat16 wrongly "
            "(x=[0.5, -0.25, 1.0, -3.0], y=[0.5, -0.25, 1.0, -3.0] gives [-8.0, 16.0, -4.0, 1.5], "
            "expected [-0.5, 0.25, -1.0, 3.0]) and no workaround is known; no answer can pass "
            "here until the toolchain is fixed");
  EXPECT_EQ(describe(action()), "failed: " + record.end_reason);
}

TEST_F(SessionMachine, RetryDelayGrowsToAMinute) {
  EXPECT_EQ(retry_delay(0), 0ms);
  EXPECT_EQ(retry_delay(1), 1000ms);
  EXPECT_EQ(retry_delay(6), 32000ms);
  EXPECT_EQ(retry_delay(7), 60000ms);
  EXPECT_EQ(retry_delay(1000), 60000ms);
}

TEST_F(SessionMachine, StaleEventsAreIgnored) {
  begin();
  auto before = encode_record(record);
  auto result = step(record, lint_finished{lint_ok}, context);
  EXPECT_TRUE(result.transitions.empty());
  EXPECT_EQ(encode_record(result.record), before);
  feed(llm_answered{good_answer, false, 0, 0});
  EXPECT_TRUE(step(record, llm_answered{good_answer, false, 0, 0}, context).transitions.empty());
  EXPECT_TRUE(step(record, test_finished{pass}, context).transitions.empty());
}

TEST_F(SessionMachine, CancelEndsTheSession) {
  begin();
  feed(cancel_requested{"by the user"});
  EXPECT_EQ(describe(action()), "failed: cancelled: by the user");
  EXPECT_TRUE(step(record, cancel_requested{"again"}, context).transitions.empty());
}

TEST_F(SessionMachine, RepairSessionStartsFromItsSeed) {
  auto r = fresh_record();
  r.seed_kernel = "def exp_wrapper(input):\n    return old_kernel(input)\n";
  begin(r);
  EXPECT_NE(record.messages[0].content.find("return old_kernel(input)"), std::string::npos);
}

namespace {

// A benchmark on a GPU's timer: one float32 class that is not launch-bound, the kernel at
// `kernel_us` against ATen's 10 us.
benchmark_finished timed(double kernel_us, std::string timer = "cuda_events") {
  contract::shape_timing shape{.shape_class = "n<=1M",
                               .source = "ladder:1048576",
                               .dtype = contract::dtype::float32,
                               .shape = "Tensor[float32](1048576)",
                               .elements = 1048576,
                               .bytes = 8388608,
                               .launch_bound = false,
                               .repetitions = 10,
                               .candidate_us = kernel_us,
                               .candidate_iqr_us = kernel_us / 100,
                               .baseline_us = 10,
                               .baseline_iqr_us = 0.1,
                               .speedup = 10 / kernel_us,
                               .achieved_gbps = 8388608 / kernel_us / 1000,
                               .peak_share = 0.25};
  return {.result = {.outcome = outcome::pass,
                     .baseline = "aten",
                     .timer = std::move(timer),
                     .timings = {shape},
                     .geomean_speedup = 10 / kernel_us},
          .fingerprint = "fp1",
          .device_kind = "cuda",
          .measured_at_ms = 1000};
}

session_record optimizing_record(uint32_t calls, double target = 1.0) {
  auto r = fresh_record();
  r.budgets.optimize = true;
  r.budgets.optimize_calls = calls;
  r.budgets.optimize_target_speedup = target;
  return r;
}

} // namespace

class OptimizeStage : public SessionMachine {
protected:
  // Answer `n` through lint and a passing test.
  void prove(int n) {
    feed(llm_answered{answer_number(n), false, 0, 0});
    feed(lint_finished{lint_ok});
    feed(test_finished{pass});
  }

  std::string source_of(int n) const {
    auto parsed = parse_answer(answer_number(n), "exp_wrapper");
    return std::get<parsed_candidate>(parsed).source;
  }
};

TEST_F(OptimizeStage, OffAPassEndsInSuccessAsBefore) {
  begin();
  prove(1);
  EXPECT_EQ(log.back(), "TEST->SUCCESS");
  EXPECT_TRUE(record.versions.empty());
}

TEST_F(OptimizeStage, APassIsTimedThenAFasterVersionIsAskedForWithItsTimings) {
  begin(optimizing_record(2));
  prove(1);
  EXPECT_EQ(log.back(), "TEST->OPTIMIZE");
  ASSERT_EQ(record.versions.size(), 1u);
  auto bench = std::get<benchmark_candidate>(action());
  EXPECT_EQ(bench.source, source_of(1));
  EXPECT_EQ(bench.dtypes, (std::vector<std::string>{"float32", "bfloat16"}));

  feed(timed(20)); // half ATen's speed: below the target
  EXPECT_EQ(log[log.size() - 2], "OPTIMIZE->PROMPT");
  EXPECT_EQ(log.back(), "PROMPT->GENERATE");
  EXPECT_TRUE(record.optimizing);
  ASSERT_EQ(record.messages.size(), 1u);
  const auto& prompt = last_prompt();
  EXPECT_NE(prompt.find("Make it faster"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find(source_of(1)), std::string::npos);
  EXPECT_NE(prompt.find("| float32 | n<=1M | 20.0 | 10.0 | 0.5 | 25% |"), std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("over the classes that are not launch-bound: 0.5. The target is\n1."),
            std::string::npos)
      << prompt;
  EXPECT_EQ(prompt.find("interpreter"), std::string::npos) << "a GPU timer needs no warning";

  prove(2);
  EXPECT_EQ(log.back(), "TEST->OPTIMIZE");
  EXPECT_EQ(std::get<benchmark_candidate>(action()).source, source_of(2));
  feed(timed(5)); // twice ATen's speed: the target is reached
  EXPECT_EQ(log.back(), "OPTIMIZE->SUCCESS");
  EXPECT_EQ(record.proposal, source_of(2));
  EXPECT_EQ(record.optimize_calls_used, 1u);
  EXPECT_EQ(record.total_calls, 2u);
  EXPECT_NE(record.end_reason.find("kept version 2 of 2 (speedup 2)"), std::string::npos)
      << record.end_reason;
  EXPECT_NE(record.end_reason.find("the target speedup 1 is reached"), std::string::npos)
      << record.end_reason;
  EXPECT_EQ(describe(action()), "success: " + record.end_reason);
}

TEST_F(OptimizeStage, ASlowerVersionIsNotKept) {
  begin(optimizing_record(1));
  prove(1);
  feed(timed(20));
  prove(2);
  feed(timed(40));
  EXPECT_EQ(log.back(), "OPTIMIZE->SUCCESS");
  EXPECT_EQ(record.proposal, source_of(1));
  ASSERT_EQ(record.versions.size(), 2u);
  EXPECT_EQ(fastest_version(record), 0u);
  EXPECT_NE(record.end_reason.find("kept version 1 of 2 (speedup 0.5)"), std::string::npos)
      << record.end_reason;
  EXPECT_NE(record.end_reason.find("its 1 optimize calls are spent"), std::string::npos)
      << record.end_reason;
}

TEST_F(OptimizeStage, FailedVersionsAreFedBackWithinTheStagesCallsAndNeverKept) {
  begin(optimizing_record(2));
  prove(1);
  feed(timed(20));
  feed(llm_answered{answer_number(2), false, 0, 0});
  feed(lint_finished{lint_ok});
  feed(test_finished{accuracy});
  EXPECT_EQ(log.back(), "FEEDBACK->GENERATE") << "one optimize call left";
  EXPECT_EQ(record.messages.size(), 3u) << "fed back in the stage's dialog";
  feed(llm_answered{"no code this time", false, 0, 0});
  EXPECT_EQ(log.back(), "FEEDBACK->SUCCESS");
  EXPECT_EQ(record.proposal, source_of(1));
  EXPECT_EQ(record.optimize_calls_used, 2u);
  EXPECT_EQ(record.total_calls, 3u);
  EXPECT_EQ(record.versions.size(), 1u);
  // The kept version's passing verdict is the session's again, not the failed one's.
  ASSERT_NE(record.verdict.test(), nullptr);
  EXPECT_EQ(record.verdict.test()->outcome, outcome::pass);
  EXPECT_NE(record.end_reason.find("its 2 optimize calls are spent"), std::string::npos)
      << record.end_reason;
}

TEST_F(OptimizeStage, ATimingCheckThatFiresKeepsTheProvedKernelUntimed) {
  begin(optimizing_record(3));
  prove(1);
  auto refused = timed(20);
  refused.result.outcome = outcome::cheat_detected;
  refused.result.failure = test_failure{.message = "work on a side stream"};
  feed(refused);
  EXPECT_EQ(log.back(), "OPTIMIZE->SUCCESS");
  EXPECT_EQ(record.optimize_calls_used, 0u);
  EXPECT_EQ(record.versions[0].timing_error, "cheat_detected: work on a side stream");
  EXPECT_NE(record.end_reason.find("kept version 1 of 1 (not timed)"), std::string::npos)
      << record.end_reason;
}

TEST_F(OptimizeStage, HarnessFaultsRetryTheBenchmarkAndACancelKeepsTheProvedKernel) {
  begin(optimizing_record(3));
  prove(1);
  feed(harness_faulted{"worker lost"});
  EXPECT_EQ(record.state, session_state::optimize);
  EXPECT_EQ(std::get<benchmark_candidate>(action()).delay, 1000ms);
  feed(timed(20));
  feed(cancel_requested{"by the user"});
  EXPECT_EQ(log.back(), "GENERATE->SUCCESS");
  EXPECT_EQ(record.proposal, source_of(1));
  EXPECT_NE(record.end_reason.find("cancelled: by the user"), std::string::npos);
}

TEST_F(OptimizeStage, InterpreterTimingsSayTheyMeasureNoSpeed) {
  begin(optimizing_record(1));
  prove(1);
  feed(timed(20, std::string{logic_only_timer}));
  EXPECT_NE(last_prompt().find("say nothing about speed on a GPU"), std::string::npos);
}

TEST_F(OptimizeStage, SuccessPutsEveryProvedVersionInTheLibraryTheKeptOneCurrent) {
  begin(optimizing_record(1));
  prove(1);
  feed(timed(20));
  prove(2);
  feed(timed(5));
  record.versions[0].proved_at_ms = 100;
  record.versions[1].proved_at_ms = 200;
  auto batch = checkpoint(record, {}, 150);
  std::map<std::string, kernel_record> kernels; // by source
  for (const auto& op : batch.ops)
    if (op.family == family::kernels) {
      auto kernel = decode_kernel(op.value.value_or(""));
      ASSERT_TRUE(kernel) << render(kernel.error());
      kernels[kernel->source] = *kernel;
    }
  ASSERT_EQ(kernels.size(), 2u);
  const auto& slow = kernels.at(source_of(1));
  const auto& fast = kernels.at(source_of(2));
  EXPECT_EQ(slow.accepted_at_ms, 100);
  EXPECT_GT(fast.accepted_at_ms, slow.accepted_at_ms) << "the kept version is the newest";
  ASSERT_EQ(slow.timings.size(), 1u);
  EXPECT_DOUBLE_EQ(slow.timings[0].speedup, 0.5);
  ASSERT_EQ(fast.timings.size(), 1u);
  EXPECT_DOUBLE_EQ(fast.timings[0].speedup, 2);
  EXPECT_EQ(fast.timings[0].fingerprint, "fp1");
  EXPECT_EQ(fast.llm_calls, 2u);
  EXPECT_EQ(slow.llm_calls, 1u);
  EXPECT_TRUE(batch.sync);
}

TEST_F(OptimizeStage, LogicOnlyTimingsStayOutOfTheLibrary) {
  begin(optimizing_record(1));
  prove(1);
  feed(timed(20, std::string{logic_only_timer}));
  prove(2);
  feed(timed(40, std::string{logic_only_timer}));
  auto batch = checkpoint(record, {}, 150);
  size_t kernels = 0;
  for (const auto& op : batch.ops)
    if (op.family == family::kernels) {
      ++kernels;
      EXPECT_TRUE(decode_kernel(op.value.value_or(""))->timings.empty());
    }
  EXPECT_EQ(kernels, 2u);
}

TEST(SessionRecord, CorruptBytesAreErrorsNotCrashes) {
  for (std::string bytes : {std::string{}, std::string{"\xc1"}, std::string{"\x93\x01\x02\x03"}}) {
    auto decoded = decode_record(bytes);
    ASSERT_FALSE(decoded);
    EXPECT_EQ(decoded.error().code(), static_cast<uint8_t>(errc::store_corrupt));
  }
  auto other_schema = json::to_msgpack(json{{"schema", 99}});
  auto decoded =
      decode_record({reinterpret_cast<const char*>(other_schema.data()), other_schema.size()});
  ASSERT_FALSE(decoded);
  EXPECT_EQ(render(decoded.error()), "store_corrupt: session record: schema 99, expected 1");
}

// Records stored the verdict as the worker's result map with the hosts beside its keys; the
// typed verdict reads them and writes the same keys back.
TEST(SessionRecord, VerdictsStoredAsTheWorkersMapDecodeTyped) {
  json old = {{"schema", 1},
              {"session_id", "c1/exp"},
              {"state", "SUCCESS"},
              {"verdict",
               {{"outcome", "pass"},
                {"tests_run", 12},
                {"tests_passed", 12},
                {"per_dtype",
                 {{"float32",
                   {{"run", 12},
                    {"passed", 12},
                    {"outcome", "pass"},
                    {"sets", {{"sample_inputs", {{"run", 12}, {"passed", 12}}}}}}}}},
                {"failure", nullptr},
                {"compile_s", 1.5},
                {"run_s", 0},
                {"sandbox", {{"namespaces", "on"}}},
                {"confirmed_on", {"a", "b"}}}}};
  auto bytes = json::to_msgpack(old);
  auto decoded = decode_record({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  ASSERT_TRUE(decoded) << render(decoded.error());
  ASSERT_TRUE(decoded->verdict.test());
  const auto& verdict = *decoded->verdict.test();
  EXPECT_EQ(verdict.outcome, outcome::pass);
  EXPECT_EQ(verdict.tests_run, 12);
  EXPECT_EQ(verdict.per_dtype.at("float32").sets.at("sample_inputs").passed, 12);
  EXPECT_EQ(verdict.compile_s, 1.5);
  EXPECT_EQ(verdict.sandbox.at("namespaces"), "on");
  EXPECT_EQ(decoded->verdict.hosts.confirmed_on, (std::vector<std::string>{"a", "b"}));
  // Written back with every key of the result (the empty ones included) and the hosts beside.
  auto again = json::from_msgpack(encode_record(*decoded))["verdict"];
  for (const auto& [key, value] : old["verdict"].items())
    EXPECT_TRUE(again.contains(key)) << key;
  EXPECT_EQ(again["confirmed_on"], old["verdict"]["confirmed_on"]);
  auto reread = decode_record(encode_record(*decoded));
  ASSERT_TRUE(reread) << render(reread.error());
  EXPECT_EQ(*reread->verdict.test(), verdict);
  EXPECT_EQ(reread->verdict.hosts.confirmed_on, decoded->verdict.hosts.confirmed_on);

  auto failed = *decoded;
  failed.verdict = {test_result(outcome::accuracy_error,
                                test_failure{.message = "values differ",
                                             .diff = opforge::testing::values_differ(0.5)}),
                    {.passed_on = {"a"}, .failed_on = "b"}};
  auto stored = json::from_msgpack(encode_record(failed));
  EXPECT_EQ(stored["verdict"]["failure"]["diff"], (json{{"reason", "values differ"},
                                                        {"actual_shape", json::array({4})},
                                                        {"expected_shape", json::array({4})},
                                                        {"actual_dtype", "float32"},
                                                        {"expected_dtype", "float32"},
                                                        {"max_abs_error", 0.5},
                                                        {"mismatched", 1},
                                                        {"total", 4},
                                                        {"first_mismatches", json::array()}}));
  EXPECT_EQ(stored["verdict"]["disagreement"], (json{{"passed_on", {"a"}}, {"failed_on", "b"}}));
  auto back = decode_record(encode_record(failed));
  ASSERT_TRUE(back) << render(back.error());
  EXPECT_EQ(back->verdict.test()->failure->diff, opforge::testing::values_differ(0.5));
  EXPECT_EQ(back->verdict.hosts.passed_on, std::vector<std::string>{"a"});
  EXPECT_EQ(back->verdict.hosts.failed_on, "b");

  auto linted = *decoded;
  linted.state = session_state::test;
  linted.verdict = {lint_bad, {}};
  back = decode_record(encode_record(linted));
  ASSERT_TRUE(back) << render(back.error());
  ASSERT_TRUE(std::holds_alternative<contract::lint_result>(back->verdict.result));
  EXPECT_EQ(std::get<contract::lint_result>(back->verdict.result), lint_bad);

  linted.verdict = {};
  back = decode_record(encode_record(linted));
  ASSERT_TRUE(back) << render(back.error());
  EXPECT_TRUE(std::holds_alternative<std::monostate>(back->verdict.result));
  EXPECT_TRUE(json::from_msgpack(encode_record(linted))["verdict"].is_null());

  old["verdict"] = {{"outcome", "pass"}}; // not a whole test result
  bytes = json::to_msgpack(old);
  auto corrupt = decode_record({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  ASSERT_FALSE(corrupt);
  EXPECT_EQ(corrupt.error().code(), static_cast<uint8_t>(errc::store_corrupt));
  EXPECT_NE(render(corrupt.error()).find("verdict: "), std::string::npos)
      << render(corrupt.error());
}

// Campaign states are stored by their contract names, as they were when they were strings; a name
// this build does not know makes the record unreadable rather than guessed.
TEST(CampaignRecord, StatesAreStoredByTheirNames) {
  stored_campaign campaign{.state = contract::campaign_state::cancelled, .ended_ms = 7};
  campaign.spec.campaign_id = "c1";
  auto bytes = encode_campaign(campaign);
  EXPECT_EQ(json::from_msgpack(bytes)["state"], "cancelled");
  auto decoded = decode_campaign(bytes);
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(decoded->state, contract::campaign_state::cancelled);
  EXPECT_EQ(decoded->spec.campaign_id, "c1");

  for (const auto* name : {"running", "done", "rejected"}) {
    auto old = json::to_msgpack(json{{"spec", {{"campaign_id", "c0"}}}, {"state", name}});
    auto read = decode_campaign({reinterpret_cast<const char*>(old.data()), old.size()});
    ASSERT_TRUE(read) << render(read.error());
    EXPECT_EQ(to_string(read->state), name);
  }
  auto unknown = json::to_msgpack(json{{"spec", {{"campaign_id", "c0"}}}, {"state", "paused"}});
  auto corrupt = decode_campaign({reinterpret_cast<const char*>(unknown.data()), unknown.size()});
  ASSERT_FALSE(corrupt);
  EXPECT_EQ(corrupt.error().code(), static_cast<uint8_t>(errc::store_corrupt));
  EXPECT_NE(render(corrupt.error()).find("campaign state \"paused\""), std::string::npos)
      << render(corrupt.error());
}

// Records and campaigns stored before the library kept aten overloads and toolchain versions.
TEST(SessionRecord, RecordsWrittenBeforeTheLibraryFieldsDecodeWithThemEmpty) {
  session_record r;
  r.session_id = "c1/abs";
  r.op = "abs";
  r.state = session_state::success;
  r.toolchain_versions = {{"torch", "2.13.0"}};
  r.aten_overloads = {"aten::abs"};
  auto stored = json::from_msgpack(encode_record(r));
  EXPECT_EQ(stored["aten_overloads"], json({"aten::abs"}));
  stored.erase("aten_overloads");
  stored.erase("toolchain_versions");
  auto old = json::to_msgpack(stored);
  auto decoded = decode_record({reinterpret_cast<const char*>(old.data()), old.size()});
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(decoded->op, "abs");
  EXPECT_TRUE(decoded->aten_overloads.empty());
  EXPECT_TRUE(decoded->toolchain_versions.empty());

  stored_campaign campaign;
  campaign.spec.operators.push_back({"abs", "", "unary", "abs(x)", {"float32"}, {"aten::abs"}});
  auto spec = json::from_msgpack(encode_campaign(campaign));
  spec["spec"]["operators"][0].erase("aten_overloads");
  auto old_spec = json::to_msgpack(spec);
  auto restored =
      decode_campaign({reinterpret_cast<const char*>(old_spec.data()), old_spec.size()});
  ASSERT_TRUE(restored) << render(restored.error());
  ASSERT_EQ(restored->spec.operators.size(), 1u);
  EXPECT_EQ(restored->spec.operators[0].dtypes, std::vector<std::string>{"float32"});
  EXPECT_TRUE(restored->spec.operators[0].aten_overloads.empty());
}

// A repair campaign is pinned to the toolchain its kernel regressed on, after a restart too; specs
// stored before the pin existed run anywhere.
TEST(CampaignRecord, TheFingerprintIsStoredAndOldSpecsDecodeWithoutOne) {
  stored_campaign campaign;
  campaign.spec.campaign_id = "c1";
  campaign.spec.fingerprint = "1a1c5f2a38e568a5";
  auto stored = json::from_msgpack(encode_campaign(campaign));
  EXPECT_EQ(stored["spec"]["fingerprint"], "1a1c5f2a38e568a5");
  auto decoded = decode_campaign(encode_campaign(campaign));
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(decoded->spec.fingerprint, "1a1c5f2a38e568a5");

  stored["spec"].erase("fingerprint");
  auto old = json::to_msgpack(stored);
  auto legacy = decode_campaign({reinterpret_cast<const char*>(old.data()), old.size()});
  ASSERT_TRUE(legacy) << render(legacy.error());
  EXPECT_EQ(legacy->spec.campaign_id, "c1");
  EXPECT_EQ(legacy->spec.fingerprint, "");
}

TEST(SessionTransition, RoundTripsAndReadsEventsWrittenBeforeContent) {
  session_transition t{7,
                       session_state::generate,
                       session_state::parse,
                       "answer 1 of dialog 1",
                       1700000000000,
                       "the whole answer\n```python\npass\n```"};
  auto decoded = decode_transition(encode_transition(t));
  ASSERT_TRUE(decoded) << render(decoded.error());
  EXPECT_EQ(decoded->revision, 7u);
  EXPECT_EQ(decoded->from, session_state::generate);
  EXPECT_EQ(decoded->to, session_state::parse);
  EXPECT_EQ(decoded->detail, t.detail);
  EXPECT_EQ(decoded->at_ms, t.at_ms);
  EXPECT_EQ(decoded->content, t.content);

  auto old = json::to_msgpack(json{
      {"revision", 3}, {"from", "LINT"}, {"to", "TEST"}, {"detail", "lint clean"}, {"at_ms", 5}});
  auto legacy = decode_transition({reinterpret_cast<const char*>(old.data()), old.size()});
  ASSERT_TRUE(legacy) << render(legacy.error());
  EXPECT_EQ(legacy->to, session_state::test);
  EXPECT_EQ(legacy->detail, "lint clean");
  EXPECT_EQ(legacy->content, "");

  for (std::string bytes : {std::string{}, std::string{"\xc1"}, std::string{"\x93\x01\x02\x03"}}) {
    auto corrupt = decode_transition(bytes);
    ASSERT_FALSE(corrupt);
    EXPECT_EQ(corrupt.error().code(), static_cast<uint8_t>(errc::store_corrupt));
  }
}
