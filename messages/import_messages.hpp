#pragma once

// What `opforge import` hands the importer (actors/library/importer.hpp) and what it answers: a
// kernel set read from a directory by the CLI, in parts that fit the control socket, and the
// verdict on each kernel.

#include "messages/contract.hpp"
#include "messages/enum_names.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace opforge {

/// How a kernel set is laid out (actors/library/importer.hpp describes each): files of a
/// directory, or torch_library, an installed package that registers ATen kernels with the
/// dispatcher (no files: the worker's Python imports it).
enum class import_layout : uint8_t { backendbench, candidates, torch_library };

template <>
struct contract::enum_traits<import_layout> {
  static constexpr std::string_view label = "import_layout";
  static constexpr std::array<std::string_view, 3> names{"backendbench", "candidates",
                                                         "torch-library"};
  static_assert(names.size() - 1 == static_cast<size_t>(import_layout::torch_library));
};

/// Where an import is: receiving (waiting for parts), resolving (reading the catalog), testing,
/// done or failed (`error` says why; the verdicts so far stand).
enum class import_state : uint8_t { receiving, resolving, testing, done, failed };

template <>
struct contract::enum_traits<import_state> {
  static constexpr std::string_view label = "import_state";
  static constexpr std::array<std::string_view, 5> names{"receiving", "resolving", "testing",
                                                         "done", "failed"};
  static_assert(names.size() - 1 == static_cast<size_t>(import_state::failed));
};

/// Whether an import in `state` has ended (done or failed): nothing more happens to it.
constexpr bool ended(import_state state) {
  return state == import_state::done || state == import_state::failed;
}

/// The verdict on one file tested as one operator: a test's outcome (pass: it is in the library
/// now; compile_error, lint_violation, harness_error, ...), whose values come first so that
/// `to_import_outcome` widens one, or what the importer decided without a test: present (the
/// library had it: same source), skipped (the operator supports none of the dtypes asked for),
/// unmapped (no operator of the catalog to test it as) or invalid (not a kernel of its layout);
/// for an overload a backend registered (torch_library), never_reached (its kernel ran in none
/// of the tests that dispatch to it) or unjudged (no OpInfo of the catalog dispatches to it:
/// neither accepted nor refused).
enum class import_outcome : uint8_t {
  present = contract::enum_traits<contract::outcome>::names.size(),
  skipped,
  unmapped,
  invalid,
  never_reached,
  unjudged,
};

template <>
struct contract::enum_traits<import_outcome> {
  static constexpr std::string_view label = "import_outcome";
  static constexpr auto names =
      extended(enum_traits<contract::outcome>::names,
               std::array<std::string_view, 6>{"present", "skipped", "unmapped", "invalid",
                                               "never_reached", "unjudged"});
  static_assert(names.size() - 1 == static_cast<size_t>(import_outcome::unjudged));
};

constexpr import_outcome to_import_outcome(contract::outcome value) {
  return static_cast<import_outcome>(value);
}

/// One file of a kernel set, as read from its directory.
struct import_file {
  std::string
      path{}; // relative to the directory, e.g. abs__default/abs__default_implementation_v1.py
  std::string source{}; // the file's text
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, import_file& x) {
  return f(caf::meta::type_name("import_file"), x.path, x.source);
}

/// One part of an import. The first part has no `import_id` and says how to test; later parts
/// name the import and add files; the part with `more` false starts the tests.
struct import_request {
  std::string import_id{}; // "" = a new import
  bool more = false;       // more parts follow
  import_layout layout = import_layout::candidates;
  std::string source{}; // provenance: the kernels enter the library as imported:<source>
  std::string device_kind{};
  std::vector<std::string> dtypes{}; // empty: the daemon's campaigns.dtypes
  bool repair = false;               // start a campaign of sessions seeded with the failing kernels
  std::vector<import_file> files{};
  std::string package{};          // torch_library: the installed package, e.g. flag_gems
  std::string enable{};           // torch_library: the call that enables it ("" = package.enable)
  std::vector<std::string> ops{}; // torch_library: only these OpInfos (empty: the catalog's)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, import_request& x) {
  return f(caf::meta::type_name("import_request"), x.import_id, x.more, x.layout, x.source,
           x.device_kind, x.dtypes, x.repair, x.files, x.package, x.enable, x.ops);
}

/// The verdict on one file tested as one operator (a file may stand for several operators, or
/// for none).
struct import_verdict {
  std::string path{};
  std::string op{}; // the operator id it was tested as; "" when it maps to none
  import_outcome verdict = to_import_outcome(contract::outcome::harness_error);
  std::string detail{}; // one line
  std::string hash{};   // the source's content hash, as the library keys it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, import_verdict& x) {
  return f(caf::meta::type_name("import_verdict"), x.path, x.op, x.verdict, x.detail, x.hash);
}

/// An import at a glance.
struct import_status {
  std::string import_id{};
  import_state state = import_state::receiving;
  std::string error{};
  import_layout layout = import_layout::candidates;
  std::string source{};
  std::string device_kind{};
  std::vector<std::string> dtypes{};
  int64_t created_ms = 0;
  int64_t ended_ms = 0;
  uint64_t files = 0;
  uint64_t tests = 0;   // file x operator pairs to decide
  uint64_t decided = 0; // of them
  uint64_t accepted = 0;
  std::vector<import_verdict> verdicts{}; // in the order they were decided
  std::string repair_campaign{};          // the campaign of repair sessions, when one started
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, import_status& x) {
  return f(caf::meta::type_name("import_status"), x.import_id, x.state, x.error, x.layout, x.source,
           x.device_kind, x.dtypes, x.created_ms, x.ended_ms, x.files, x.tests, x.decided,
           x.accepted, x.verdicts, x.repair_campaign);
}

} // namespace opforge
