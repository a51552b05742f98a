#include "actors/sessions/answer_parser.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

using namespace opforge;

namespace {

const std::string kernel = R"(@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=mask)), mask=mask)
)";

std::string wrapper_named(const std::string& name) {
  return "def " + name + R"((input):
    out = torch.empty_like(input)
    n = input.numel()
    exp_kernel[(triton.cdiv(n, 1024),)](input, out, n, BLOCK=1024)
    return out
)";
}

const std::string wrapper = wrapper_named("exp_wrapper");
const std::string implementation = kernel + "\n\n" + wrapper;

// A wrapper that calls a helper: the helper is no entry point, so the wrapper is unambiguous.
const std::string helper = "\n\ndef _grid(n):\n    return (triton.cdiv(n, 1024),)\n\n";

std::string renamed_wrapper(const std::string& name) {
  return "def " + name +
         "(input):\n    out = torch.empty_like(input)\n    exp_kernel[_grid(input.numel())](input, "
         "out, input.numel(), BLOCK=1024)\n    return out\n";
}

struct parse_case {
  std::string name;
  std::string answer;
  // A candidate is expected when `problem` is empty.
  std::string source;
  std::vector<std::string> kernels = {};
  std::string renamed_from = {};
  std::string problem = {};
};

void PrintTo(const parse_case& c, std::ostream* os) {
  *os << c.name;
}

std::vector<parse_case> cases() {
  return {
      {"prose_around_one_block",
       "Here is the implementation.\n\n```python\n" + implementation +
           "```\n\nIt masks the tail block.",
       implementation,
       {"exp_kernel"}},
      {"harness_imports_dropped_other_imports_kept",
       "```py\nimport torch\nimport triton\nimport triton.language as tl\nimport math\n\n" +
           implementation + "```",
       "import math\n\n" + implementation,
       {"exp_kernel"}},
      {"unlabelled_fence", "```\n" + implementation + "```\n", implementation, {"exp_kernel"}},
      {"closing_fence_lost_to_truncation",
       "Sure:\n```python\n" + implementation,
       implementation,
       {"exp_kernel"}},
      {"reasoning_with_a_draft_is_skipped",
       "<think>\nA first idea:\n```python\ndef exp_wrapper(x):\n    return x.exp()\n```\nno, that "
       "is cheating.\n</think>\n\n```python\n" +
           implementation + "```",
       implementation,
       {"exp_kernel"}},
      {"closing_think_without_opening_tag",
       "reasoning only...\n</think>\n```python\n" + implementation + "```",
       implementation,
       {"exp_kernel"}},
      {"answer_ends_inside_reasoning",
       "<think>\nLet me think about masks. ```python\n" + implementation,
       "",
       {},
       "",
       "it ended inside the <think> reasoning, before any code"},
      {"last_corrected_block_wins",
       "First try:\n```python\n" + kernel +
           "\n\ndef exp_wrapper(input):\n    return None\n```\n"
           "Wait, corrected:\n```python\n" +
           implementation + "```",
       implementation,
       {"exp_kernel"}},
      {"kernel_and_wrapper_in_separate_blocks_are_merged",
       "The kernel:\n```python\n" + kernel + "```\nThe wrapper:\n```python\n" + wrapper + "```",
       kernel + "\n\n" + wrapper,
       {"exp_kernel"}},
      {"other_languages_and_usage_examples_are_ignored",
       "```bash\npip install triton\n```\n```python\n" + implementation +
           "```\nUsage:\n```python\nx = torch.randn(8)\nprint(exp_wrapper(x))\n```",
       implementation,
       {"exp_kernel"}},
      {"indented_fence_inside_a_list_item",
       "1. Code:\n   ```python\n   @triton.jit\n   def k(x_ptr):\n       pass\n\n   def "
       "exp_wrapper(input):\n       k[(1,)](input)\n       return input\n   ```",
       "@triton.jit\ndef k(x_ptr):\n    pass\n\ndef exp_wrapper(input):\n    k[(1,)](input)\n    "
       "return input\n",
       {"k"}},
      {"autotuned_kernel_with_multiline_decorator",
       "```python\n@triton.autotune(\n    configs=[\n        triton.Config({'BLOCK': 256}),\n    "
       "],\n    key=['n'],\n)\n@triton.jit\ndef exp_kernel(x_ptr, out_ptr, n, BLOCK: "
       "tl.constexpr):\n    pass\n\n\ndef exp_wrapper(input):\n    out = torch.empty_like(input)\n "
       " "
       "  exp_kernel[lambda meta: (1,)](input, out, input.numel())\n    return out\n```",
       "@triton.autotune(\n    configs=[\n        triton.Config({'BLOCK': 256}),\n    ],\n    "
       "key=['n'],\n)\n@triton.jit\ndef exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    "
       "pass\n\n\ndef exp_wrapper(input):\n    out = torch.empty_like(input)\n    "
       "exp_kernel[lambda "
       "meta: (1,)](input, out, input.numel())\n    return out\n",
       {"exp_kernel"}},
      {"wrapper_under_another_name_is_renamed",
       "```python\n" + kernel + helper + renamed_wrapper("triton_exp") + "```",
       kernel + helper + renamed_wrapper("exp_wrapper"),
       {"exp_kernel"},
       "triton_exp"},
      {"two_entry_points_are_ambiguous",
       "```python\n" + kernel + "\n\n" + wrapper_named("exp_fast") + "\n\n" +
           wrapper_named("exp_safe") + "```",
       "",
       {},
       "",
       "it has no function named `exp_wrapper` (candidates: `exp_fast`, `exp_safe`). The wrapper "
       "must be called `exp_wrapper`."},
      {"no_code_at_all",
       "I cannot implement this operator in Triton.",
       "",
       {},
       "",
       "it contains no Python code: no ``` code block, and no line that starts a module"},
      {"code_without_functions",
       "```python\nx = 1\n```",
       "",
       {},
       "",
       "its Python code (1 block) defines no functions"},
      {"only_kernels",
       "```python\n" + kernel + "```",
       "",
       {},
       "",
       "it defines kernels but no function named `exp_wrapper` that launches them: write "
       "`exp_wrapper` as a plain Python function"},
      {"wrapper_without_kernels",
       "```python\ndef exp_wrapper(input):\n    return torch.exp(input)\n```",
       "",
       {},
       "",
       "it defines no @triton.jit kernel: `exp_wrapper` must compute its result by launching "
       "Triton kernels."},
  };
}

class AnswerParser : public ::testing::TestWithParam<parse_case> {};

} // namespace

TEST_P(AnswerParser, ExtractsTheCandidateOrSaysWhatIsWrong) {
  const auto& c = GetParam();
  auto result = parse_answer(c.answer, "exp_wrapper");
  if (c.problem.empty()) {
    ASSERT_TRUE(std::holds_alternative<parsed_candidate>(result))
        << std::get<format_problem>(result).what;
    const auto& candidate = std::get<parsed_candidate>(result);
    EXPECT_EQ(candidate.source, c.source);
    EXPECT_EQ(candidate.kernels, c.kernels);
    EXPECT_EQ(candidate.renamed_from, c.renamed_from);
  } else {
    ASSERT_TRUE(std::holds_alternative<format_problem>(result))
        << std::get<parsed_candidate>(result).source;
    EXPECT_EQ(std::get<format_problem>(result).what.substr(0, c.problem.size()), c.problem);
  }
}

INSTANTIATE_TEST_SUITE_P(RealisticAnswers, AnswerParser, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

namespace {

// An answer shape from tests/fixtures/answers: an HTML comment of expectations, then the answer.
// The keys are described in tests/fixtures/answers/README.md.
struct answer_fixture {
  std::string name;
  std::string answer;
  std::vector<std::string> kernels;
  std::string renamed_from;
  std::string problem;
  std::vector<std::string> contains, lacks, once;
};

void PrintTo(const answer_fixture& f, std::ostream* os) {
  *os << f.name;
}

std::string unescape(std::string_view value) {
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '\\' && i + 1 < value.size())
      out += value[++i] == 'n' ? '\n' : value[i];
    else
      out += value[i];
  }
  return out;
}

answer_fixture read_fixture(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::string line;
  std::getline(in, line); // the comment's first line says who wrote it and what it shows
  answer_fixture f;
  f.name = path.stem().string();
  bool crlf = false;
  while (std::getline(in, line) && line != "-->") {
    auto colon = line.find(": ");
    auto key = line.substr(0, colon);
    auto value = unescape(line.substr(colon + 2));
    if (key == "kernels") {
      std::istringstream names{value};
      for (std::string name; names >> name;)
        f.kernels.push_back(name);
    } else if (key == "renamed_from") {
      f.renamed_from = value;
    } else if (key == "problem") {
      f.problem = value;
    } else if (key == "line_endings") {
      crlf = value == "crlf";
    } else {
      (key == "contains" ? f.contains : key == "lacks" ? f.lacks : f.once).push_back(value);
    }
  }
  std::stringstream rest;
  rest << in.rdbuf();
  for (char c : rest.str())
    f.answer += c == '\n' && crlf ? std::string{"\r\n"} : std::string{c};
  return f;
}

std::vector<answer_fixture> answer_fixtures() {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator{std::string{OPFORGE_SOURCE_DIR} +
                                                               "/tests/fixtures/answers"})
    if (entry.path().extension() == ".md" && entry.path().filename() != "README.md")
      paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  std::vector<answer_fixture> fixtures;
  for (const auto& path : paths)
    fixtures.push_back(read_fixture(path));
  return fixtures;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

class AnswerShapes : public ::testing::TestWithParam<answer_fixture> {};

} // namespace

TEST(AnswerShapes, FixturesAreThere) {
  EXPECT_GE(answer_fixtures().size(), 25u);
}

TEST_P(AnswerShapes, ExtractsTheCandidateOrSaysWhatIsWrong) {
  const auto& f = GetParam();
  auto result = parse_answer(f.answer, "exp_wrapper");
  if (!f.problem.empty()) {
    ASSERT_TRUE(std::holds_alternative<format_problem>(result))
        << std::get<parsed_candidate>(result).source;
    EXPECT_EQ(std::get<format_problem>(result).what.substr(0, f.problem.size()), f.problem)
        << std::get<format_problem>(result).what;
    return;
  }
  ASSERT_TRUE(std::holds_alternative<parsed_candidate>(result))
      << std::get<format_problem>(result).what;
  const auto& candidate = std::get<parsed_candidate>(result);
  EXPECT_EQ(candidate.kernels, f.kernels);
  EXPECT_EQ(candidate.renamed_from, f.renamed_from);
  for (const auto& text : f.contains)
    EXPECT_NE(candidate.source.find(text), std::string::npos) << "missing: " << text << "\nin:\n"
                                                              << candidate.source;
  for (const auto& text : f.lacks)
    EXPECT_EQ(candidate.source.find(text), std::string::npos) << "kept: " << text << "\nin:\n"
                                                              << candidate.source;
  for (const auto& text : f.once)
    EXPECT_EQ(occurrences(candidate.source, text), 1u) << text << "\nin:\n" << candidate.source;
}

INSTANTIATE_TEST_SUITE_P(WrittenByTheDevelopers, AnswerShapes,
                         ::testing::ValuesIn(answer_fixtures()),
                         [](const auto& info) { return info.param.name; });

TEST(AnswerParserRobustness, NeverThrowsOnTruncatedPrefixesOfAnAnswer) {
  std::string answer = "<think>hmm</think>\nText\n```python\n" + implementation +
                       "```\n  ```python\n  def exp_wrapper(input):\n\n    return input\n  ```";
  for (size_t n = 0; n <= answer.size(); ++n)
    EXPECT_NO_THROW(parse_answer(std::string_view{answer}.substr(0, n), "exp_wrapper"));
}

TEST(AnswerParserRobustness, NeverThrowsOnTruncatedPrefixesOfTheAnswerShapes) {
  for (const auto& f : answer_fixtures())
    for (size_t n = 0; n <= f.answer.size(); ++n)
      ASSERT_NO_THROW(parse_answer(std::string_view{f.answer}.substr(0, n), "exp_wrapper"))
          << f.name << " cut at " << n;
}
