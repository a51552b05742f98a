#include "actors/sessions/feedback.hpp"

#include "messages/contract.hpp"
#include "messages/errors.hpp"

#include <algorithm>

namespace opforge {

namespace {

// Field limits in characters. A prompt carries one failure; these keep it well under 4k tokens.
constexpr size_t compile_log_limit = 6000;
constexpr size_t backtrace_limit = 4000;
constexpr size_t diff_limit = 3000;
constexpr size_t short_field_limit = 1000;
constexpr size_t max_lint_items = 20;

std::string field(const nlohmann::json& map, const char* key, size_t limit) {
  if (!map.is_object())
    return {};
  auto i = map.find(key);
  if (i == map.end() || i->is_null())
    return {};
  return truncate_middle(describe(*i), limit);
}

std::string lint_report(const nlohmann::json& lint_result) {
  std::string report;
  auto syntax = lint_result.is_object() ? lint_result.value("syntax_error", nlohmann::json{})
                                        : nlohmann::json{};
  if (syntax.is_object())
    report += "- syntax error at line " + field(syntax, "line", 16) + ", column " +
              field(syntax, "col", 16) + ": " + field(syntax, "message", short_field_limit) + "\n";
  else if (!syntax.is_null())
    report += "- syntax error: " + truncate_middle(describe(syntax), short_field_limit) + "\n";
  auto violations = lint_result.is_object() ? lint_result.value("violations", nlohmann::json{})
                                            : nlohmann::json{};
  if (violations.is_array()) {
    size_t shown = 0;
    for (const auto& v : violations) {
      if (shown++ == max_lint_items) {
        report += "- ... and " + std::to_string(violations.size() - max_lint_items) +
                  " more violations\n";
        break;
      }
      report += "- line " + field(v, "line", 16) + ", column " + field(v, "col", 16) + " [" +
                field(v, "rule", 100) + "]: `" + field(v, "text", 200) + "`";
      if (auto hint = field(v, "hint", 400); !hint.empty())
        report += ": " + hint;
      report += "\n";
    }
  }
  if (report.empty())
    report = "- the linter rejected the code without naming a rule\n";
  return report;
}

// The lint report of a test the worker's static gate refused (outcome lint_violation): its
// findings are "static: <rule> at line <n> `<text>`: <hint>", one per violation.
std::string static_refusal_report(const nlohmann::json& failure) {
  constexpr std::string_view prefix = "static: ";
  std::string report;
  auto findings =
      failure.is_object() ? failure.value("findings", nlohmann::json{}) : nlohmann::json{};
  if (findings.is_array()) {
    size_t shown = 0;
    for (const auto& finding : findings) {
      if (shown++ == max_lint_items) {
        report +=
            "- ... and " + std::to_string(findings.size() - max_lint_items) + " more violations\n";
        break;
      }
      auto text = truncate_middle(describe(finding), short_field_limit);
      if (text.starts_with(prefix))
        text.erase(0, prefix.size());
      report += "- " + text + "\n";
    }
  }
  if (report.empty())
    report = "- " + field(failure, "message", short_field_limit) + "\n";
  return report;
}

} // namespace

caf::expected<nlohmann::json> decode_payload(std::string_view msgpack_bytes) {
  try {
    return nlohmann::json::from_msgpack(msgpack_bytes.begin(), msgpack_bytes.end());
  } catch (const nlohmann::json::exception& e) {
    return caf::make_error(errc::frame_malformed, std::string{"result payload: "} + e.what());
  }
}

std::string truncate_middle(std::string_view text, size_t limit) {
  if (text.size() <= limit)
    return std::string{text};
  auto head = limit * 2 / 3;
  auto tail = limit - head;
  return std::string{text.substr(0, head)} + "\n[... " + std::to_string(text.size() - limit) +
         " characters left out ...]\n" + std::string{text.substr(text.size() - tail)};
}

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

dtypes_tested dtypes_of_pass(const nlohmann::json& verdict,
                             const std::vector<std::string>& requested) {
  auto per_dtype = verdict.is_object() ? verdict.value("per_dtype", nlohmann::json::object())
                                       : nlohmann::json::object();
  if (!per_dtype.is_object() || per_dtype.empty())
    return {requested, {}};
  dtypes_tested tested;
  for (const auto& dtype : requested) {
    auto entry = per_dtype.value(dtype, nlohmann::json::object());
    if (!entry.is_object())
      continue;
    auto outcome = entry.value("outcome", std::string{});
    if (outcome == "pass")
      tested.passed.push_back(dtype);
    else if (outcome == "skipped" && entry.contains("reason"))
      tested.skipped.emplace_back(dtype, describe(entry["reason"]));
  }
  return tested;
}

std::optional<prompt_kind> feedback_kind_for(std::string_view test_outcome) {
  auto outcome = contract::from_string<contract::outcome>(test_outcome);
  if (!outcome)
    return std::nullopt;
  switch (*outcome) {
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

std::string lint_feedback(const prompt_templates& templates, const nlohmann::json& lint_result,
                          std::string_view wrapper) {
  return templates.render(prompt_kind::feedback_lint, {{"lint_report", lint_report(lint_result)},
                                                       {"wrapper", std::string{wrapper}}});
}

std::optional<std::string> test_feedback(const prompt_templates& templates,
                                         const nlohmann::json& test_result,
                                         std::string_view wrapper) {
  auto outcome =
      test_result.is_object() ? test_result.value("outcome", std::string{}) : std::string{};
  auto kind = feedback_kind_for(outcome);
  if (!kind)
    return std::nullopt;
  auto failure = test_result.is_object() ? test_result.value("failure", nlohmann::json::object())
                                         : nlohmann::json::object();
  if (*kind == prompt_kind::feedback_lint)
    return templates.render(*kind, {{"lint_report", static_refusal_report(failure)},
                                    {"wrapper", std::string{wrapper}}});
  prompt_values values{
      {"dtype", field(failure, "dtype", 100)},
      {"sample", field(failure, "sample", short_field_limit)},
      {"message", field(failure, "message", short_field_limit)},
      {"compile_log", field(failure, "compile_log", compile_log_limit)},
      {"backtrace", field(failure, "backtrace", backtrace_limit)},
      {"cuda_error", field(failure, "cuda_error", short_field_limit)},
      {"diff", field(failure, "diff", diff_limit)},
  };
  // Required placeholders never render empty: the model is told that the worker said nothing.
  for (const auto& name : placeholders_of(*kind).required)
    if (values[name].empty())
      values[name] =
          values["message"].empty() ? "(the test harness gave no details)" : values["message"];
  return templates.render(*kind, values);
}

} // namespace opforge
