#include "actors/sessions/feedback.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace opforge {

namespace {

// Field limits in characters. A prompt carries one failure; these keep it well under 4k tokens.
constexpr size_t compile_log_limit = 6000;
constexpr size_t backtrace_limit = 4000;
constexpr size_t diff_limit = 3000;
constexpr size_t short_field_limit = 1000;
constexpr size_t max_lint_items = 20;

// A JSON value as readable text: strings as they are, maps as "key: value" lines, arrays of
// scalars on one line.
std::string describe(const nlohmann::json& value) {
  if (value.is_string())
    return value.get<std::string>();
  if (value.is_object()) {
    std::string out;
    for (const auto& [key, item] : value.items()) {
      auto text = describe(item);
      out += key + (text.find('\n') == std::string::npos ? ": " : ":\n") + text + "\n";
    }
    if (!out.empty())
      out.pop_back();
    return out;
  }
  if (value.is_array() &&
      std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_primitive(); })) {
    std::string out = "[";
    for (const auto& item : value)
      out += (out.size() > 1 ? ", " : "") + describe(item);
    return out + "]";
  }
  return value.dump();
}

// The diff is compare.py's open map, kept as the worker's msgpack bytes (messages/contract.yaml);
// only its rendering for the prompt reads it.
std::string describe_diff(const std::optional<std::string>& diff) {
  if (!diff || diff->empty())
    return {};
  auto value = nlohmann::json::from_msgpack(diff->begin(), diff->end(), true, false);
  return value.is_discarded() ? std::string{} : describe(value);
}

std::string lint_report(const contract::lint_result& lint) {
  std::string report;
  if (const auto& syntax = lint.syntax_error)
    report += "- syntax error at line " + std::to_string(syntax->line) + ", column " +
              std::to_string(syntax->col) + ": " +
              truncate_middle(syntax->message, short_field_limit) + "\n";
  size_t shown = 0;
  for (const auto& v : lint.violations) {
    if (shown++ == max_lint_items) {
      report += "- ... and " + std::to_string(lint.violations.size() - max_lint_items) +
                " more violations\n";
      break;
    }
    report += "- line " + std::to_string(v.line) + ", column " + std::to_string(v.col) + " [" +
              truncate_middle(v.rule, 100) + "]: `" + truncate_middle(v.text, 200) + "`";
    if (!v.hint.empty())
      report += ": " + truncate_middle(v.hint, 400);
    report += "\n";
  }
  if (report.empty())
    report = "- the linter rejected the code without naming a rule\n";
  return report;
}

// The lint report of a test the worker's static gate refused (outcome lint_violation): its
// findings are "static: <rule> at line <n> `<text>`: <hint>", one per violation.
std::string static_refusal_report(const contract::test_failure& failure) {
  constexpr std::string_view prefix = "static: ";
  std::string report;
  size_t shown = 0;
  for (const auto& finding : failure.findings) {
    if (shown++ == max_lint_items) {
      report += "- ... and " + std::to_string(failure.findings.size() - max_lint_items) +
                " more violations\n";
      break;
    }
    auto text = truncate_middle(finding, short_field_limit);
    if (text.starts_with(prefix))
      text.erase(0, prefix.size());
    report += "- " + text + "\n";
  }
  if (report.empty())
    report = "- " + truncate_middle(failure.message, short_field_limit) + "\n";
  return report;
}

} // namespace

std::string truncate_middle(std::string_view text, size_t limit) {
  if (text.size() <= limit)
    return std::string{text};
  auto head = limit * 2 / 3;
  auto tail = limit - head;
  return std::string{text.substr(0, head)} + "\n[... " + std::to_string(text.size() - limit) +
         " characters left out ...]\n" + std::string{text.substr(text.size() - tail)};
}

dtypes_tested dtypes_of_pass(const contract::test_result& verdict,
                             const std::vector<std::string>& requested) {
  if (verdict.per_dtype.empty())
    return {requested, {}};
  dtypes_tested tested;
  for (const auto& dtype : requested) {
    auto entry = verdict.per_dtype.find(dtype);
    if (entry == verdict.per_dtype.end())
      continue;
    const auto& result = entry->second;
    if (result.outcome == contract::dtype_outcome::pass)
      tested.passed.push_back(dtype);
    else if (result.outcome == contract::dtype_outcome::skipped && !result.reason.empty())
      tested.skipped.emplace_back(dtype, result.reason);
  }
  return tested;
}

std::optional<prompt_kind> feedback_kind_for(contract::outcome test_outcome) {
  switch (test_outcome) {
  case contract::outcome::compile_error:
    return prompt_kind::feedback_compile_error;
  case contract::outcome::runtime_error:
    return prompt_kind::feedback_runtime_error;
  case contract::outcome::crash:
    return prompt_kind::feedback_crash;
  case contract::outcome::accuracy_error:
    return prompt_kind::feedback_accuracy;
  case contract::outcome::timeout:
    return prompt_kind::feedback_timeout;
  case contract::outcome::cheat_detected:
    return prompt_kind::feedback_cheat;
  case contract::outcome::lint_violation:
    return prompt_kind::feedback_lint;
  case contract::outcome::pass:
  case contract::outcome::harness_error:
    return std::nullopt;
  }
  return std::nullopt;
}

std::string format_feedback(const prompt_templates& templates, std::string_view problem,
                            std::string_view wrapper) {
  return templates.render(prompt_kind::feedback_format,
                          {{"problem", std::string{problem}}, {"wrapper", std::string{wrapper}}});
}

std::string lint_feedback(const prompt_templates& templates,
                          const contract::lint_result& lint_result, std::string_view wrapper) {
  return templates.render(prompt_kind::feedback_lint, {{"lint_report", lint_report(lint_result)},
                                                       {"wrapper", std::string{wrapper}}});
}

std::string model_set_failure(const contract::test_failure& failure) {
  if (!failure.sample_set.starts_with("model:"))
    return "";
  return "passes OpInfo's samples but fails " + failure.sample_set + " inputs";
}

std::optional<std::string> test_feedback(const prompt_templates& templates,
                                         const contract::test_result& test_result,
                                         std::string_view wrapper) {
  auto kind = feedback_kind_for(test_result.outcome);
  if (!kind)
    return std::nullopt;
  auto failure = test_result.failure.value_or(contract::test_failure{});
  if (*kind == prompt_kind::feedback_lint)
    return templates.render(*kind, {{"lint_report", static_refusal_report(failure)},
                                    {"wrapper", std::string{wrapper}}});
  prompt_values values{
      {"dtype", truncate_middle(failure.dtype, 100)},
      {"sample", truncate_middle(failure.sample, short_field_limit)},
      {"message", truncate_middle(failure.message, short_field_limit)},
      {"compile_log", truncate_middle(failure.compile_log, compile_log_limit)},
      {"backtrace", truncate_middle(failure.backtrace, backtrace_limit)},
      {"cuda_error", truncate_middle(failure.cuda_error, short_field_limit)},
      {"diff", truncate_middle(describe_diff(failure.diff), diff_limit)},
  };
  // A real model's call: the shape or stride that breaks the kernel is one it must handle.
  if (auto model = model_set_failure(failure); !model.empty())
    values["message"] = "The kernel " + model + " (how the model " + failure.sample_set.substr(6) +
                        " really calls this operator). " + values["message"];
  // Required placeholders never render empty: the model is told that the worker said nothing.
  for (const auto& name : placeholders_of(*kind).required)
    if (values[name].empty())
      values[name] =
          values["message"].empty() ? "(the test harness gave no details)" : values["message"];
  return templates.render(*kind, values);
}

} // namespace opforge
