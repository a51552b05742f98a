#include "actors/sessions/session_machine.hpp"

#include "actors/library/kernels.hpp"
#include "actors/sessions/answer_parser.hpp"
#include "actors/sessions/feedback.hpp"
#include "actors/sessions/repeated_failure.hpp"

#include <algorithm>

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

// What a passing verdict covers, as the end reason says it.
std::string passed_text(const contract::test_result& result,
                        const std::vector<std::string>& requested) {
  auto tested = dtypes_of_pass(result, requested);
  auto text =
      "passed " + std::to_string(result.tests_run) + " tests on " + join(tested.passed, ", ");
  for (const auto& [dtype, reason] : tested.skipped)
    text += "; skipped " + dtype + ": " + reason;
  return text;
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

  // A session with a proved version never fails: whatever ends it keeps its fastest.
  void fail(std::string reason) {
    if (!rec_.versions.empty()) {
      keep_fastest(std::move(reason));
      return;
    }
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
      if (auto repeated = repeated_failure_reason(rec_); !repeated.empty())
        return fail(std::move(repeated));
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
    move_to(session_state::feedback, summary, prompt);
    if (rec_.optimizing) {
      feed_back_optimizing(std::move(prompt), summary);
      return;
    }
    if (dialog_repeats_failure(rec_)) {
      move_to(session_state::prompt,
              "dialog " + std::to_string(rec_.dialog) + " failed the same way " +
                  std::to_string(rec_.budgets.same_failure_limit) + " times in a row");
      open_dialog();
      return;
    }
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

  uint32_t optimize_calls_left() const {
    const auto& b = rec_.budgets;
    return b.optimize_calls > rec_.optimize_calls_used ? b.optimize_calls - rec_.optimize_calls_used
                                                       : 0;
  }

  std::string optimize_calls_spent() const {
    return "its " + std::to_string(rec_.budgets.optimize_calls) + " optimize calls are spent";
  }

  // A failed optimized version is fed back within the stage's calls; it never replaces the kept.
  void feed_back_optimizing(std::string prompt, const std::string& summary) {
    if (optimize_calls_left() == 0) {
      keep_fastest(optimize_calls_spent() + " (the last answer: " + summary + ")");
      return;
    }
    rec_.messages.push_back({"user", std::move(prompt)});
    if (!fits_context()) {
      auto usage = context_usage();
      rec_.messages.pop_back();
      move_to(session_state::prompt,
              "the optimize dialog would exceed the context window (" + usage + ")");
      open_optimize_dialog();
      return;
    }
    move_to(session_state::generate, "optimize call " +
                                         std::to_string(rec_.optimize_calls_used + 1) + " of " +
                                         std::to_string(rec_.budgets.optimize_calls));
  }

  // Opens the stage's dialog: the kept version with its timings. The record is in PROMPT.
  void open_optimize_dialog() {
    rec_.optimizing = true;
    rec_.calls_in_dialog = 0;
    rec_.messages.clear();
    auto kept = *fastest_version(rec_);
    const auto& best = rec_.versions[kept];
    const auto& last = rec_.versions.back();
    prompt_values values{{"op", rec_.op},
                         {"wrapper", rec_.wrapper},
                         {"dtypes", join(rec_.dtypes, ", ")},
                         {"docstring", rec_.docstring},
                         {"kernel", best.source},
                         {"timings", timing_table(best.timings)},
                         {"speedup", significant(best.speedup)},
                         {"target", significant(rec_.budgets.optimize_target_speedup)}};
    if (best.timer == logic_only_timer)
      values["timer_note"] =
          "These times were taken on Triton's interpreter (timer " + best.timer +
          "): they check the timing protocol's logic and say nothing about speed on a GPU.";
    if (&last != &best)
      values["last_version"] =
          "It passed the tests, but " +
          (last.timing_error.empty() ? "at a speedup of " + significant(last.speedup) +
                                           " it was not faster than the implementation above"
                                     : "its timing was refused: " + last.timing_error) +
          ". It was not kept.";
    rec_.messages.push_back({"user", ctx_.templates.render(prompt_kind::optimize, values)});
    if (!fits_context()) {
      keep_fastest("the optimize prompt does not fit the endpoint's context window (" +
                   context_usage() + ")");
      return;
    }
    move_to(session_state::generate,
            "optimize call " + std::to_string(rec_.optimize_calls_used + 1) + " of " +
                std::to_string(rec_.budgets.optimize_calls) + ": " +
                to_string(prompt_kind::optimize) + " prompt for version " +
                std::to_string(kept + 1) + " (speedup " + significant(best.speedup) + ", target " +
                significant(rec_.budgets.optimize_target_speedup) + ")",
            rec_.messages.back().content);
  }

  // After a version was timed (or found to be one timed before): the stage asks for a faster
  // one, or ends.
  void next_round(std::string detail) {
    const auto& best = rec_.versions[*fastest_version(rec_)];
    if (best.timings.empty()) {
      keep_fastest(detail + "; the proved kernel could not be timed, so there is no speed to "
                            "improve on");
      return;
    }
    if (best.speedup >= rec_.budgets.optimize_target_speedup) {
      keep_fastest(detail + "; the target speedup " +
                   significant(rec_.budgets.optimize_target_speedup) + " is reached");
      return;
    }
    if (optimize_calls_left() == 0) {
      keep_fastest(detail + "; " + optimize_calls_spent());
      return;
    }
    move_to(session_state::prompt, std::move(detail));
    open_optimize_dialog();
  }

  // Ends the session in SUCCESS with its fastest proved version as its kernel.
  void keep_fastest(const std::string& reason) {
    auto kept = *fastest_version(rec_);
    const auto& v = rec_.versions[kept];
    rec_.optimizing = false;
    if (rec_.proposal != v.source) {
      rec_.proposal = v.source;
      rec_.verdict = {v.verdict, {}};
    }
    rec_.toolchain = v.toolchain;
    rec_.device_kind = v.device_kind;
    rec_.toolchain_versions = v.toolchain_versions;
    rec_.end_reason =
        passed_text(v.verdict, rec_.dtypes) + "; kept version " + std::to_string(kept + 1) +
        " of " + std::to_string(rec_.versions.size()) +
        (v.timings.empty() ? " (not timed)" : " (speedup " + significant(v.speedup) + ")") + ": " +
        reason;
    move_to(session_state::success, rec_.end_reason);
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
    if (rec_.optimizing)
      ++rec_.optimize_calls_used;
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
    if (rec_.optimizing)
      open_optimize_dialog();
    else
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
      if (!rec_.budgets.optimize) {
        rec_.end_reason = passed_text(result, rec_.dtypes);
        move_to(session_state::success, rec_.end_reason);
        return;
      }
      auto same = std::find_if(rec_.versions.begin(), rec_.versions.end(),
                               [&](const auto& v) { return v.source == rec_.proposal; });
      if (same != rec_.versions.end()) {
        next_round("the answer is version " + std::to_string(same - rec_.versions.begin() + 1) +
                   " again");
        return;
      }
      rec_.versions.push_back({.source = rec_.proposal,
                               .verdict = result,
                               .toolchain = rec_.toolchain,
                               .device_kind = rec_.device_kind,
                               .toolchain_versions = rec_.toolchain_versions,
                               .llm_calls = rec_.total_calls});
      move_to(session_state::optimize, "version " + std::to_string(rec_.versions.size()) + " " +
                                           passed_text(result, rec_.dtypes) +
                                           "; timing it against the baseline");
      return;
    }
    auto failure = result.failure.value_or(contract::test_failure{});
    if (auto why = unavoidable_defect(result); !why.empty()) {
      // The device fails every answer the same way: recorded as its verdict, not the kernel's,
      // and the session ends instead of burning calls (a proved version is still kept).
      rec_.consecutive_faults = 0;
      rec_.verdict = {result, event.hosts};
      rec_.history.push_back({rec_.dialog, rec_.calls_in_dialog, contract::attempt_stage::test,
                              contract::attempt_outcome::device_defect, first_line(why)});
      fail(why);
      return;
    }
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

  void on(const benchmark_finished& event) {
    const auto& result = event.result;
    rec_.consecutive_faults = 0;
    auto& v = rec_.versions.back();
    v.benchmarked = true;
    v.timer = result.timer;
    v.timings = class_timings(result, event.fingerprint, event.device_kind, event.measured_at_ms);
    auto detail = "version " + std::to_string(rec_.versions.size());
    if (!v.timings.empty()) {
      v.speedup = result.geomean_speedup;
      detail += " timed: speedup " + significant(v.speedup) + " over " + result.baseline + " (" +
                result.timer + ")";
    } else {
      v.timing_error = result.outcome != contract::outcome::pass
                           ? to_string(result.outcome) +
                                 (result.failure ? ": " + first_line(result.failure->message) : "")
                           : std::string{"the benchmark timed no input"};
      detail += " not timed: " + v.timing_error;
    }
    next_round(std::move(detail));
  }

  void on(const harness_faulted& event) { fault(rec_.state, "harness", event.detail); }

  void on(const cancel_requested& event) { fail("cancelled: " + event.reason); }

  void on(const tokens_spent& event) { fail("token budget spent: " + event.detail); }

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
        else if constexpr (std::is_same_v<event_type, benchmark_finished>)
          return state == session_state::optimize;
        else if constexpr (std::is_same_v<event_type, harness_faulted>)
          return state == session_state::lint || state == session_state::test ||
                 state == session_state::optimize;
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

std::optional<size_t> fastest_version(const session_record& record) {
  const auto& versions = record.versions;
  if (versions.empty())
    return std::nullopt;
  std::optional<size_t> best;
  for (size_t i = 0; i < versions.size(); ++i) {
    const auto& v = versions[i];
    if (v.timings.empty())
      continue;
    if (!best) {
      best = i;
      continue;
    }
    const auto& b = versions[*best];
    auto relative = relative_time(v.timings, b.timings);
    if (relative ? *relative < 1 : v.speedup > b.speedup)
      best = i;
  }
  return best.value_or(0);
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
  case session_state::optimize:
    if (record.versions.empty())
      break;
    return benchmark_candidate{record.versions.back().source,
                               dtypes_of_pass(record.versions.back().verdict, record.dtypes).passed,
                               delay};
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
