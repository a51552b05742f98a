#pragma once

// Extracts the candidate (wrapper and @triton.jit kernels) from a model's answer as models really
// write them: reasoning in <think> tags, prose around the code, several fenced blocks (a first try
// and a corrected one, or kernels and wrapper in separate blocks), ```py / ```python / unlabelled
// fences, a closing fence lost to truncation, and the wrapper under another name. An answer that
// yields no usable candidate is a `format_problem` saying what was wrong, in words the model can
// act on; it is never an exception.

#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace opforge {

struct parsed_candidate {
  std::string source;               // what is linted and tested
  std::vector<std::string> kernels; // names of the @triton.jit functions, in source order
  std::string renamed_from;         // the model's name for the wrapper when it was renamed
};

struct format_problem {
  std::string what; // completes "Your answer could not be used: ..."
};

using parse_result = std::variant<parsed_candidate, format_problem>;

/// Picks the candidate out of `answer`, expecting the wrapper to be called `wrapper`.
/// - Text up to the last </think> is reasoning; an unclosed <think> ends the answer.
/// - Of the Python blocks (```python, ```py, ```python3 or unlabelled), the last one that defines
///   the wrapper wins; kernels it launches that only other blocks define are merged in front of it.
/// - With no function named `wrapper`, the block's one entry point (a function that is no kernel
///   and is called by nothing else in the block) is renamed to `wrapper`; with several, or none,
///   the answer is a format problem.
/// - The imports the harness already provides (torch, triton, triton.language as tl) are dropped;
///   every other import stays for the linter to report.
parse_result parse_answer(std::string_view answer, std::string_view wrapper);

} // namespace opforge
