#include "actors/answer_parser.hpp"

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

struct code_block {
  std::vector<std::string> lines;
};

bool is_python_label(std::string_view label) {
  for (std::string_view known : {"", "python", "py", "python3", "py3", "triton"})
    if (label == known)
      return true;
  return false;
}

// Fenced blocks labelled as Python or unlabelled. A block whose closing fence is missing (the
// answer was cut off) runs to the end. Indented fences (inside list items) lose their indentation.
std::vector<code_block> python_blocks(std::string_view text) {
  std::vector<code_block> blocks;
  auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    auto indent = lines[i].find_first_not_of(" \t");
    if (indent == std::string_view::npos)
      continue;
    auto fence_line = lines[i].substr(indent);
    char fence_char = fence_line[0];
    if (fence_char != '`' && fence_char != '~')
      continue;
    auto fence_len = fence_line.find_first_not_of(fence_char);
    if (fence_len == std::string_view::npos)
      fence_len = fence_line.size();
    if (fence_len < 3)
      continue;
    auto info = trim(fence_line.substr(fence_len));
    auto label = info.substr(0, info.find_first_of(" \t{"));
    std::string lowered{label};
    std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    code_block block;
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      auto content = trim(lines[j]);
      if (content.size() >= fence_len &&
          content.find_first_not_of(fence_char) == std::string_view::npos)
        break;
      auto line = lines[j];
      block.lines.emplace_back(
          line.substr(std::min({indent, line.find_first_not_of(" \t"), line.size()})));
    }
    if (is_python_label(lowered))
      blocks.push_back(std::move(block));
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
    if (rest.substr(0, 6) == "async ")
      rest.remove_prefix(6);
    if (rest.substr(0, 4) == "def ") {
      auto name = trim(rest.substr(4));
      name =
          name.substr(0, std::find_if_not(name.begin(), name.end(), is_ident_char) - name.begin());
      bool kernel = decorators.find("triton.jit") != std::string::npos ||
                    decorators.rfind("@jit", 0) == 0 ||
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

// Kernel launches look like `name[grid](...)`.
std::vector<std::string> launched_names(const std::string& source) {
  std::vector<std::string> out;
  for (size_t pos = source.find('['); pos != std::string::npos; pos = source.find('[', pos + 1)) {
    size_t start = pos;
    while (start > 0 && is_ident_char(source[start - 1]))
      --start;
    if (start == pos)
      continue;
    int depth = 0;
    size_t end = pos;
    for (; end < source.size(); ++end) {
      depth += (source[end] == '[') - (source[end] == ']');
      if (depth == 0)
        break;
    }
    auto after = source.find_first_not_of(" \t", end + 1);
    if (end < source.size() && after != std::string::npos && source[after] == '(')
      out.emplace_back(source.substr(start, pos - start));
  }
  return out;
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

} // namespace

parse_result parse_answer(std::string_view answer, std::string_view wrapper) {
  auto text = after_reasoning(answer);
  if (!text)
    return format_problem{"it ended inside the <think> reasoning, before any code. Keep the "
                          "reasoning short and always finish with the code block."};
  auto blocks = python_blocks(*text);
  std::vector<std::vector<function_def>> defs;
  for (const auto& block : blocks)
    defs.push_back(top_level_functions(block));
  auto has_functions = [&](size_t i) { return !defs[i].empty(); };
  if (std::none_of(defs.begin(), defs.end(), [](const auto& d) { return !d.empty(); }))
    return format_problem{blocks.empty() ? "it contains no ```python code block."
                                         : "its code blocks define no functions."};

  // The block holding the wrapper: the last that defines it, else the last with a plain function.
  std::optional<size_t> chosen;
  for (size_t i = 0; i < blocks.size(); ++i)
    if (defines(defs[i], wrapper, false))
      chosen = i;
  std::string renamed_from;
  if (!chosen) {
    for (size_t i = 0; i < blocks.size(); ++i)
      if (has_functions(i) && std::any_of(defs[i].begin(), defs[i].end(),
                                          [](const function_def& d) { return !d.kernel; }))
        chosen = i;
    if (!chosen)
      return format_problem{"it defines kernels but no function named `" + std::string{wrapper} +
                            "` that launches them."};
    auto body = join(blocks[*chosen].lines);
    std::vector<std::string> entry_points;
    for (const auto& d : defs[*chosen]) {
      if (d.kernel)
        continue;
      auto without_def = body;
      without_def.erase(without_def.find("def " + d.name), 4 + d.name.size());
      if (!mentions(without_def, d.name))
        entry_points.push_back(d.name);
    }
    if (entry_points.size() != 1)
      return format_problem{"it has no function named `" + std::string{wrapper} + "`" +
                            (entry_points.empty()
                                 ? std::string{}
                                 : " (candidates: " + names_list(entry_points) + ")") +
                            ". The wrapper must be called `" + std::string{wrapper} + "`."};
    renamed_from = entry_points.front();
    for (auto& line : blocks[*chosen].lines) {
      auto prefix = "def " + renamed_from;
      if (line.rfind(prefix, 0) == 0 && line.size() > prefix.size() &&
          !is_ident_char(line[prefix.size()]))
        line = "def " + std::string{wrapper} + line.substr(prefix.size());
    }
  }

  // Kernels that the wrapper block launches but only other blocks define come first, each from
  // the last block that defines it.
  auto wrapper_source = join(blocks[*chosen].lines);
  std::vector<size_t> merged;
  for (const auto& name : launched_names(wrapper_source)) {
    if (defines(defs[*chosen], name, true))
      continue;
    for (size_t i = blocks.size(); i-- > 0;)
      if (i != *chosen && defines(defs[i], name, true)) {
        if (std::find(merged.begin(), merged.end(), i) == merged.end())
          merged.push_back(i);
        break;
      }
  }
  std::sort(merged.begin(), merged.end());
  std::string source;
  parsed_candidate candidate;
  for (auto i : merged) {
    source += join(blocks[i].lines) + "\n\n";
    for (const auto& d : defs[i])
      if (d.kernel)
        candidate.kernels.push_back(d.name);
  }
  source += wrapper_source;
  for (const auto& d : defs[*chosen])
    if (d.kernel)
      candidate.kernels.push_back(d.name);
  if (candidate.kernels.empty())
    return format_problem{"it defines no @triton.jit kernel: `" + std::string{wrapper} +
                          "` must compute its result by launching Triton kernels."};
  candidate.source = without_provided_imports(source);
  candidate.renamed_from = std::move(renamed_from);
  return candidate;
}

} // namespace opforge
