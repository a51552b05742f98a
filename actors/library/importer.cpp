#include "actors/library/importer.hpp"

// CAF 0.17 deserializes a vector's items into a default-initialized local, which GCC takes for
// uninitialized when the item is an enum (library_kernel's dtypes, in the request to the library).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "actors/library/kernels.hpp"
#include "messages/device_kind.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/jobs.hpp"
#include "messages/library_messages.hpp"
#include "messages/utc_time.hpp"
#include "messages/wire.hpp"
#include "persistence/import_records.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>

#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

namespace opforge {

namespace {

using self_pointer = importer_actor::stateful_pointer<importer_state>;

// Scans read whole families; this only bounds a runaway store.
constexpr uint64_t scan_limit = 1'000'000;

// A repair's first prompt quotes the failure; a compile log or backtrace longer than this is cut
// (the session's own feedback summarizes its later failures).
constexpr size_t feedback_log_chars = 4000;

// The lines a BackendBench file starts with that bind what the harness already defines.
const std::set<std::string> harness_imports{"import torch", "import triton",
                                            "import triton.language as tl",
                                            "from triton import language as tl"};

const std::regex marker_line{R"(^#\s*opforge:\s*(wrapper|variants?)\s*=\s*([\w.,-]+)\s*$)"};

caf::error invalid(std::string what) {
  return caf::make_error(errc::request_invalid, std::move(what));
}

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

namespace {

// Stores the import's status now, or once the write under way ends: at most one write of an
// import at a time, the last one holding its latest status.
void persist(self_pointer self, const std::string& id) {
  auto& run = self->state.imports[id];
  if (run.storing) {
    run.stale = true;
    return;
  }
  run.storing = true;
  run.stale = false;
  write_batch batch{{{family::meta, import_key(id), encode_import(run.status)}}};
  auto written = [self, id] {
    auto& run = self->state.imports[id];
    run.storing = false;
    if (run.stale)
      persist(self, id);
  };
  self->request(self->state.setup.store, caf::infinite, atom::write_v, std::move(batch))
      .then([written](atom::ok) { written(); },
            [id, written](const caf::error& err) {
              spdlog::warn("import {}: its status was not stored: {}", id, render(err));
              written();
            });
}

import_run* find_run(self_pointer self, const std::string& id) {
  auto found = self->state.imports.find(id);
  return found == self->state.imports.end() ? nullptr : &found->second;
}

// Ends the import: a repair campaign first, when one was asked for and something failed.
void finish(self_pointer self, const std::string& id) {
  auto& run = self->state.imports[id];
  auto done = [self, id](std::string error) {
    auto& run = self->state.imports[id];
    run.status.state = import_state::done;
    run.status.error = std::move(error);
    run.status.ended_ms = unix_ms_now();
    spdlog::info("import {} done: {} of {} tests accepted", id, run.status.accepted,
                 run.status.tests);
    persist(self, id);
  };
  if (!run.repair || run.seeds.empty())
    return done({});
  campaign_request request;
  request.dtypes = run.status.dtypes;
  request.device_kind = run.status.device_kind;
  request.seeds = run.seeds;
  self->request(self->state.setup.campaigns, caf::infinite, atom::submit_v, std::move(request))
      .then(
          [self, id, done](campaign_status& campaign) {
            self->state.imports[id].status.repair_campaign = campaign.campaign_id;
            done({});
          },
          [done](const caf::error& err) {
            done("the repair campaign did not start: " + message(err));
          });
}

// Records one verdict; the last one ends the import.
void decide(self_pointer self, const std::string& id, import_verdict verdict) {
  auto& run = self->state.imports[id];
  if (verdict.verdict == to_import_outcome(contract::outcome::pass))
    ++run.status.accepted;
  run.status.verdicts.push_back(std::move(verdict));
  ++run.status.decided;
  if (run.status.state == import_state::testing && run.pending == 0 &&
      run.status.decided == run.status.tests)
    finish(self, id);
  else
    persist(self, id);
}

// A failure that a repair session can start from: the candidate's fault, not the harness's.
void seed(import_run& run, const parsed_kernel& kernel, const import_target& target,
          std::string feedback) {
  for (const auto& s : run.seeds)
    if (s.op == target.op && s.variant == target.variant)
      return;
  run.seeds.push_back({target.op, target.variant, kernel.source, std::move(feedback)});
}

void accept(self_pointer self, const std::string& id, const parsed_kernel& kernel,
            const import_target& target, const contract::test_result& test,
            const device_job_result& job, import_verdict verdict) {
  auto& run = self->state.imports[id];
  contract::library_kernel k;
  k.op = target.op;
  k.variant = target.variant;
  k.wrapper = target.wrapper;
  k.source = kernel.source;
  k.hash = content_hash(kernel.source);
  for (const auto& [name, result] : test.per_dtype)
    if (result.outcome == contract::dtype_outcome::pass)
      if (auto dtype = contract::from_string<contract::dtype>(name))
        k.dtypes.push_back(*dtype);
  k.aten_overloads = target.aten_overloads;
  k.provenance = {
      {"origin", "imported:" + run.status.source}, {"import_id", id}, {"file", kernel.path}};
  k.proofs.push_back({.fingerprint = job.fingerprint,
                      .device_kind = run.status.device_kind,
                      .toolchain = job.toolchain,
                      .outcome = contract::outcome::pass,
                      .tests_run = test.tests_run,
                      .tests_passed = test.tests_passed,
                      .validated_at_ms = unix_ms_now()});
  self->request(self->state.setup.library, caf::infinite, atom::add_v, std::move(k))
      .then(
          [self, id, verdict](kernel_version&) mutable {
            verdict.verdict = to_import_outcome(contract::outcome::pass);
            decide(self, id, std::move(verdict));
          },
          [self, id, verdict](const caf::error& err) mutable {
            verdict.verdict = to_import_outcome(contract::outcome::harness_error);
            verdict.detail = "it passed, but the library did not take it: " + message(err);
            decide(self, id, std::move(verdict));
          });
}

// Lint, then test, then the library: what a session does with a candidate.
void judge(self_pointer self, const std::string& id, size_t index, import_target target,
           std::vector<std::string> dtypes) {
  auto& run = self->state.imports[id];
  const auto& kernel = run.kernels[index];
  auto job_id = id + ":" + kernel.path + ":" + operator_id(target.op, target.variant);
  import_verdict verdict{.path = kernel.path,
                         .op = operator_id(target.op, target.variant),
                         .hash = content_hash(kernel.source)};
  const auto& setup = self->state.setup;
  ++run.pending;
  auto fault = [self, id](import_verdict verdict, const std::string& what) {
    --self->state.imports[id].pending;
    verdict.verdict = to_import_outcome(contract::outcome::harness_error);
    verdict.detail = what;
    decide(self, id, std::move(verdict));
  };
  auto lint = lint_job(job_id + ":lint", kernel.source, target.op, target.wrapper,
                       run.status.device_kind, setup.job_deadline_ms);
  auto test =
      test_job(job_id + ":test", target.op, target.variant, kernel.source, target.wrapper, dtypes,
               {run.status.device_kind, setup.sample_timeout_s, setup.job_deadline_ms});
  self->request(setup.jobs, caf::infinite, atom::submit_v, std::move(lint))
      .then(
          [self, id, index, target, verdict, fault,
           test = std::move(test)](device_job_result& linted) mutable {
            if (linted.status != contract::job_status::done)
              return fault(verdict, "lint job " + to_string(linted.status) + ": " + linted.error);
            auto lint = wire::decode_as<contract::lint_result>(linted.payload, "lint_result");
            if (!lint)
              return fault(verdict, render(lint.error()));
            if (!lint->ok || lint->syntax_error) {
              auto& run = self->state.imports[id];
              --run.pending;
              seed(run, run.kernels[index], target, failure_feedback(*lint));
              verdict.verdict = to_import_outcome(lint->gate_outcome == contract::outcome::pass
                                                      ? contract::outcome::lint_violation
                                                      : lint->gate_outcome);
              verdict.detail = verdict_line(*lint);
              return decide(self, id, std::move(verdict));
            }
            self->request(self->state.setup.jobs, caf::infinite, atom::submit_v, std::move(test))
                .then(
                    [self, id, index, target, verdict, fault](device_job_result& tested) mutable {
                      if (tested.status != contract::job_status::done)
                        return fault(verdict,
                                     "test job " + to_string(tested.status) + ": " + tested.error);
                      auto result =
                          wire::decode_as<contract::test_result>(tested.payload, "test_result");
                      if (!result)
                        return fault(verdict, render(result.error()));
                      auto& run = self->state.imports[id];
                      --run.pending;
                      const auto& kernel = run.kernels[index];
                      if (result->outcome == contract::outcome::pass)
                        return accept(self, id, kernel, target, *result, tested,
                                      std::move(verdict));
                      verdict.verdict = to_import_outcome(result->outcome);
                      verdict.detail = verdict_line(*result);
                      if (result->outcome == contract::outcome::runtime_error &&
                          !kernel.overload.empty())
                        verdict.detail += " (the impl is called as the OpInfo of " + target.op +
                                          " calls it, which may not be the schema of " +
                                          kernel.overload + ")";
                      if (result->outcome != contract::outcome::harness_error)
                        seed(run, kernel, target, failure_feedback(*result));
                      decide(self, id, std::move(verdict));
                    },
                    [fault, verdict](const caf::error& err) { fault(verdict, render(err)); });
          },
          [fault, verdict](const caf::error& err) { fault(verdict, render(err)); });
}

// Decides what needs no device, and sends the rest to be judged.
void test_all(self_pointer self, const std::string& id, const contract::catalog_result& catalog) {
  auto& run = self->state.imports[id];
  run.status.state = import_state::testing;
  persist(self, id);
  std::vector<std::pair<size_t, resolution>> resolved;
  for (size_t i = 0; i < run.kernels.size(); ++i) {
    auto r = resolve(catalog, run.kernels[i]);
    run.status.tests += r.targets.empty() ? 1 : r.targets.size();
    resolved.emplace_back(i, std::move(r));
  }
  // Counted first, so that no early verdict looks like the last one.
  ++run.pending;
  for (auto& [index, r] : resolved) {
    const auto& kernel = self->state.imports[id].kernels[index];
    auto hash = content_hash(kernel.source);
    if (r.targets.empty()) {
      decide(self, id, {kernel.path, "", r.verdict, r.detail, hash});
      continue;
    }
    for (auto& target : r.targets) {
      auto& run = self->state.imports[id];
      auto op = operator_id(target.op, target.variant);
      if (run.present.count(kernel_key(op, kernel.source))) {
        decide(self, id,
               {kernel.path, op, import_outcome::present, "the library has this source for " + op,
                hash});
        continue;
      }
      std::vector<std::string> dtypes;
      for (const auto& dtype : run.status.dtypes)
        if (has(target.dtypes, dtype))
          dtypes.push_back(dtype);
      if (dtypes.empty()) {
        decide(self, id,
               {kernel.path, op, import_outcome::skipped,
                op + " supports none of the requested dtypes (" + join(run.status.dtypes) + ")",
                hash});
        continue;
      }
      judge(self, id, index, std::move(target), std::move(dtypes));
    }
  }
  --self->state.imports[id].pending;
  auto& status = self->state.imports[id].status;
  if (self->state.imports[id].pending == 0 && status.decided == status.tests)
    finish(self, id);
}

void fail(self_pointer self, const std::string& id, const std::string& why) {
  auto& status = self->state.imports[id].status;
  status.state = import_state::failed;
  status.error = why;
  status.ended_ms = unix_ms_now();
  spdlog::warn("import {} failed: {}", id, why);
  persist(self, id);
}

// Whether a kernel is left unmapped that the full catalog may map: one none of whose names the
// catalog knew. One whose name is an OpInfo that does not dispatch to its overload (abs_ read as
// abs) or that the catalog excludes is decided; the full catalog would say the same.
bool unmapped(const contract::catalog_result& catalog, const std::vector<parsed_kernel>& kernels) {
  std::set<std::string> known;
  for (const auto& op : catalog.operators)
    known.insert(op.name);
  for (const auto& op : catalog.excluded)
    known.insert(op.name);
  return std::any_of(kernels.begin(), kernels.end(), [&](const parsed_kernel& kernel) {
    auto guesses = catalog_guesses(kernel);
    return resolve(catalog, kernel).verdict == import_outcome::unmapped &&
           std::none_of(guesses.begin(), guesses.end(),
                        [&](const std::string& name) { return known.count(name) > 0; });
  });
}

// Submits `job` (a job of `what`, e.g. "catalog") and hands its decoded `Result` to `then`; a
// job that did not finish, or an answer that does not decode, fails the import.
template <class Result>
void ask_worker(self_pointer self, const std::string& id, device_job job, const std::string& what,
                std::function<void(Result&)> then) {
  self->request(self->state.setup.jobs, caf::infinite, atom::submit_v, std::move(job))
      .then(
          [self, id, what, then = std::move(then)](device_job_result& result) {
            if (result.status != contract::job_status::done)
              return fail(self, id,
                          "the " + what + " job " + to_string(result.status) + ": " + result.error);
            auto decoded = wire::decode_as<Result>(result.payload, what + "_result");
            if (!decoded)
              return fail(self, id, render(decoded.error()));
            then(*decoded);
          },
          [self, id, what](const caf::error& err) {
            fail(self, id, "no " + what + " result from a worker: " + render(err));
          });
}

// Asks a worker for the catalog of `names` (every operator when empty).
void ask_catalog(self_pointer self, const std::string& id, const std::string& job,
                 std::vector<std::string> names,
                 std::function<void(contract::catalog_result&)> then) {
  auto& run = self->state.imports[id];
  ask_worker(self, id,
             catalog_job(id + job, run.status.device_kind, std::move(names), catalog_deadline_ms),
             "catalog", std::move(then));
}

// The catalog of every operator, for kernels whose names did not lead to theirs.
void full_catalog(self_pointer self, const std::string& id) {
  ask_catalog(self, id, ":catalog", {},
              [self, id](contract::catalog_result& catalog) { test_all(self, id, catalog); });
}

// Asks the catalog for the operators the files' names suggest, in one job (a name no OpInfo has
// comes back in `unknown`, an answer, not a failed job); what they leave unmapped, the full
// catalog resolves.
void resolve_all(self_pointer self, const std::string& id) {
  auto& run = self->state.imports[id];
  run.status.state = import_state::resolving;
  persist(self, id);
  std::set<std::string> names;
  for (const auto& kernel : run.kernels)
    for (auto& name : catalog_guesses(kernel))
      names.insert(std::move(name));
  if (names.empty())
    return test_all(self, id, {});
  ask_catalog(self, id, ":catalog:named", {names.begin(), names.end()},
              [self, id](contract::catalog_result& catalog) {
                if (!catalog.unknown.empty())
                  spdlog::info("import {}: no OpInfo named {} (guessed from file names)", id,
                               fmt::join(catalog.unknown, ", "));
                if (unmapped(catalog, self->state.imports[id].kernels))
                  return full_catalog(self, id);
                test_all(self, id, catalog);
              });
}

// One overload's verdict as the import lists it: its outcome, and the tests behind it.
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

// An installed backend, judged by a device worker in one job through the dispatcher: a verdict
// per overload it registered. None enters the library: its kernels are the package's code, not
// a Triton file of a candidate's form.
void judge_backend(self_pointer self, const std::string& id) {
  auto& run = self->state.imports[id];
  run.status.state = import_state::testing;
  persist(self, id);
  const auto& setup = self->state.setup;
  auto job = backend_job(id + ":backend", run.backend, run.status.dtypes,
                         {run.status.device_kind, setup.sample_timeout_s, setup.job_deadline_ms});
  ask_worker<contract::backend_result>(self, id, std::move(job), "backend",
                                       [self, id](contract::backend_result& judged) {
                                         auto& run = self->state.imports[id];
                                         run.status.files = judged.overloads.size();
                                         run.status.tests = judged.overloads.size();
                                         for (const auto& overload : judged.overloads)
                                           decide(self, id, overload_verdict(overload));
                                         if (judged.overloads.empty())
                                           finish(self, id);
                                       });
}

// The library's kernels now, so that a kernel imported before is not tested again.
void start(self_pointer self, const std::string& id) {
  self->request(self->state.setup.store, caf::infinite, atom::scan_v, family::kernels,
                std::string{}, scan_limit)
      .then(
          [self, id](std::vector<key_value>& kernels) {
            auto& run = self->state.imports[id];
            for (const auto& kv : kernels)
              run.present.insert(kv.key);
            resolve_all(self, id);
          },
          [self, id](const caf::error& err) {
            fail(self, id, "cannot read the library: " + render(err));
          });
}

// Checks a new import's settings and fills in the defaults.
caf::expected<import_status> open_import(const importer_setup& setup, import_request& request) {
  if (request.source.empty())
    return invalid("name the kernel set's source (its provenance: imported:<source>)");
  import_status status;
  status.layout = request.layout;
  status.source = request.source;
  status.device_kind = request.device_kind.empty() ? setup.device_kind : request.device_kind;
  if (!is_device_kind(status.device_kind) || status.device_kind == no_device_kind)
    return invalid("device kind '" + status.device_kind +
                   "': must be a device kind other than none (" + std::string{device_kind_rule} +
                   ")");
  status.dtypes = request.dtypes.empty() ? setup.dtypes : request.dtypes;
  for (const auto& dtype : status.dtypes)
    if (!contract::from_string<contract::dtype>(dtype))
      return invalid("dtype '" + dtype + "': must be one of " +
                     contract::one_of<contract::dtype>());
  if (request.repair && !setup.campaigns)
    return invalid("this daemon runs no campaigns, so it cannot repair");
  bool installed = request.layout == import_layout::torch_library;
  if (installed && request.package.empty())
    return invalid("the torch-library layout judges an installed package: name it (package)");
  if (!installed && (!request.package.empty() || !request.enable.empty() || !request.ops.empty()))
    return invalid("package, enable and ops go with the torch-library layout, not " +
                   to_string(request.layout));
  if (installed && request.repair)
    return invalid("an installed backend cannot be repaired: its kernels are the package's code");
  for (const auto& [what, name] :
       {std::pair{"package", &request.package}, std::pair{"enable", &request.enable}})
    if (std::any_of(name->begin(), name->end(), [](char c) {
          return !std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.';
        }))
      return invalid(std::string{what} + " '" + *name +
                     "': must be a dotted Python name (letters, digits, _ and .)");
  status.created_ms = unix_ms_now();
  status.state = import_state::receiving;
  return status;
}

// An import the store holds as running was cut off when the last daemon stopped: it is said to
// have failed, its verdicts so far kept (the kernels it accepted are in the library).
void end_interrupted(self_pointer self) {
  self->request(self->state.setup.store, caf::infinite, atom::scan_v, family::meta,
                imports_prefix(), scan_limit)
      .then(
          [self](std::vector<key_value>& stored) {
            std::vector<write_op> ended;
            for (const auto& kv : stored) {
              auto status = decode_import(kv.value);
              if (!status) {
                spdlog::warn("{}", render(status.error()));
                continue;
              }
              if (status->state == import_state::done || status->state == import_state::failed)
                continue;
              status->error = "the daemon stopped while the import was " +
                              to_string(status->state) + "; the verdicts before that stand";
              status->state = import_state::failed;
              status->ended_ms = unix_ms_now();
              ended.push_back({family::meta, kv.key, encode_import(*status)});
            }
            if (ended.empty())
              return;
            spdlog::info("{} imports cut off by the last stop are marked failed", ended.size());
            self->request(self->state.setup.store, caf::infinite, atom::write_v,
                          write_batch{std::move(ended)})
                .then([](atom::ok) {},
                      [](const caf::error& err) {
                        spdlog::warn("imports cut off by the last stop: not stored: {}",
                                     render(err));
                      });
          },
          [](const caf::error& err) {
            spdlog::warn("cannot read the stored imports: {}", render(err));
          });
}

} // namespace

importer_actor::behavior_type importer(importer_actor::stateful_pointer<importer_state> self,
                                       importer_setup setup) {
  self->state.setup = std::move(setup);
  end_interrupted(self);
  return {
      [self](atom::onboard, import_request& request) -> caf::result<import_status> {
        auto id = request.import_id;
        if (id.empty()) {
          auto status = open_import(self->state.setup, request);
          if (!status)
            return status.error();
          id = "import-" + timestamped_id();
          status->import_id = id;
          auto& run = self->state.imports[id];
          run.status = std::move(*status);
          run.repair = request.repair;
          run.backend = {request.package, request.enable, request.ops};
          spdlog::info("import {} opened: {} layout from {} on {}", id,
                       to_string(run.status.layout), run.status.source, run.status.device_kind);
          persist(self, id);
        }
        auto* run = find_run(self, id);
        if (!run)
          return invalid("no import '" + id + "' in this daemon");
        if (run->status.state != import_state::receiving)
          return invalid("import " + id + " takes no more files (it is " +
                         to_string(run->status.state) + ")");
        if (run->status.layout == import_layout::torch_library) {
          if (!request.files.empty() || request.more) {
            fail(self, id,
                 "the torch-library layout takes no files: the worker imports the package");
            return run->status;
          }
          judge_backend(self, id);
          return run->status;
        }
        for (const auto& file : request.files)
          run->kernels.push_back(parse_kernel(run->status.layout, file));
        run->status.files = run->kernels.size();
        if (!request.more) {
          if (run->kernels.empty()) {
            fail(self, id, "the kernel set has no files");
            return run->status;
          }
          start(self, id);
        }
        return run->status;
      },
      [self](atom::status, const std::string& id) -> caf::result<import_status> {
        if (auto* run = find_run(self, id))
          return run->status;
        auto promise = self->make_response_promise<import_status>();
        self->request(self->state.setup.store, caf::infinite, atom::get_v, family::meta,
                      import_key(id))
            .then(
                [promise, id](stored_value& stored) mutable {
                  if (!stored.value) {
                    promise.deliver(invalid("no import '" + id + "' in this daemon's store"));
                    return;
                  }
                  auto status = decode_import(*stored.value);
                  if (!status) {
                    promise.deliver(status.error());
                    return;
                  }
                  promise.deliver(std::move(*status));
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self](atom::list) -> caf::result<std::vector<import_status>> {
        auto promise = self->make_response_promise<std::vector<import_status>>();
        self->request(self->state.setup.store, caf::infinite, atom::scan_v, family::meta,
                      imports_prefix(), scan_limit)
            .then(
                [self, promise](std::vector<key_value>& stored) mutable {
                  std::vector<import_status> out;
                  for (const auto& kv : stored) {
                    auto status = decode_import(kv.value);
                    if (!status) {
                      promise.deliver(status.error());
                      return;
                    }
                    // What this daemon holds is newer than a write still under way.
                    if (auto* run = find_run(self, status->import_id))
                      *status = run->status;
                    status->verdicts.clear(); // a list of imports, not of their verdicts
                    out.push_back(std::move(*status));
                  }
                  promise.deliver(std::move(out));
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
  };
}

} // namespace opforge
