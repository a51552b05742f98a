#include "actors/library/kernel_sets.hpp"

#include "messages/contract.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <charconv>
#include <regex>
#include <set>
#include <sstream>

#include <spdlog/fmt/fmt.h>

namespace opforge {

namespace {

// A repair's first prompt quotes the failure; a compile log or backtrace longer than this is cut
// (the session's own feedback summarizes its later failures).
constexpr size_t feedback_log_chars = 4000;

// The lines a BackendBench file starts with that bind what the harness already defines.
const std::set<std::string> harness_imports{"import torch", "import triton",
                                            "import triton.language as tl",
                                            "from triton import language as tl"};

const std::regex marker_line{R"(^#\s*opforge:\s*(wrapper|variants?)\s*=\s*([\w.,-]+)\s*$)"};

std::string first_line(std::string_view text) {
  return std::string{text.substr(0, text.find('\n'))};
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items)
    out += (out.empty() ? "" : ", ") + item;
  return out;
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string cut(const std::string& text) {
  if (text.size() <= feedback_log_chars)
    return text;
  return text.substr(0, feedback_log_chars) + "\n[... cut]";
}

struct function_def {
  std::string name;
  bool kernel = false; // decorated with something that says jit
};

// The functions a source defines at its top level, read line by line (the linter parses it for
// real on the worker; this only has to find the wrapper's name).
std::vector<function_def> top_level_functions(std::string_view source) {
  std::vector<function_def> out;
  bool jit = false;
  std::istringstream lines{std::string{source}};
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind('@', 0) == 0) {
      jit = jit || line.find("jit") != std::string::npos;
    } else if (line.rfind("def ", 0) == 0) {
      auto open = line.find('(');
      if (open != std::string::npos)
        out.push_back({line.substr(4, open - 4), jit});
      jit = false;
    } else if (!line.empty() &&
               (std::isalpha(static_cast<unsigned char>(line[0])) || line[0] == '_')) {
      jit = false; // another statement between a decorator and its def
    }
  }
  return out;
}

// worker/opforge_worker/validate.py's default_wrapper: `<op>_wrapper`, then `<op>` (dots as
// underscores), then the only top-level function that is not a kernel.
std::string default_wrapper(const std::string& op, std::string_view source) {
  auto base = op;
  std::replace(base.begin(), base.end(), '.', '_');
  auto conventional = base + "_wrapper";
  auto functions = top_level_functions(source);
  for (const auto& name : {conventional, base})
    for (const auto& f : functions)
      if (f.name == name)
        return name;
  std::vector<std::string> plain;
  for (const auto& f : functions)
    if (!f.kernel)
      plain.push_back(f.name);
  return plain.size() == 1 ? plain.front() : conventional;
}

// The name of an overload's aten op: aten.add_.Tensor -> add_.
std::string aten_op(const std::string& overload) {
  auto name = overload.substr(overload.find('.') + 1);
  return name.substr(0, name.find('.'));
}

// A file name's readings as an operator name: the whole, then up to each dot, the longest first.
std::vector<std::string> leading_names(const std::string& stem) {
  std::vector<std::string> out{stem};
  for (auto i = stem.size(); i-- > 1;)
    if (stem[i] == '.')
      out.push_back(stem.substr(0, i));
  return out;
}

std::string last_component(const std::string& name) {
  return name.substr(name.rfind('.') + 1);
}

resolution backendbench_targets(const contract::catalog_result& catalog,
                                const parsed_kernel& kernel) {
  auto op_name = aten_op(kernel.overload);
  auto named = [&](const std::string& overload) {
    return kernel.every_overload ? aten_op(overload) == op_name : overload == kernel.overload;
  };
  std::vector<const contract::catalog_operator*> holders;
  for (const auto& op : catalog.operators)
    if (std::any_of(op.aten_overloads.begin(), op.aten_overloads.end(), named))
      holders.push_back(&op);
  auto folder = kernel.path.substr(0, kernel.path.find('/'));
  auto reading = kernel.every_overload
                     ? "folder " + folder + " names the aten op " + op_name +
                           " (BackendBench's one-folder-per-operator layout: every overload of " +
                           kernel.overload + ")"
                     : "folder " + folder + " names the aten overload " + kernel.overload;
  if (holders.empty()) {
    for (const auto& excluded : catalog.excluded)
      if (has(catalog_guesses(kernel), excluded.name))
        return {{},
                import_outcome::unmapped,
                reading + ", whose OpInfo " + excluded.name +
                    " is excluded from the catalog: " + excluded.reason};
    return {{},
            import_outcome::unmapped,
            reading + ", and no operator of the catalog dispatches to " +
                (kernel.every_overload ? "an overload of it" : "it")};
  }
  // The operator that is this aten op, by name (abs, nn.functional.relu for relu); else those
  // whose every overload is one of it. An operator that merely calls it among others is not
  // what the impl computes.
  auto stripped = op_name.back() == '_' ? op_name.substr(0, op_name.size() - 1) : op_name;
  std::vector<const contract::catalog_operator*> chosen;
  for (const auto* op : holders)
    if (last_component(op->name) == op_name || last_component(op->name) == stripped)
      chosen.push_back(op);
  if (chosen.empty())
    for (const auto* op : holders)
      if (std::all_of(op->aten_overloads.begin(), op->aten_overloads.end(),
                      [&](const std::string& o) { return aten_op(o) == op_name; }))
        chosen.push_back(op);
  if (chosen.empty()) {
    std::vector<std::string> names;
    for (const auto* op : holders)
      names.push_back(operator_id(op->name, op->variant));
    return {{},
            import_outcome::unmapped,
            reading + ", one of the ATen ops of " + join(names) +
                ", none of which is that op alone"};
  }
  resolution out;
  for (const auto* op : chosen)
    out.targets.push_back({op->name, op->variant, kernel.wrapper, op->aten_overloads, op->dtypes});
  return out;
}

resolution candidate_targets(const contract::catalog_result& catalog, const parsed_kernel& kernel) {
  std::map<std::string, std::vector<const contract::catalog_operator*>> variants_of;
  for (const auto& op : catalog.operators)
    variants_of[op.name].push_back(&op);
  const auto& stem = kernel.stem;
  auto is_variant = [&](const std::string& op, const std::string& variant) {
    auto found = variants_of.find(op);
    return found != variants_of.end() &&
           std::any_of(found->second.begin(), found->second.end(),
                       [&](const auto* o) { return o->variant == variant; });
  };
  // Every reading of the name as operator + variant, the longest operator first.
  std::vector<std::string> ops;
  for (auto& name : leading_names(stem))
    if (variants_of.count(name))
      ops.push_back(std::move(name));
  auto named_variant = [&](const std::string& op) {
    return op.size() < stem.size() ? stem.substr(op.size() + 1) : std::string{};
  };
  std::string op;
  std::vector<std::string> variants;
  const auto& marked = kernel.marked_variants;
  if (!marked.empty()) {
    for (const auto& o : ops)
      if (has(marked, named_variant(o)) && op.empty())
        op = o;
    if (op.empty())
      op = ops.empty() ? stem : ops.front();
    auto named = named_variant(op);
    if (!named.empty() && !has(marked, named))
      return {{},
              import_outcome::invalid,
              "the file name asks for variant '" + named + "' of " + op + " but its marker for " +
                  join(marked)};
    variants = marked;
  } else {
    std::vector<std::string> readings;
    for (const auto& o : ops)
      if (is_variant(o, named_variant(o)))
        readings.push_back(o);
    if (readings.size() > 1)
      return {{},
              import_outcome::invalid,
              "the file name reads as " + readings[0] + " variant '" + named_variant(readings[0]) +
                  "' or " + readings[1] + " variant '" + named_variant(readings[1]) +
                  "': name the variant with a marker line `# opforge: variant=...`"};
    op = !readings.empty() ? readings.front() : !ops.empty() ? ops.front() : stem;
    variants = {named_variant(op)};
  }
  if (!variants_of.count(op)) {
    for (const auto& excluded : catalog.excluded)
      if (excluded.name == op)
        return {
            {}, import_outcome::unmapped, op + " is excluded from the catalog: " + excluded.reason};
    return {{}, import_outcome::unmapped, "no operator of the catalog is named " + op};
  }
  resolution out;
  for (const auto& variant : variants) {
    if (!is_variant(op, variant))
      return {
          {}, import_outcome::unmapped, op + " has no variant '" + variant + "' in the catalog"};
    for (const auto* o : variants_of[op])
      if (o->variant == variant)
        out.targets.push_back({op, variant,
                               kernel.marked_wrapper.empty() ? default_wrapper(op, kernel.source)
                                                             : kernel.marked_wrapper,
                               o->aten_overloads, o->dtypes});
  }
  return out;
}

} // namespace

std::string overload_of(std::string_view folder) {
  // Right to left, so that add___Tensor is add_.Tensor, as BackendBench reads it.
  std::string reversed;
  for (auto i = static_cast<std::ptrdiff_t>(folder.size()) - 1; i >= 0;) {
    if (i >= 1 && folder[i] == '_' && folder[i - 1] == '_') {
      reversed += '.';
      i -= 2;
    } else {
      reversed += folder[i--];
    }
  }
  return "aten." + std::string{reversed.rbegin(), reversed.rend()};
}

parsed_kernel parse_kernel(import_layout layout, const import_file& file) {
  parsed_kernel out;
  out.path = file.path;
  out.source = file.source;
  auto slash = file.path.rfind('/');
  auto name = slash == std::string::npos ? file.path : file.path.substr(slash + 1);
  if (layout == import_layout::backendbench) {
    auto folder = file.path.substr(0, file.path.find('/'));
    out.overload = overload_of(folder);
    out.every_overload = folder.find("__") == std::string::npos;
    out.wrapper = folder + "_kernel_impl";
    if (slash == std::string::npos || name.rfind(folder + "_implementation", 0) != 0) {
      out.problem = "not a BackendBench implementation file: <folder>/<folder>_implementation*.py, "
                    "the folder an aten overload (abs__default) or, in the older layout, an aten "
                    "op (abs)";
      return out;
    }
    // Blanked, not removed, so that line numbers in verdicts are the file's.
    std::istringstream lines{file.source};
    std::string cleaned;
    for (std::string line; std::getline(lines, line);) {
      auto end = line.find_last_not_of(" \t\r");
      cleaned += (harness_imports.count(line.substr(0, end + 1)) ? "" : line) + "\n";
    }
    out.source = std::move(cleaned);
    auto functions = top_level_functions(out.source);
    if (std::none_of(functions.begin(), functions.end(),
                     [&](const function_def& f) { return f.name == out.wrapper; }))
      out.problem = "defines no " + out.wrapper + " (BackendBench calls <folder>_kernel_impl)";
    return out;
  }
  out.stem = name.size() > 3 && name.ends_with(".py") ? name.substr(0, name.size() - 3) : name;
  std::istringstream lines{file.source};
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (!std::regex_match(line, match, marker_line))
      continue;
    if (match[1] == "wrapper") {
      out.marked_wrapper = match[2];
      continue;
    }
    std::stringstream items{match[2].str()};
    for (std::string item; std::getline(items, item, ',');) {
      if (item.empty())
        continue;
      auto variant = item == "default" ? std::string{} : item;
      if (!has(out.marked_variants, variant))
        out.marked_variants.push_back(variant);
    }
  }
  return out;
}

std::vector<std::string> catalog_guesses(const parsed_kernel& kernel) {
  if (!kernel.problem.empty())
    return {};
  if (!kernel.overload.empty()) {
    auto op = aten_op(kernel.overload);
    if (op.size() > 1 && op.back() == '_')
      op.pop_back();
    // Many aten ops are OpInfos of torch.nn.functional (relu is nn.functional.relu).
    return {op, "nn.functional." + op};
  }
  return leading_names(kernel.stem);
}

resolution resolve(const contract::catalog_result& catalog, const parsed_kernel& kernel) {
  if (!kernel.problem.empty())
    return {{}, import_outcome::invalid, kernel.problem};
  return kernel.overload.empty() ? candidate_targets(catalog, kernel)
                                 : backendbench_targets(catalog, kernel);
}

std::string verdict_line(const contract::lint_result& lint) {
  if (lint.syntax_error)
    return "syntax error at line " + std::to_string(lint.syntax_error->line) + ": " +
           first_line(lint.syntax_error->message);
  if (lint.violations.empty())
    return "the linter refused it";
  // Every violation: a user fixing the file needs them all, not the first.
  std::string line;
  for (const auto& v : lint.violations)
    line += (line.empty() ? "" : "; ") + v.rule + " at line " + std::to_string(v.line) + ": " +
            first_line(v.text);
  return line;
}

namespace {

// An accuracy failure's numbers on one line: how far off, under which tolerance, how many.
std::string diff_numbers(const contract::tensor_diff& diff) {
  auto real = [](double value) {
    char text[32];
    auto end = std::to_chars(text, text + sizeof text, value).ptr;
    return std::string{text, end};
  };
  std::vector<std::string> parts{diff.reason};
  if (diff.actual_shape != diff.expected_shape || diff.actual_dtype != diff.expected_dtype) {
    auto shape = [](const std::vector<int64_t>& dims) {
      std::string out;
      for (auto d : dims)
        out += (out.empty() ? "" : ", ") + std::to_string(d);
      return "[" + out + "]";
    };
    parts.push_back(diff.actual_dtype + shape(diff.actual_shape) + " where the reference is " +
                    diff.expected_dtype + shape(diff.expected_shape));
  }
  if (diff.max_abs_error)
    parts.push_back("max abs error " + real(*diff.max_abs_error));
  if (diff.max_rel_error)
    parts.push_back("max rel error " + real(*diff.max_rel_error));
  if (diff.atol || diff.rtol)
    parts.push_back("tolerance atol " + (diff.atol ? real(*diff.atol) : "-") + " rtol " +
                    (diff.rtol ? real(*diff.rtol) : "-"));
  if (diff.nan_inf_mismatches && *diff.nan_inf_mismatches)
    parts.push_back(std::to_string(*diff.nan_inf_mismatches) + " NaN/inf mismatches");
  if (diff.signed_zero_mismatches && *diff.signed_zero_mismatches)
    parts.push_back(std::to_string(*diff.signed_zero_mismatches) + " signed-zero mismatches");
  if (diff.mismatched && diff.total)
    parts.push_back(std::to_string(*diff.mismatched) + " of " + std::to_string(*diff.total) +
                    " elements mismatched");
  if (!diff.first_mismatches.empty()) {
    const auto& first = diff.first_mismatches.front();
    std::string index;
    for (auto i : first.index)
      index += (index.empty() ? "" : ", ") + std::to_string(i);
    parts.push_back("first at [" + index + "]: " + first.actual + " where " + first.expected +
                    " is expected");
  }
  return join(parts);
}

} // namespace

std::string verdict_line(const contract::test_result& test) {
  if (!test.failure)
    return std::string{to_string(test.outcome)};
  const auto& f = *test.failure;
  std::string where = f.dtype;
  if (!f.sample_set.empty())
    where += (where.empty() ? "" : " ") + f.sample_set + " #" + std::to_string(f.sample_index);
  auto line = (where.empty() ? "" : where + ": ") + first_line(f.message);
  if (f.diff)
    line += " (" + diff_numbers(*f.diff) + ")";
  return line;
}

std::string failure_feedback(const contract::lint_result& lint) {
  std::string out = "The linter refused this kernel before it ran.\n";
  if (lint.syntax_error)
    out += "Syntax error at line " + std::to_string(lint.syntax_error->line) + ": " +
           lint.syntax_error->message + "\n";
  for (const auto& v : lint.violations)
    out += "- line " + std::to_string(v.line) + " (" + v.rule + "): " + v.text +
           (v.hint.empty() ? "" : ". " + v.hint) + "\n";
  return out;
}

std::string failure_feedback(const contract::test_result& test) {
  std::string out = "Its test ended " + std::string{to_string(test.outcome)} + " (" +
                    std::to_string(test.tests_passed) + " of " + std::to_string(test.tests_run) +
                    " samples passed).\n";
  if (!test.failure)
    return out;
  const auto& f = *test.failure;
  if (!f.dtype.empty())
    out += "dtype: " + f.dtype + "\n";
  if (!f.sample.empty())
    out += "sample: " + f.sample + "\n";
  out += f.message + "\n";
  for (const auto& finding : f.findings)
    out += "- " + finding + "\n";
  for (const auto& [label, log] :
       {std::pair{"compile log", &f.compile_log}, std::pair{"backtrace", &f.backtrace},
        std::pair{"CUDA error", &f.cuda_error}})
    if (!log->empty())
      out += std::string{label} + ":\n" + cut(*log) + "\n";
  return out;
}

import_verdict overload_verdict(const contract::backend_overload& overload) {
  import_verdict verdict{.path = overload.overload, .op = join(overload.opinfos)};
  if (overload.outcome == "never_reached")
    verdict.verdict = import_outcome::never_reached;
  else if (overload.outcome == "unjudged")
    verdict.verdict = import_outcome::unjudged;
  else if (auto outcome = contract::from_string<contract::outcome>(overload.outcome))
    verdict.verdict = to_import_outcome(*outcome);
  else
    verdict.detail = "the worker answered an unknown outcome '" + overload.outcome + "'; ";
  if (verdict.verdict != import_outcome::unjudged) {
    verdict.detail += std::to_string(overload.tests_passed) + "/" +
                      std::to_string(overload.tests_run) + " tests passed";
    verdict.detail += overload.reached
                          ? ", its kernel called " + std::to_string(*overload.reached) + " times"
                          : ", its calls not counted (registered other than through "
                            "torch.library)";
  }
  if (!overload.problem.empty())
    verdict.detail += (verdict.detail.empty() ? "" : ": ") + overload.problem;
  return verdict;
}

} // namespace opforge
