#include "actors/sessions/feedback.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace opforge {

namespace {

// Times in the timing table: fixed, one decimal.
std::string microseconds(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

// Field limits in characters. A prompt carries one failure; these keep it well under 4k tokens.
constexpr size_t compile_log_limit = 6000;
constexpr size_t backtrace_limit = 4000;
constexpr size_t diff_limit = 3000;
constexpr size_t short_field_limit = 1000;
constexpr size_t max_lint_items = 20;

// A float as Python's repr writes it, as the model reads the element values beside it (the
// worker writes those with repr): every digit that tells it apart, and fixed notation from 1e-4
// up to 1e16.
std::string python_float(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char text[64];
  auto scientific = std::to_chars(text, text + sizeof text, value, std::chars_format::scientific);
  auto exponent = std::stoi(std::string{std::find(text, scientific.ptr, 'e') + 1, scientific.ptr});
  if (exponent < -4 || exponent >= 16)
    return {text, scientific.ptr};
  auto fixed = std::to_chars(text, text + sizeof text, value, std::chars_format::fixed);
  std::string out{text, fixed.ptr};
  return out.find('.') == std::string::npos ? out + ".0" : out;
}

std::string index_list(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (auto value : values)
    out += (out.size() > 1 ? ", " : "") + std::to_string(value);
  return out + "]";
}

// The diff as "key: value" lines in the order a reader looks for them: what differs, where the
// tolerance stood and how far off the output is, then the first elements that differ.
std::string describe_diff(const std::optional<contract::tensor_diff>& diff) {
  if (!diff)
    return {};
  std::string out;
  auto line = [&out](std::string_view key, const std::string& value) {
    out.append(key).append(": ").append(value).append("\n");
  };
  auto real = [&line](std::string_view key, const std::optional<double>& value) {
    if (value)
      line(key, python_float(*value));
  };
  auto count = [&line](std::string_view key, const std::optional<int64_t>& value) {
    if (value)
      line(key, std::to_string(*value));
  };
  line("reason", diff->reason);
  line("actual_shape", index_list(diff->actual_shape));
  line("expected_shape", index_list(diff->expected_shape));
  line("actual_dtype", diff->actual_dtype);
  line("expected_dtype", diff->expected_dtype);
  real("atol", diff->atol);
  real("rtol", diff->rtol);
  real("max_abs_error", diff->max_abs_error);
  real("max_rel_error", diff->max_rel_error);
  count("nan_inf_mismatches", diff->nan_inf_mismatches);
  count("signed_zero_mismatches", diff->signed_zero_mismatches);
  if (diff->accepted)
    line("accepted", *diff->accepted);
  count("mismatched", diff->mismatched);
  count("total", diff->total);
  if (!diff->first_mismatches.empty()) {
    out += "first_mismatches:\n";
    for (const auto& element : diff->first_mismatches) {
      out += "  " + index_list(element.index) + ": actual " + element.actual + ", expected " +
             element.expected;
      if (element.precise)
        out += ", precise " + *element.precise;
      out += "\n";
    }
  }
  out.pop_back();
  return out;
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

// A toolchain defect as the feedback quotes it: what the toolchain computes wrongly, on which
// inputs, what it gives and what it should, and the script that shows it.
std::string describe_defect(const contract::toolchain_defect& defect) {
  return "probe: " + truncate_middle(defect.probe, 100) +
         "\nexpression: out = " + truncate_middle(defect.expression, 200) +
         "\ndtype: " + truncate_middle(defect.dtype, 100) +
         "\ninputs: " + truncate_middle(defect.inputs, short_field_limit) +
         "\nexpected: " + truncate_middle(defect.expected, short_field_limit) +
         "\nactual: " + truncate_middle(defect.actual, short_field_limit) +
         "\nreproducer:\n```python\n" + truncate_middle(defect.reproducer, backtrace_limit) +
         "\n```";
}

const std::vector<contract::toolchain_defect>& defects_of(const contract::test_result& verdict) {
  static const std::vector<contract::toolchain_defect> none;
  return verdict.failure ? verdict.failure->defects : none;
}

} // namespace

std::string unavoidable_defect(const contract::test_result& verdict) {
  if (verdict.outcome != contract::outcome::device_defect)
    return "";
  const auto& defects = defects_of(verdict);
  if (defects.empty())
    return "device_defect: the worker named no toolchain defect, so no workaround is known";
  for (const auto& d : defects)
    if (d.workaround.empty())
      return "device_defect: " + d.probe + ": this toolchain computes " + d.expression + " on " +
             d.dtype + " wrongly (" + d.inputs + " gives " + d.actual + ", expected " + d.expected +
             ") and no workaround is known; no answer can pass here until the "
             "toolchain is fixed";
  return "";
}

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

std::optional<prompt_kind> feedback_kind_for(const contract::test_result& verdict) {
  switch (verdict.outcome) {
  case contract::outcome::compile_error:
    return prompt_kind::feedback_compile_error;
  case contract::outcome::runtime_error:
    return prompt_kind::feedback_runtime_error;
  case contract::outcome::crash:
    return prompt_kind::feedback_crash;
  case contract::outcome::accuracy_error:
    // Values right, layout not ATen's: the fix is the allocation, not the arithmetic.
    if (verdict.failure && verdict.failure->check == contract::failure_check::layout)
      return prompt_kind::feedback_layout;
    return prompt_kind::feedback_accuracy;
  case contract::outcome::timeout:
    return prompt_kind::feedback_timeout;
  case contract::outcome::cheat_detected:
    return prompt_kind::feedback_cheat;
  case contract::outcome::lint_violation:
    return prompt_kind::feedback_lint;
  // The toolchain's fault, not the kernel's: fed back as the defect to avoid, never as the
  // kernel's mistake; without a workaround there is nothing to ask for.
  case contract::outcome::device_defect:
    if (!unavoidable_defect(verdict).empty())
      return std::nullopt;
    return prompt_kind::feedback_device_defect;
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
  auto kind = feedback_kind_for(test_result);
  if (!kind)
    return std::nullopt;
  auto failure = test_result.failure.value_or(contract::test_failure{});
  if (*kind == prompt_kind::feedback_lint)
    return templates.render(*kind, {{"lint_report", static_refusal_report(failure)},
                                    {"wrapper", std::string{wrapper}}});
  if (*kind == prompt_kind::feedback_device_defect) {
    // Every defect that explains the failure, each with its workaround (one is enough to name
    // the fix; more than one means each must be avoided).
    std::string defects;
    std::string workarounds;
    for (const auto& d : failure.defects) {
      defects += (defects.empty() ? "" : "\n\n") + describe_defect(d);
      workarounds += (workarounds.empty() ? "" : "\n    ") + truncate_middle(d.workaround, 400);
    }
    return templates.render(*kind,
                            {{"defect", defects},
                             {"workaround", workarounds},
                             {"dtype", truncate_middle(failure.dtype, 100)},
                             {"sample", truncate_middle(failure.sample, short_field_limit)}});
  }
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

std::string significant(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*g", digits, value);
  return text;
}

std::string timing_table(const std::vector<contract::kernel_timing>& timings) {
  std::string out = "| dtype | input size class | kernel (us) | baseline (us) | speedup | share of "
                    "peak bandwidth |\n|---|---|---|---|---|---|\n";
  for (const auto& t : timings)
    out += "| " + to_string(t.dtype) + " | " + t.shape_class +
           (t.launch_bound ? " (launch-bound)" : "") + " | " + microseconds(t.kernel_us) + " | " +
           microseconds(t.baseline_us) + " | " + significant(t.speedup) + " | " +
           (t.peak_share ? significant(*t.peak_share * 100, 2) + "%" : "no peak known") + " |\n";
  return out;
}

} // namespace opforge
