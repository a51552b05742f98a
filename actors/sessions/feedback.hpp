#pragma once

// Turns a verdict (a format problem, a lint result, a test result) into the feedback prompt the
// model sees next. Verdicts arrive as the worker's results (messages/contract.yaml); long fields
// are cut in the middle deterministically so that the same verdict always gives the same prompt.
// It also reads which dtypes a passing verdict covers.

#include "actors/sessions/prompt_templates.hpp"
#include "messages/contract.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace opforge {

/// The failure fields that carry logs (a test result's compile log, and the traceback of a
/// runtime error or a crash): the ones the summarizer condenses when they are long.
inline constexpr std::array<std::string contract::test_failure::*, 2> log_fields{
    &contract::test_failure::compile_log, &contract::test_failure::backtrace};

/// `text` unchanged when it fits `limit` characters, else its head and tail around a line saying
/// how many characters were left out.
std::string truncate_middle(std::string_view text, size_t limit);

/// What a passing test verdict covers: the requested dtypes its `per_dtype` says passed, and
/// those it skipped because the worker cannot test them (no CPU reference in its torch), each
/// with the worker's reason. A verdict with an empty `per_dtype` covers every requested dtype.
struct dtypes_tested {
  std::vector<std::string> passed;
  std::vector<std::pair<std::string, std::string>> skipped;
};
dtypes_tested dtypes_of_pass(const contract::test_result& verdict,
                             const std::vector<std::string>& requested);

/// The feedback template for a test verdict, by its outcome; nullopt for `pass` and
/// `harness_error` (neither is fed back to the model). `lint_violation` (the worker's static gate
/// refused the source for a mistake of form) gets the lint job's template; an `accuracy_error` of
/// check `layout` (right values, strides not ATen's) gets `feedback_layout`; a `device_defect`
/// gets `feedback_device_defect` when every defect that explains it has a workaround, nullopt
/// otherwise (see `unavoidable_defect`).
std::optional<prompt_kind> feedback_kind_for(const contract::test_result& verdict);

/// For a `device_defect` verdict whose defects include one without a known workaround: why no
/// answer can pass on this toolchain, naming that defect; "" otherwise. A session ends with it
/// rather than spend calls on a kernel that the device, not the model, keeps failing.
std::string unavoidable_defect(const contract::test_result& verdict);

/// "Your answer could not be used: <problem>" and the output contract again.
std::string format_feedback(const prompt_templates& templates, std::string_view problem,
                            std::string_view wrapper);

/// The lint report of a lint result (`violations`, `syntax_error`) as a prompt.
std::string lint_feedback(const prompt_templates& templates,
                          const contract::lint_result& lint_result, std::string_view wrapper);

/// The prompt for a failed test result; nullopt when its outcome is not one that is fed
/// back (see `feedback_kind_for`). A `lint_violation` lists the refusal's findings as a lint
/// report, with the output contract for `wrapper`.
/// "fails model:<name> inputs" when `failure` is in a model's captured inputs (a model set runs
/// after every generated one, so the operator's OpInfo samples passed); "" otherwise.
std::string model_set_failure(const contract::test_failure& failure);

std::optional<std::string> test_feedback(const prompt_templates& templates,
                                         const contract::test_result& test_result,
                                         std::string_view wrapper);

/// `value` with `digits` significant digits, as prompts and end reasons show speedups and shares.
std::string significant(double value, int digits = 3);

/// A version's timings as the optimize prompt shows them: one row per dtype and shape class.
std::string timing_table(const std::vector<contract::kernel_timing>& timings);

} // namespace opforge
