#include "actors/sessions/prompt_templates.hpp"
#include "messages/errors.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <unistd.h>

using namespace opforge;

namespace {

const std::string prompts_dir = std::string{OPFORGE_SOURCE_DIR} + "/config/prompts";

std::map<prompt_kind, std::string> shipped_texts() {
  std::map<prompt_kind, std::string> texts;
  for (auto kind : all_prompt_kinds()) {
    std::ifstream in{prompts_dir + "/" + to_string(kind) + ".md"};
    std::ostringstream text;
    text << in.rdbuf();
    texts[kind] = text.str();
  }
  return texts;
}

// Loads the shipped templates with one of them replaced, and returns the error text.
std::string error_with(prompt_kind kind, std::string text) {
  auto texts = shipped_texts();
  texts[kind] = std::move(text);
  auto loaded = prompt_templates::from_texts(texts, "prompts");
  if (loaded)
    return "loaded";
  EXPECT_EQ(loaded.error().code(), static_cast<uint8_t>(errc::config_invalid));
  return render(loaded.error());
}

prompt_templates shipped() {
  auto loaded = prompt_templates::load(prompts_dir);
  if (!loaded)
    ADD_FAILURE() << render(loaded.error());
  return std::move(*loaded);
}

} // namespace

TEST(PromptTemplates, ShippedTemplatesLoadAndUseEveryRequiredPlaceholder) {
  auto templates = shipped();
  for (auto kind : all_prompt_kinds()) {
    prompt_values values;
    for (const auto& name : placeholders_of(kind).required)
      values[name] = "<" + name + "-value>";
    auto text = templates.render(kind, values);
    for (const auto& name : placeholders_of(kind).required)
      EXPECT_NE(text.find("<" + name + "-value>"), std::string::npos)
          << to_string(kind) << " does not show " << name;
    EXPECT_EQ(text.find("{{"), std::string::npos) << to_string(kind) << ": " << text;
  }
}

TEST(PromptTemplates, InitialPromptStatesTheOutputContract) {
  auto text = shipped().render(prompt_kind::initial, {{"op", "exp"},
                                                      {"wrapper", "exp_wrapper"},
                                                      {"dtypes", "float32, bfloat16"},
                                                      {"docstring", "exp(input) -> Tensor"},
                                                      {"examples", "EXAMPLES"}});
  EXPECT_NE(text.find("`exp_wrapper`"), std::string::npos);
  EXPECT_NE(text.find("exactly one ```python block"), std::string::npos);
  EXPECT_NE(text.find("No imports"), std::string::npos);
  EXPECT_NE(text.find("float32, bfloat16"), std::string::npos);
  EXPECT_NE(text.find("exp(input) -> Tensor"), std::string::npos);
  EXPECT_NE(text.find("EXAMPLES"), std::string::npos);
  // No device given: its section disappears with its lines.
  EXPECT_EQ(text.find("run on"), std::string::npos);
  auto with_device = shipped().render(prompt_kind::initial, {{"op", "exp"},
                                                             {"wrapper", "exp_wrapper"},
                                                             {"dtypes", "float32"},
                                                             {"docstring", "d"},
                                                             {"examples", "e"},
                                                             {"device", "NVIDIA H100"}});
  EXPECT_NE(with_device.find("- The kernels run on: NVIDIA H100.\n"), std::string::npos);
}

TEST(PromptTemplates, SectionsRenderOnlyWithAValueAndLeaveNoBlankLines) {
  auto texts = shipped_texts();
  texts[prompt_kind::feedback_timeout] =
      "A\n{{#sample}}\nInput: {{sample}}\n{{/sample}}\nB {{message}}\n";
  auto templates = prompt_templates::from_texts(texts, "prompts");
  ASSERT_TRUE(templates) << render(templates.error());
  EXPECT_EQ(templates->render(prompt_kind::feedback_timeout, {{"message", "m"}}), "A\nB m\n");
  EXPECT_EQ(templates->render(prompt_kind::feedback_timeout, {{"message", "m"}, {"sample", "s"}}),
            "A\nInput: s\nB m\n");
}

TEST(PromptTemplates, ValuesAreNeverExpandedAgain) {
  auto text = shipped().render(prompt_kind::feedback_format,
                               {{"problem", "saw {{wrapper}} and {{#x}}"}, {"wrapper", "w"}});
  EXPECT_NE(text.find("saw {{wrapper}} and {{#x}}"), std::string::npos);
}

TEST(PromptTemplates, MalformedTemplatesAreErrorsNamingFileAndPlaceholder) {
  EXPECT_EQ(error_with(prompt_kind::feedback_lint, "x {{lint_report}} {{lint_reprot}}"),
            "config_invalid: prompts/feedback_lint.md:1: unknown placeholder "
            "{{lint_reprot}} (this template knows: lint_report, wrapper)");
  EXPECT_EQ(error_with(prompt_kind::feedback_accuracy, "no diff here\n{{message}}"),
            "config_invalid: prompts/feedback_accuracy.md: required placeholder {{diff}} "
            "is missing");
  EXPECT_EQ(error_with(prompt_kind::feedback_timeout, "{{message}}\n\n{{message"),
            "config_invalid: prompts/feedback_timeout.md:3: '{{' without a closing '}}'");
  EXPECT_EQ(error_with(prompt_kind::feedback_timeout, "{{message}} {{Message}}"),
            "config_invalid: prompts/feedback_timeout.md:1: malformed placeholder "
            "'{{Message}}' (names are lower_case)");
  EXPECT_EQ(error_with(prompt_kind::feedback_timeout, "{{message}} {{#sample}} open"),
            "config_invalid: prompts/feedback_timeout.md: section {{#sample}} is never "
            "closed");
  EXPECT_EQ(error_with(prompt_kind::feedback_timeout, "{{#dtype}}{{message}}{{/sample}}"),
            "config_invalid: prompts/feedback_timeout.md:1: {{/sample}} closes section "
            "{{#dtype}}");
}

TEST(PromptTemplates, MissingFileIsAnErrorNamingIt) {
  auto loaded = prompt_templates::load("/nonexistent/prompts");
  ASSERT_FALSE(loaded);
  EXPECT_EQ(render(loaded.error()), "config_unreadable: /nonexistent/prompts/initial.md: "
                                    "cannot read the prompt template");
}

TEST(WorkedExamples, EveryPythonFileInNameOrderAsAFencedBlock) {
  auto dir =
      std::filesystem::temp_directory_path() / ("opforge-examples-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream{dir / "exp.py"} << "def exp_wrapper(input):\n    pass\n";
  std::ofstream{dir / "argmax.py"} << "def argmax_wrapper(input):\n    pass";
  std::ofstream{dir / "notes.txt"} << "not an example";
  auto examples = load_worked_examples(dir);
  ASSERT_TRUE(examples) << render(examples.error());
  EXPECT_EQ(*examples, "### `argmax`\n```python\ndef argmax_wrapper(input):\n    pass\n```\n\n"
                       "### `exp`\n```python\ndef exp_wrapper(input):\n    pass\n```\n");
  std::filesystem::remove(dir / "exp.py");
  std::filesystem::remove(dir / "argmax.py");
  auto none = load_worked_examples(dir);
  ASSERT_FALSE(none);
  EXPECT_EQ(render(none.error()),
            "config_invalid: " + dir.string() + ": no worked examples (*.py)");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(load_worked_examples(dir).error().code(),
            static_cast<uint8_t>(errc::config_unreadable));
}
