#pragma once

// The prompts a session sends, as Markdown templates under config/prompts/ with named placeholders:
//   {{name}}                 replaced by the value of `name`
//   {{#name}} ... {{/name}}  kept only when `name` has a non-empty value (a tag alone on its line
//                            takes its line with it)
// Every template is checked when loaded: a placeholder its kind does not know, a required one that
// is missing, or a malformed tag is an error naming the file and the placeholder. Values are
// substituted once, so a value that contains "{{x}}" (model code can) is never expanded.

#include "messages/enum_names.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

namespace opforge {

/// Every prompt a session can send; the file of each is `config/prompts/<to_string(kind)>.md`.
enum class prompt_kind : uint8_t {
  initial,        // first call of a dialog: task, output contract, docstring, dtypes, examples
  debug_existing, // first call of a dialog seeded with an existing kernel
  feedback_format,
  feedback_lint,
  feedback_compile_error,
  feedback_runtime_error,
  feedback_crash,
  feedback_accuracy,
  feedback_timeout,
  feedback_cheat,
  feedback_layout,        // an accuracy_error of check layout: values right, strides not ATen's
  feedback_device_defect, // device_defect: a toolchain defect bit the kernel; avoid it
  optimize,               // OPTIMIZE: the kept kernel with its timings, asking for a faster version
};

/// Every kind, in declaration order.
const std::vector<prompt_kind>& all_prompt_kinds();

/// The file stems, e.g. "feedback_lint" (`to_string`).
template <>
struct contract::enum_traits<prompt_kind> {
  static constexpr std::string_view label = "prompt_kind";
  static constexpr std::array<std::string_view, 13> names{
      "initial",        "debug_existing",         "feedback_format",
      "feedback_lint",  "feedback_compile_error", "feedback_runtime_error",
      "feedback_crash", "feedback_accuracy",      "feedback_timeout",
      "feedback_cheat", "feedback_layout",        "feedback_device_defect",
      "optimize"};
  static_assert(names.size() - 1 == static_cast<size_t>(prompt_kind::optimize));
};

/// The placeholders a kind knows: `required` must appear as {{name}} in its template, `optional`
/// may appear.
struct placeholder_spec {
  std::vector<std::string> required;
  std::vector<std::string> optional;
};

const placeholder_spec& placeholders_of(prompt_kind kind);

/// Values by placeholder name. A placeholder without a value renders as empty.
using prompt_values = std::map<std::string, std::string, std::less<>>;

class prompt_templates {
public:
  /// Reads `<dir>/<kind>.md` for every kind. Other files in `dir` are not ours and are ignored.
  static caf::expected<prompt_templates> load(const std::filesystem::path& dir);

  /// Builds the set from texts by kind; `origin` names where they came from in errors (a file name
  /// is appended per kind). Every kind must be present.
  static caf::expected<prompt_templates> from_texts(const std::map<prompt_kind, std::string>& texts,
                                                    const std::string& origin);

  /// The prompt of `kind` with `values` filled in.
  std::string render(prompt_kind kind, const prompt_values& values) const;

  struct node;

private:
  std::map<prompt_kind, std::shared_ptr<const std::vector<node>>> templates_;
};

/// A parsed template: literal text, a value, or a section kept when its value is non-empty.
struct prompt_templates::node {
  enum class type : uint8_t { text, value, section } kind;
  std::string text; // the literal for `text`, the placeholder name otherwise
  std::vector<node> children;
};

/// The worked examples for {{examples}}: every `*.py` under `dir` in name order, each a fenced
/// Python block under a heading naming its operator (the file stem). A missing directory, or one
/// with no examples, is an error naming it.
caf::expected<std::string> load_worked_examples(const std::filesystem::path& dir);

} // namespace opforge
