#include "actors/sessions/answer_parser.hpp"

#include <algorithm>
#include <optional>

namespace opforge {

namespace {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    auto end = text.find('\n');
    auto line = text.substr(0, end);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    lines.push_back(line);
    if (end == std::string_view::npos)
      break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::string_view trim(std::string_view s) {
  auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos)
    return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool is_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string lowercase(std::string_view s) {
  std::string out{s};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The identifier at the start of `s` (empty when there is none).
std::string_view leading_identifier(std::string_view s) {
  auto end = std::find_if_not(s.begin(), s.end(), is_ident_char) - s.begin();
  return s.substr(0, end);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Whether `name` occurs in `text` as a whole identifier.
bool mentions(std::string_view text, std::string_view name) {
  for (auto pos = text.find(name); pos != std::string_view::npos; pos = text.find(name, pos + 1)) {
    bool starts = pos == 0 || !is_ident_char(text[pos - 1]);
    bool ends = pos + name.size() == text.size() || !is_ident_char(text[pos + name.size()]);
    if (starts && ends)
      return true;
  }
  return false;
}

// The text after the model's reasoning, or nullopt when the answer ended inside it.
std::optional<std::string_view> after_reasoning(std::string_view answer) {
  if (auto close = answer.rfind("</think>"); close != std::string_view::npos)
    return answer.substr(close + 8);
  if (auto open = answer.find("<think>"); open != std::string_view::npos) {
    auto before = answer.substr(0, open);
    if (trim(before).empty())
      return std::nullopt;
    return before;
  }
  return answer;
}

// Where a Python line leaves the scanner: inside how many brackets, inside which string.
struct python_scan {
  int depth = 0;
  char quote = 0; // the open string's quote character, 0 outside strings
  bool triple = false;
  bool inside() const { return depth > 0 || quote != 0; }
};

// Advances `scan` over one line: brackets, strings (single, triple, escapes) and comments. A
// single-quoted string never spans lines unless the line ends in a backslash.
void scan_line(std::string_view line, python_scan& scan) {
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (scan.quote != 0) {
      if (c == '\\')
        ++i;
      else if (c == scan.quote && !scan.triple)
        scan.quote = 0;
      else if (c == scan.quote && line.substr(i, 3) == std::string(3, c)) {
        scan.quote = 0;
        i += 2;
      }
      continue;
    }
    if (c == '#')
      return;
    if (c == '"' || c == '\'') {
      scan.quote = c;
      scan.triple = line.substr(i, 3) == std::string(3, c);
      i += scan.triple ? 2 : 0;
    } else if (c == '(' || c == '[' || c == '{') {
      ++scan.depth;
    } else if (c == ')' || c == ']' || c == '}') {
      scan.depth = std::max(scan.depth - 1, 0);
    }
  }
  if (scan.quote != 0 && !scan.triple && (line.empty() || line.back() != '\\'))
    scan.quote = 0;
}

bool is_python_keyword(std::string_view word) {
  static constexpr std::string_view keywords[] = {
      "and",  "as",       "assert", "async",  "await",  "break", "case",    "class",
      "def",  "del",      "elif",   "else",   "except", "false", "finally", "for",
      "from", "global",   "if",     "import", "in",     "is",    "lambda",  "match",
      "none", "nonlocal", "not",    "or",     "pass",   "print", "raise",   "return",
      "true", "try",      "type",   "while",  "with",   "yield"};
  auto lowered = lowercase(word);
  return std::find(std::begin(keywords), std::end(keywords), lowered) != std::end(keywords);
}

// A line of prose or Markdown at the top level of what should be Python: a list item, emphasis,
// a quote or table, or words in a row ("Would you like ...", "Note: the mask ...") where Python
// has an operator after its first name. `line` starts outside any bracket or string.
bool is_prose(std::string_view line) {
  if (line.empty() || line[0] == ' ' || line[0] == '\t')
    return false;
  for (std::string_view marker : {"**", "- ", "* ", "> ", "|", "---", "==="})
    if (starts_with(line, marker))
      return true;
  auto digits = line.find_first_not_of("0123456789");
  if (digits > 0 && digits != std::string_view::npos && starts_with(line.substr(digits), ". "))
    return true;
  if (!is_letter(line[0]) || line.find('=') != std::string_view::npos)
    return false; // `BLOCK_M, BLOCK_N = 64, 64` is code
  auto word_end =
      line.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_'");
  auto word = line.substr(0, word_end);
  if (is_python_keyword(word))
    return false;
  auto rest = word_end == std::string_view::npos ? std::string_view{} : line.substr(word_end);
  if (starts_with(rest, ",") || starts_with(rest, ":"))
    rest.remove_prefix(1);
  if (rest.empty())
    return word_end != line.size(); // "Usage:" is prose, a lone name is an expression
  return rest.size() >= 2 && rest[0] == ' ' && is_letter(rest[1]);
}

// `a.b.c` (or a relative `.a`): what `import` and `from` name.
bool is_dotted_name(std::string_view s) {
  return !s.empty() && s.back() != '.' &&
         std::all_of(s.begin(), s.end(), [](char c) { return is_ident_char(c) || c == '.'; });
}

// `a.b, c as d`: what follows `import`.
bool is_import_list(std::string_view s) {
  while (!s.empty()) {
    auto part = trim(s.substr(0, s.find(',')));
    s.remove_prefix(std::min(s.find(','), s.size() - 1) + 1);
    auto as = part.find(" as ");
    if (!is_dotted_name(part.substr(0, as)) ||
        (as != std::string_view::npos && !is_dotted_name(trim(part.substr(as + 4)))))
      return false;
  }
  return true;
}

// A top-level line that only begins Python code: an import, a decorator, a def or a class. Prose
// that uses these words ("import this into ...", "def is how ...") does not match.
bool starts_module_code(std::string_view line) {
  auto code = line.substr(0, line.find('#'));
  code = code.substr(0, code.find_last_not_of(" \t") + 1);
  if (starts_with(code, "import "))
    return is_import_list(code.substr(7));
  if (starts_with(code, "from ")) {
    auto import = code.find(" import ");
    return import != std::string_view::npos && is_dotted_name(code.substr(5, import - 5));
  }
  if (starts_with(code, "@"))
    return code.size() > 1 && is_letter(code[1]);
  if (starts_with(code, "async "))
    code.remove_prefix(6);
  for (std::string_view opener : {"def ", "class "}) {
    if (!starts_with(code, opener))
      continue;
    auto rest = code.substr(opener.size());
    auto name = leading_identifier(rest);
    auto after = rest.substr(name.size());
    return !name.empty() && (starts_with(after, "(") || starts_with(after, ":"));
  }
  return false;
}

struct code_block {
  std::vector<std::string> lines;
  std::string truncation; // why the block looks cut off; empty when it looks complete
};

// Why a block that the answer ends inside looks cut off, or an empty string.
std::string truncation_of(const std::vector<std::string>& lines) {
  python_scan scan;
  for (const auto& line : lines)
    scan_line(line, scan);
  if (scan.quote != 0)
    return "a string that is never closed";
  if (scan.depth > 0)
    return "an unclosed bracket";
  auto last = std::find_if(lines.rbegin(), lines.rend(),
                           [](const std::string& l) { return !trim(l).empty(); });
  if (last == lines.rend())
    return {};
  auto end = trim(*last);
  auto code = trim(end.substr(0, end.find('#')));
  if (!code.empty() && std::string_view{":\\,+-/=@"}.find(code.back()) != std::string_view::npos)
    return "the line `" + std::string{code} + "`, which needs a continuation";
  return {};
}

// Drops the prose that follows the code of a block whose closing fence is missing ("Would you
// like me to explain ..."), and the blank lines it leaves.
void cut_trailing_prose(std::vector<std::string>& lines) {
  python_scan scan;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!scan.inside() && is_prose(lines[i])) {
      lines.resize(i);
      break;
    }
    scan_line(lines[i], scan);
  }
  while (!lines.empty() && trim(lines.back()).empty())
    lines.pop_back();
}

// An unclosed block: its prose tail goes, and when the answer ends inside it, it is checked for
// signs of truncation.
code_block unclosed_block(std::vector<std::string> lines, bool ends_answer) {
  cut_trailing_prose(lines);
  code_block block;
  if (ends_answer)
    block.truncation = truncation_of(lines);
  block.lines = std::move(lines);
  return block;
}

struct fence {
  size_t indent = 0;
  char marker = 0; // ` or ~
  size_t length = 0;
  std::string label; // lowercased first word of the info string, e.g. "python" or "bash"
};

// The opening fence on `line`, with its label reduced to the language: "python:kernel.py",
// `py title="k.py"`, "{.python}" and "kernel.py" all give a Python label.
std::optional<fence> opening_fence(std::string_view line) {
  auto indent = line.find_first_not_of(" \t");
  if (indent == std::string_view::npos)
    return std::nullopt;
  auto rest = line.substr(indent);
  char marker = rest[0];
  if (marker != '`' && marker != '~')
    return std::nullopt;
  auto length = std::min(rest.find_first_not_of(marker), rest.size());
  auto info = trim(rest.substr(length));
  if (length < 3 || (marker == '`' && info.find('`') != std::string_view::npos))
    return std::nullopt;
  auto word = info.substr(0, info.find_first_of(" \t"));
  word.remove_prefix(std::min(word.find_first_not_of("{."), word.size()));
  auto label = lowercase(word.substr(0, word.find_first_of(":{}")));
  if (label.size() > 3 && label.substr(label.size() - 3) == ".py")
    label = "python";
  return fence{indent, marker, length, std::move(label)};
}

bool closes(const fence& open, std::string_view line) {
  auto content = trim(line);
  return content.size() >= open.length &&
         content.find_first_not_of(open.marker) == std::string_view::npos;
}

bool is_python_label(std::string_view label) {
  for (std::string_view known :
       {"", "python", "py", "python3", "py3", "triton", "ipython", "language-python"})
    if (label == known)
      return true;
  return false;
}

bool is_diff(std::string_view label, const std::vector<std::string>& lines) {
  if (label == "diff" || label == "patch")
    return true;
  return std::any_of(lines.begin(), lines.end(),
                     [](const std::string& l) { return starts_with(l, "@@ -"); });
}

// What an answer holds: its Python code blocks in order, and for the message when they are
// unusable, the other labels seen and the number of diffs.
struct answer_code {
  std::vector<code_block> python;
  std::vector<std::string> other_labels;
  size_t diffs = 0;
  std::vector<std::string_view> unfenced; // the lines outside fences; a block leaves one ""
};

void add_block(answer_code& code, const fence& open, std::vector<std::string> lines, bool closed,
               bool ends_answer) {
  if (is_diff(open.label, lines)) {
    ++code.diffs;
  } else if (!is_python_label(open.label)) {
    if (std::find(code.other_labels.begin(), code.other_labels.end(), open.label) ==
        code.other_labels.end())
      code.other_labels.push_back(open.label);
  } else if (closed) {
    code.python.push_back({std::move(lines), {}});
  } else {
    code.python.push_back(unclosed_block(std::move(lines), ends_answer));
  }
}

// Splits the text into fenced blocks and the lines outside them. A fence closes at a line of at
// least as many of its characters, and also where another labelled fence opens (a model that
// forgot to close one); at the end of the answer it is unclosed. Indented fences (inside list
// items) lose their indentation.
answer_code fenced_code(std::string_view text) {
  answer_code code;
  auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    auto open = opening_fence(lines[i]);
    if (!open) {
      code.unfenced.push_back(lines[i]);
      continue;
    }
    code.unfenced.emplace_back();
    std::vector<std::string> body;
    size_t j = i + 1;
    for (; j < lines.size() && !closes(*open, lines[j]); ++j) {
      if (auto next = opening_fence(lines[j]); next && !next->label.empty())
        break;
      auto line = lines[j];
      body.emplace_back(
          line.substr(std::min({open->indent, line.find_first_not_of(" \t"), line.size()})));
    }
    bool closed = j < lines.size() && closes(*open, lines[j]);
    add_block(code, *open, std::move(body), closed, j == lines.size());
    i = closed ? j : j - 1;
  }
  return code;
}

// Stretches of Python outside fences: each starts at a top-level import, decorator, def or class
// and runs until prose begins. The last one, when the answer ends inside it, may be truncated.
std::vector<code_block> unfenced_code(const std::vector<std::string_view>& lines) {
  std::vector<code_block> blocks;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!starts_module_code(lines[i]))
      continue;
    std::vector<std::string> stretch;
    python_scan scan;
    size_t j = i;
    for (; j < lines.size(); ++j) {
      if (!scan.inside() && j > i && is_prose(lines[j]))
        break;
      stretch.emplace_back(lines[j]);
      scan_line(lines[j], scan);
    }
    blocks.push_back(unclosed_block(std::move(stretch), j == lines.size()));
    i = j;
  }
  return blocks;
}

struct function_def {
  std::string name;
  bool kernel = false;
};

// Top-level functions of a block and whether each is decorated with triton.jit (directly or under
// autotune/heuristics). Decorators may span lines (autotune config lists).
std::vector<function_def> top_level_functions(const code_block& block) {
  std::vector<function_def> out;
  std::string decorators;
  int depth = 0;
  for (const auto& line : block.lines) {
    if (depth > 0 || (!line.empty() && line[0] == '@')) {
      decorators += line;
      decorators += '\n';
      for (char c : line)
        depth += (c == '(' || c == '[' || c == '{') - (c == ')' || c == ']' || c == '}');
      depth = std::max(depth, 0);
      continue;
    }
    std::string_view rest = line;
    if (starts_with(rest, "async "))
      rest.remove_prefix(6);
    if (starts_with(rest, "def ")) {
      auto name = leading_identifier(trim(rest.substr(4)));
      bool kernel = decorators.find("triton.jit") != std::string::npos ||
                    starts_with(decorators, "@jit") ||
                    decorators.find("\n@jit") != std::string::npos;
      out.push_back({std::string{name}, kernel});
      decorators.clear();
    } else if (!line.empty() && line[0] != ' ' && line[0] != '\t' && line[0] != '#') {
      decorators.clear();
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) {
    out += line;
    out += '\n';
  }
  return out;
}

bool defines(const std::vector<function_def>& defs, std::string_view name, bool kernel) {
  return std::any_of(defs.begin(), defs.end(),
                     [&](const function_def& d) { return d.name == name && d.kernel == kernel; });
}

bool is_provided_import(std::string_view line) {
  for (std::string_view provided : {"import torch", "import triton", "import triton.language as tl",
                                    "from triton import language as tl"})
    if (trim(line) == provided && line.front() != ' ')
      return true;
  return false;
}

std::string without_provided_imports(const std::string& source) {
  std::string out;
  for (auto line : split_lines(source))
    if (!is_provided_import(line)) {
      out += line;
      out += '\n';
    }
  // Dropped imports leave blank lines at the top.
  auto first = out.find_first_not_of('\n');
  return first == std::string::npos ? std::string{} : out.substr(first);
}

std::string names_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names)
    out += (out.empty() ? "`" : ", `") + name + "`";
  return out;
}

// Why an answer has no Python functions, from what it does hold. The feedback template goes on
// to ask for one ```python block with the complete implementation.
format_problem no_functions(const answer_code& code, size_t python_blocks) {
  if (code.diffs > 0)
    return {"its code is a diff, and a module cannot be rebuilt from changes to an earlier one: "
            "send the whole module, not the changes."};
  if (python_blocks > 0)
    return {"its Python code (" + std::to_string(python_blocks) +
            (python_blocks == 1 ? " block" : " blocks") +
            ") defines no functions: no line starts with `def` at the top level."};
  if (!code.other_labels.empty())
    return {"its only code blocks are labelled " + names_list(code.other_labels) +
            ", none of them Python, and no Python code stands outside them."};
  return {"it contains no Python code: no ``` code block, and no line that starts a module "
          "(`import`, `@triton.jit`, `def`)."};
}

format_problem cut_off(const code_block& block, std::string_view inside) {
  return {"it was cut off: the code block that defines `" + std::string{inside} +
          "` ends the answer with " + block.truncation +
          ". Keep the explanation short and end the answer with the complete module in one "
          "```python block."};
}

// The last block that `pick` accepts, preferring one that looks complete.
template <class Pick>
std::optional<size_t> last_block(const std::vector<code_block>& blocks, Pick pick) {
  std::optional<size_t> found;
  for (bool complete_only : {true, false}) {
    for (size_t i = 0; i < blocks.size(); ++i)
      if (pick(i) && (!complete_only || blocks[i].truncation.empty()))
        found = i;
    if (found)
      return found;
  }
  return found;
}

// Blocks the chosen one needs: those defining a function it (or a block it needs) mentions and
// does not define itself, each from the last complete block that defines it. In source order.
std::vector<size_t> needed_blocks(const std::vector<code_block>& blocks,
                                  const std::vector<std::vector<function_def>>& defs,
                                  size_t chosen) {
  std::vector<size_t> taken{chosen};
  for (size_t next = 0; next < taken.size(); ++next) {
    auto text = join(blocks[taken[next]].lines);
    for (size_t i = 0; i < blocks.size(); ++i)
      for (const auto& d : defs[i]) {
        auto defined_by_taken = std::any_of(taken.begin(), taken.end(), [&](size_t t) {
          return defines(defs[t], d.name, d.kernel);
        });
        if (defined_by_taken || !mentions(text, d.name))
          continue;
        auto from =
            last_block(blocks, [&](size_t k) { return defines(defs[k], d.name, d.kernel); });
        if (std::find(taken.begin(), taken.end(), *from) == taken.end())
          taken.push_back(*from);
      }
  }
  taken.erase(taken.begin());
  std::sort(taken.begin(), taken.end());
  return taken;
}

// Renames the chosen block's one entry point (a function that is no kernel and that nothing else
// in the block calls) to `wrapper`; a format problem when there is not exactly one.
std::variant<std::string, format_problem> rename_entry_point(code_block& block,
                                                             const std::vector<function_def>& defs,
                                                             std::string_view wrapper) {
  auto body = join(block.lines);
  std::vector<std::string> entry_points;
  for (const auto& d : defs) {
    if (d.kernel)
      continue;
    auto without_def = body;
    without_def.erase(without_def.find("def " + d.name), 4 + d.name.size());
    if (!mentions(without_def, d.name))
      entry_points.push_back(d.name);
  }
  if (entry_points.size() != 1)
    return format_problem{
        "it has no function named `" + std::string{wrapper} + "`" +
        (entry_points.empty() ? std::string{} : " (candidates: " + names_list(entry_points) + ")") +
        ". The wrapper must be called `" + std::string{wrapper} + "`."};
  auto prefix = "def " + entry_points.front();
  for (auto& line : block.lines)
    if (starts_with(line, prefix) && line.size() > prefix.size() &&
        !is_ident_char(line[prefix.size()]))
      line = "def " + std::string{wrapper} + line.substr(prefix.size());
  return entry_points.front();
}

// The names of every kernel the answer defines, each once, in answer order.
std::vector<std::string> kernel_names(const std::vector<std::vector<function_def>>& defs) {
  std::vector<std::string> kernels;
  for (const auto& block_defs : defs)
    for (const auto& d : block_defs)
      if (d.kernel && std::find(kernels.begin(), kernels.end(), d.name) == kernels.end())
        kernels.push_back(d.name);
  return kernels;
}

// Where a wrapper under another name is: the last block with a plain function that names a
// kernel (a usage example or a test names none), or with no kernel anywhere, any plain function.
std::optional<size_t> block_of_renamed_wrapper(const std::vector<code_block>& blocks,
                                               const std::vector<std::vector<function_def>>& defs) {
  auto kernels = kernel_names(defs);
  return last_block(blocks, [&](size_t i) {
    auto text = join(blocks[i].lines);
    auto names_a_kernel = std::any_of(kernels.begin(), kernels.end(),
                                      [&](const std::string& k) { return mentions(text, k); });
    return (kernels.empty() || names_a_kernel) &&
           std::any_of(defs[i].begin(), defs[i].end(), [](const auto& d) { return !d.kernel; });
  });
}

format_problem no_wrapper(const std::vector<std::vector<function_def>>& defs,
                          std::string_view wrapper) {
  auto jit_wrapper = std::any_of(defs.begin(), defs.end(),
                                 [&](const auto& d) { return defines(d, wrapper, true); });
  std::string name{wrapper};
  if (jit_wrapper)
    return {"`" + name +
            "` is decorated with @triton.jit, which makes it a kernel. The wrapper "
            "must be a plain Python function without that decorator: it receives the tensors, "
            "allocates the output and launches the kernels."};
  return {"it defines kernels but no function named `" + name + "` that launches them: write `" +
          name +
          "` as a plain Python function that allocates the output and launches the kernels."};
}

format_problem no_kernel_used(const std::vector<std::vector<function_def>>& defs,
                              std::string_view wrapper) {
  auto kernels = kernel_names(defs);
  std::string name{wrapper};
  if (kernels.empty())
    return {"it defines no @triton.jit kernel: `" + name +
            "` must compute its result by launching Triton kernels."};
  return {"`" + name + "` uses none of the @triton.jit kernels the answer defines (" +
          names_list(kernels) + "): it must compute its result by launching them."};
}

} // namespace

parse_result parse_answer(std::string_view answer, std::string_view wrapper) {
  auto text = after_reasoning(answer);
  if (!text)
    return format_problem{"it ended inside the <think> reasoning, before any code. Keep the "
                          "reasoning short and always finish with the code block."};
  auto code = fenced_code(*text);
  auto blocks = code.python;
  std::vector<std::vector<function_def>> defs;
  auto define_functions = [&] {
    defs.clear();
    for (const auto& block : blocks)
      defs.push_back(top_level_functions(block));
    return std::any_of(defs.begin(), defs.end(), [](const auto& d) { return !d.empty(); });
  };
  if (!define_functions()) {
    blocks = unfenced_code(code.unfenced);
    if (!define_functions())
      return no_functions(code, code.python.size() + blocks.size());
  }

  auto chosen = last_block(blocks, [&](size_t i) { return defines(defs[i], wrapper, false); });
  std::string renamed_from;
  if (!chosen) {
    chosen = block_of_renamed_wrapper(blocks, defs);
    if (!chosen)
      return no_wrapper(defs, wrapper);
    auto renamed = rename_entry_point(blocks[*chosen], defs[*chosen], wrapper);
    if (auto* problem = std::get_if<format_problem>(&renamed))
      return *problem;
    renamed_from = std::get<std::string>(renamed);
  }
  if (!blocks[*chosen].truncation.empty())
    return cut_off(blocks[*chosen], renamed_from.empty() ? wrapper : renamed_from);

  std::string source;
  parsed_candidate candidate;
  auto needed = needed_blocks(blocks, defs, *chosen);
  needed.push_back(*chosen);
  for (auto i : needed) {
    source += join(blocks[i].lines) + (i == *chosen ? "" : "\n\n");
    for (const auto& d : defs[i])
      if (d.kernel && std::find(candidate.kernels.begin(), candidate.kernels.end(), d.name) ==
                          candidate.kernels.end())
        candidate.kernels.push_back(d.name);
  }
  if (candidate.kernels.empty())
    return no_kernel_used(defs, wrapper);
  candidate.source = without_provided_imports(source);
  candidate.renamed_from = std::move(renamed_from);
  return candidate;
}

} // namespace opforge
