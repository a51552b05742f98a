#include "actors/sessions/session_machine.hpp"

#include "actors/sessions/answer_parser.hpp"
#include "actors/sessions/feedback.hpp"

namespace opforge {

namespace {

std::string first_line(std::string_view text, size_t limit = 200) {
  auto line = text.substr(0, text.find('\n'));
  return truncate_middle(line, limit);
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items)
    out += (out.empty() ? "" : separator) + item;
  return out;
}

// One step in progress: the record, the transitions made so far, and the prompts to build.
class stepper {
public:
  stepper(session_record record, const session_context& context)
      : rec_{std::move(record)}, ctx_{context} {}

  step_result done() && { return {std::move(rec_), std::move(transitions_)}; }

  session_record& rec() { return rec_; }

  void move_to(session_state to, std::string detail, std::string content = {}) {
    transitions_.push_back(
        {++rec_.revision, rec_.state, to, std::move(detail), 0, std::move(content)});
    rec_.state = to;
  }

  void fail(std::string reason) {
    rec_.end_reason = reason;
    move_to(session_state::failed, std::move(reason));
  }

  bool fits_context() const {
    const auto& b = rec_.budgets;
    return b.context_window_tokens == 0 ||
           estimated_tokens(rec_.messages) + b.reply_reserve_tokens <= b.context_window_tokens;
  }

  std::string context_usage() const {
    return "~" + std::to_string(estimated_tokens(rec_.messages)) + " tokens + " +
           std::to_string(rec_.budgets.reply_reserve_tokens) + " for the answer, window " +
           std::to_string(rec_.budgets.context_window_tokens);
  }

  // Starts the next dialog: from the latest proposal (or the repair seed) with the debug prompt,
  // or from scratch with the initial prompt. The record is in PROMPT.
  void open_dialog() {
    const auto& b = rec_.budgets;
    if (rec_.dialog >= b.max_dialogs) {
      fail("budget spent: " + std::to_string(rec_.dialog) + " dialogs of at most " +
           std::to_string(b.max_calls_per_dialog) + " calls (" + std::to_string(rec_.total_calls) +
           " calls in all)");
      return;
    }
    ++rec_.dialog;
    rec_.calls_in_dialog = 0;
    rec_.messages.clear();
    const auto& seed = rec_.proposal.empty() ? rec_.seed_kernel : rec_.proposal;
    prompt_values values{{"op", rec_.op},
                         {"wrapper", rec_.wrapper},
                         {"dtypes", join(rec_.dtypes, ", ")},
                         {"docstring", rec_.docstring},
                         {"examples", ctx_.examples}};
    auto kind = prompt_kind::initial;
    if (!seed.empty()) {
      kind = prompt_kind::debug_existing;
      values["kernel"] = seed;
      values["status"] = rec_.last_feedback;
    }
    rec_.messages.push_back({"user", ctx_.templates.render(kind, values)});
    if (!fits_context()) {
      fail("the first prompt of dialog " + std::to_string(rec_.dialog) +
           " does not fit the endpoint's context window (" + context_usage() + ")");
      return;
    }
    move_to(session_state::generate,
            "dialog " + std::to_string(rec_.dialog) + " of " + std::to_string(b.max_dialogs) +
                ": " + to_string(kind) + " prompt",
            rec_.messages.back().content);
  }

  // Records the verdict and either asks again in this dialog or opens the next one: when this
  // dialog has used its calls, or the feedback would push it past the context window.
  void feed_back(std::string prompt, session_attempt attempt) {
    attempt.dialog = rec_.dialog;
    attempt.call = rec_.calls_in_dialog;
    auto summary = to_string(attempt.stage) + ": " + to_string(attempt.outcome) +
                   (attempt.detail.empty() ? "" : " (" + attempt.detail + ")");
    rec_.history.push_back(std::move(attempt));
    rec_.last_feedback = prompt;
    move_to(session_state::feedback, std::move(summary), prompt);
    if (rec_.calls_in_dialog >= rec_.budgets.max_calls_per_dialog) {
      move_to(session_state::prompt, "dialog " + std::to_string(rec_.dialog) + " used its " +
                                         std::to_string(rec_.calls_in_dialog) + " calls");
      open_dialog();
      return;
    }
    rec_.messages.push_back({"user", std::move(prompt)});
    if (!fits_context()) {
      auto usage = context_usage();
      rec_.messages.pop_back();
      move_to(session_state::prompt, "dialog " + std::to_string(rec_.dialog) +
                                         " would exceed the context window (" + usage + ")");
      open_dialog();
      return;
    }
    move_to(session_state::generate, "call " + std::to_string(rec_.calls_in_dialog + 1) +
                                         " of dialog " + std::to_string(rec_.dialog));
  }

  void fault(session_state stays, const char* who, const std::string& detail) {
    ++rec_.consecutive_faults;
    ++rec_.total_faults;
    move_to(stays, std::string{who} + " fault, retry " + std::to_string(rec_.consecutive_faults) +
                       ": " + first_line(detail));
  }

  void on(const llm_answered& answer) {
    ++rec_.calls_in_dialog;
    ++rec_.total_calls;
    rec_.consecutive_faults = 0;
    rec_.prompt_tokens += answer.prompt_tokens;
    rec_.completion_tokens += answer.completion_tokens;
    rec_.messages.push_back({"assistant", answer.content});
    move_to(session_state::parse,
            "answer " + std::to_string(rec_.calls_in_dialog) + " of dialog " +
                std::to_string(rec_.dialog) +
                (answer.truncated ? " (cut off at the token limit)" : ""),
            answer.content);
    auto parsed = parse_answer(answer.content, rec_.wrapper);
    if (auto* problem = std::get_if<format_problem>(&parsed)) {
      auto what = answer.truncated ? "it was cut off at the token limit, so keep it shorter; and " +
                                         problem->what
                                   : problem->what;
      feed_back(format_feedback(ctx_.templates, what, rec_.wrapper),
                {0, 0, contract::attempt_stage::format, contract::attempt_outcome::format_error,
                 first_line(what)});
      return;
    }
    auto& candidate = std::get<parsed_candidate>(parsed);
    rec_.proposal = std::move(candidate.source);
    move_to(session_state::lint,
            "kernels " + join(candidate.kernels, ", ") +
                (candidate.renamed_from.empty() ? std::string{}
                                                : "; wrapper `" + candidate.renamed_from +
                                                      "` renamed to `" + rec_.wrapper + "`"));
  }

  void on(const llm_context_exhausted& event) {
    if (rec_.calls_in_dialog == 0) {
      fail("the first prompt of dialog " + std::to_string(rec_.dialog) +
           " does not fit the endpoint's context: " + first_line(event.detail));
      return;
    }
    rec_.consecutive_faults = 0;
    move_to(session_state::prompt, "endpoint: context exhausted in dialog " +
                                       std::to_string(rec_.dialog) + ": " +
                                       first_line(event.detail));
    open_dialog();
  }

  void on(const llm_faulted& event) {
    if (event.permanent)
      fail("the endpoint refused the request for good: " + first_line(event.detail));
    else
      fault(session_state::generate, "endpoint", event.detail);
  }

  // The waiting request is asked again at once of the new endpoint: its faults were the old one's.
  void on(const endpoint_moved& event) {
    auto from = rec_.endpoint;
    rec_.endpoint = event.endpoint;
    rec_.model = event.model;
    rec_.consecutive_faults = 0;
    move_to(session_state::generate, "failover from endpoint " + from + " to " + event.endpoint +
                                         ": " + first_line(event.reason));
  }

  void on(const lint_finished& event) {
    const auto& result = event.result;
    rec_.consecutive_faults = 0;
    rec_.verdict = {result, {}};
    if (result.ok && !result.syntax_error) {
      move_to(session_state::test, "lint clean");
      return;
    }
    std::vector<std::string> rules;
    if (result.syntax_error)
      rules.push_back("syntax_error");
    for (const auto& v : result.violations)
      rules.push_back(v.rule);
    // The worker's gate says what the violations are: a fallback (the wrapper computes with
    // torch) or a cheat is cheat_detected, the rest lint_violation.
    auto outcome = result.gate_outcome == contract::outcome::pass
                       ? contract::attempt_outcome::lint_violation
                       : contract::to_attempt_outcome(result.gate_outcome);
    auto summary = join(rules, ", ");
    if (!result.gate_check.empty())
      summary = result.gate_check + ": " + summary;
    feed_back(lint_feedback(ctx_.templates, result, rec_.wrapper),
              {0, 0, contract::attempt_stage::lint, outcome, first_line(summary)});
  }

  void on(const test_finished& event) {
    const auto& result = event.result;
    rec_.toolchain = event.toolchain;
    rec_.device_kind = event.device_kind;
    rec_.toolchain_versions = event.toolchain_versions;
    if (result.outcome == contract::outcome::pass) {
      // A pass is believed only when it says it ran something and everything it ran passed.
      auto run = result.tests_run;
      auto passed = result.tests_passed;
      if (run <= 0 || passed != run) {
        fault(session_state::test, "harness",
              "pass with " + std::to_string(passed) + " of " + std::to_string(run) +
                  " tests passed");
        return;
      }
      rec_.consecutive_faults = 0;
      rec_.verdict = {result, event.hosts};
      rec_.history.push_back({rec_.dialog, rec_.calls_in_dialog, contract::attempt_stage::test,
                              contract::to_attempt_outcome(result.outcome),
                              std::to_string(run) + " tests"});
      auto tested = dtypes_of_pass(result, rec_.dtypes);
      rec_.end_reason = "passed " + std::to_string(run) + " tests on " + join(tested.passed, ", ");
      for (const auto& [dtype, reason] : tested.skipped)
        rec_.end_reason += "; skipped " + dtype + ": " + reason;
      move_to(session_state::success, rec_.end_reason);
      return;
    }
    auto failure = result.failure.value_or(contract::test_failure{});
    auto prompt = test_feedback(ctx_.templates, result, rec_.wrapper);
    if (!prompt) {
      // Only harness_error is not fed back besides pass: the worker's fault, not the candidate's.
      fault(session_state::test, "harness", to_string(result.outcome) + ": " + failure.message);
      return;
    }
    rec_.consecutive_faults = 0;
    rec_.verdict = {result, event.hosts};
    auto model = model_set_failure(failure);
    feed_back(std::move(*prompt),
              {0, 0, contract::attempt_stage::test, contract::to_attempt_outcome(result.outcome),
               first_line((failure.dtype.empty() ? "" : failure.dtype + ": ") +
                          (model.empty() ? "" : model + ": ") + failure.message)});
  }

  void on(const harness_faulted& event) { fault(rec_.state, "harness", event.detail); }

  void on(const cancel_requested& event) { fail("cancelled: " + event.reason); }

private:
  session_record rec_;
  const session_context& ctx_;
  std::vector<session_transition> transitions_;
};

// Whether `event` is what a record in `state` waits for.
bool expects(session_state state, const session_event& event) {
  if (state == session_state::success || state == session_state::failed)
    return false;
  return std::visit(
      [state](const auto& e) {
        using event_type = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<event_type, cancel_requested>)
          return true;
        else if constexpr (std::is_same_v<event_type, lint_finished>)
          return state == session_state::lint;
        else if constexpr (std::is_same_v<event_type, test_finished>)
          return state == session_state::test;
        else if constexpr (std::is_same_v<event_type, harness_faulted>)
          return state == session_state::lint || state == session_state::test;
        else
          return state == session_state::generate;
      },
      event);
}

} // namespace

std::chrono::milliseconds retry_delay(uint32_t consecutive_faults) {
  using std::chrono::milliseconds;
  if (consecutive_faults == 0)
    return milliseconds{0};
  auto shift = std::min<uint32_t>(consecutive_faults - 1, 6);
  return std::min(milliseconds{1000 << shift}, milliseconds{60'000});
}

uint64_t estimated_tokens(const std::vector<session_message>& messages) {
  uint64_t chars = 0;
  for (const auto& m : messages)
    chars += m.content.size();
  return chars / 4;
}

session_action next_action(const session_record& record) {
  auto delay = retry_delay(record.consecutive_faults);
  switch (record.state) {
  case session_state::generate:
    return ask_llm{record.messages, delay};
  case session_state::lint:
    return lint_candidate{record.proposal, delay};
  case session_state::test:
    return test_candidate{record.proposal, delay};
  case session_state::success:
    return finish_session{true, record.end_reason};
  case session_state::failed:
    return finish_session{false, record.end_reason};
  case session_state::prompt:
  case session_state::parse:
  case session_state::feedback:
    break;
  }
  return finish_session{false, std::string{"no action for a record in "} + to_string(record.state) +
                                   " (not started)"};
}

step_result start(session_record record, const session_context& context) {
  stepper s{std::move(record), context};
  if (s.rec().state == session_state::prompt && s.rec().dialog == 0)
    s.open_dialog();
  return std::move(s).done();
}

step_result step(session_record record, const session_event& event,
                 const session_context& context) {
  if (!expects(record.state, event))
    return {std::move(record), {}};
  stepper s{std::move(record), context};
  std::visit([&s](const auto& e) { s.on(e); }, event);
  return std::move(s).done();
}

} // namespace opforge
