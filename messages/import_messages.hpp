#pragma once

// What `opforge import` hands the importer (actors/library/importer.hpp) and what it answers: a
// kernel set read from a directory by the CLI, in parts that fit the control socket, and the
// verdict on each kernel.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace opforge {

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
  std::string layout{};    // "backendbench" or "candidates"
  std::string source{};    // provenance: the kernels enter the library as imported:<source>
  std::string device_kind{};
  std::vector<std::string> dtypes{}; // empty: the daemon's campaigns.dtypes
  bool repair = false;               // start a campaign of sessions seeded with the failing kernels
  std::vector<import_file> files{};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, import_request& x) {
  return f(caf::meta::type_name("import_request"), x.import_id, x.more, x.layout, x.source,
           x.device_kind, x.dtypes, x.repair, x.files);
}

/// The verdict on one file tested as one operator (a file may stand for several operators, or
/// for none).
struct import_verdict {
  std::string path{};
  std::string op{}; // the operator id it was tested as; "" when it maps to none
  // "pass" (it is in the library now), "present" (the library had it: same source), a test
  // outcome (compile_error, accuracy_error, cheat_detected, lint_violation...), "unmapped" (no
  // operator of the catalog to test it as) or "invalid" (not a kernel of its layout)
  std::string verdict{};
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
  // "receiving" (waiting for parts), "resolving" (reading the catalog), "testing", "done" or
  // "failed" (`error` says why; the verdicts so far stand)
  std::string state{};
  std::string error{};
  std::string layout{};
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
