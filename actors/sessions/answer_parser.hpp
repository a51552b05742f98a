#pragma once

// Extracts the candidate (wrapper and @triton.jit kernels) from a model's answer as models really
// write them: reasoning in <think> tags, prose around the code, several blocks (a first try and a
// corrected one, or kernels and wrapper in separate blocks), fences with any Python-like label or
// none, code with no fence at all, a closing fence lost to truncation or forgotten before a closing
// remark, and the wrapper under another name. An answer that yields no usable candidate is a
// `format_problem` saying what the parser saw and what it needs, in words the model can act on;
// it is never an exception. The daemon has no Python parser: everything is decided from the text
// line by line, with a scanner that only tracks brackets, strings and comments.

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
/// - Code blocks are fenced with ``` or ~~~ (indented fences, as in list items, too). A fence is
///   Python when its label's first word, up to a `:` or `{`, is python, py, python3, py3, triton,
///   ipython or empty, or names a .py file: ```python:kernel.py, ```py title="k.py", ```Python.
///   Other labels (bash, text, ...) are ignored; a ```diff block, or one with `@@ -` hunks, is a
///   diff and cannot be used. A fence closes at a line of its own characters, or where another
///   labelled fence opens; at the end of the answer it is unclosed.
/// - An unclosed block loses the prose after its code: from the first top-level line, outside
///   brackets and strings, that is Markdown (a list item, **emphasis**, a quote, a table, a rule)
///   or words in a row where Python has an operator after a name ("Would you like ...", but no
///   line holding `=`).
/// - Only when no fenced Python block defines a function, the code is looked for outside fences:
///   each stretch starts at a top-level `import`, `from ... import`, decorator, `def name(` or
///   `class name` and ends where prose begins.
/// - A block that the answer ends inside is truncated when it ends in an open bracket or string,
///   or with a line that needs a continuation (`:`, `,`, `\`, an operator). Complete blocks are
///   preferred; a truncated block is used only when no complete one qualifies, and a truncated
///   block holding the wrapper is a format problem saying where it was cut.
/// - Of the Python blocks, the last one that defines the wrapper wins. Functions it uses (by name,
///   in any way: launched, passed on, `.warmup`) and does not define itself are merged in front of
///   it, whole blocks in answer order, each from the last (complete) block that defines the
///   function; the blocks merged in are searched the same way.
/// - With no function named `wrapper`, the wrapper is looked for in the last block that defines a
///   plain function and names a kernel (a usage example or a test names none; with no kernel
///   anywhere, in the last block with a plain function): its one entry point (a function that is
///   no kernel and is called by nothing else in the block) is renamed to `wrapper`; with several,
///   or none, the answer is a format problem. So is a `wrapper` decorated with @triton.jit, saying
///   why.
/// - The imports the harness already provides (torch, triton, triton.language as tl) are dropped;
///   every other import stays for the linter to report.
parse_result parse_answer(std::string_view answer, std::string_view wrapper);

} // namespace opforge
