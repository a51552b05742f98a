#pragma once

// What a file of a kernel set is, in each layout the importer reads (actors/library/importer.hpp
// describes the layouts): the kernel it holds, the operators of the catalog it is tested as, and
// its verdict in words, one line for the import's listing and whole for a repair's first prompt.

#include "messages/contract.hpp"
#include "messages/import_messages.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace opforge {

/// A file of a kernel set, read for its layout.
struct parsed_kernel {
  std::string path;
  std::string source;          // as it is tested and stored
  std::string wrapper;         // "" for a candidate file: it depends on the operator it names
  std::string marked_wrapper;  // candidates: `# opforge: wrapper=...`
  std::string overload;        // backendbench: e.g. aten.abs.default; in the older layout aten.abs
  bool every_overload = false; // backendbench's older layout: the folder names an aten op
  std::string stem;            // candidates: the file name without .py
  std::vector<std::string> marked_variants; // candidates: "" for the default variant
  std::string problem;                      // why it is no kernel of its layout; "" when it is one
};

/// Reads `file` as a file of `layout`.
parsed_kernel parse_kernel(import_layout layout, const import_file& file);

/// The aten overload of a BackendBench folder name (BackendBench's folder_name_to_op_name):
/// `add__Tensor` -> `aten.add.Tensor`, `add___Tensor` -> `aten.add_.Tensor`; an older-layout
/// folder, with no `__`, gives its aten op: `abs` -> `aten.abs`.
std::string overload_of(std::string_view folder);

/// The OpInfo names `kernel` may be an operator of, to ask the catalog for first.
std::vector<std::string> catalog_guesses(const parsed_kernel& kernel);

/// One operator a kernel is tested as.
struct import_target {
  std::string op;
  std::string variant;
  std::string wrapper;
  std::vector<std::string> aten_overloads;
  std::vector<std::string> dtypes; // what the operator supports, in the catalog's order
};

/// The operators `kernel` is tested as; when there are none, `verdict` (unmapped or invalid) and
/// `detail` say why.
struct resolution {
  std::vector<import_target> targets;
  import_outcome verdict = import_outcome::unmapped;
  std::string detail;
};

resolution resolve(const contract::catalog_result& catalog, const parsed_kernel& kernel);

/// The one-line detail of a lint or test verdict that is not a pass.
std::string verdict_line(const contract::lint_result& lint);
std::string verdict_line(const contract::test_result& test);

/// What a repair session is told of its seed's failure, as its first feedback.
std::string failure_feedback(const contract::lint_result& lint);
std::string failure_feedback(const contract::test_result& test);

/// A backend's overload as the import lists it (torch-library): its outcome, the OpInfos behind
/// it, and `N/M tests passed, its kernel called K times: <first failure>`.
import_verdict overload_verdict(const contract::backend_overload& overload);

} // namespace opforge
