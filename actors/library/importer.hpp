#pragma once

// The importer: onboards an existing kernel set (`opforge import DIR`). Every kernel goes through
// what a session's candidate goes through: the catalog says which operator it is, a lint job and
// a test job on a device worker (every sample set, every requested dtype the operator supports)
// judge it, and a kernel that passes enters the library as imported:<source>, one write each, so
// a daemon that dies mid-import keeps what it accepted; importing again finds those "present" by
// their source hash. With `repair`, the failing kernels seed a campaign of debug-existing
// sessions, each starting from its kernel and its failure.
//
// Layouts (what a file of the set is):
// - candidates: worker/CANDIDATE.md files named after the operator (`exp.py`,
//   `softmax.with_dtype.py`), read as `opforge_worker validate` reads them: the longest leading
//   dotted part of the name that the catalog knows is the operator, the rest its variant;
//   `# opforge: wrapper=... / variant(s)=...` markers override.
// - backendbench: BackendBench's DirectoryBackend, one folder per aten overload
//   (`abs__default/abs__default_implementation_v1.py` defining `abs__default_kernel_impl`), or
//   in its older layout one folder per aten op (`abs/abs_implementation_v1.py` defining
//   `abs_kernel_impl`): a folder name without BackendBench's `__` separator. BackendBench from
//   its PR #90 to #192 registered such a folder's impl for every overload whose name is the
//   folder's (op_map.query("abs"): abs.default and abs.out; "add": add.Tensor, add.Scalar and
//   their outs; in-place ops have their own folders, abs_), and since #192 reads it as
//   `aten.abs.default`; so here it stands for every overload of that aten op. The overload (or
//   the op's overloads) maps to the catalog operator(s) it is the ATen op of, and the impl is
//   tested as the operator's wrapper: the harness calls it as the OpInfo calls the operator, which
//   is the aten schema's convention for most operators; where it is not, the verdict's detail says
//   so. The imports of torch and triton such a file starts with are blanked (the harness defines
//   those names, and the linter refuses imports); any other import stays and is judged.
// - torch-library: no files; an installed package that registers ATen kernels with the
//   dispatcher on an enable call (FlagGems' way), judged by one backend job on a device worker
//   (`validate --backend`: every OpInfo that dispatches to what it registered, each overload's
//   kernel calls counted). The verdicts are per overload; none enters the library.

#include "actors/library/kernel_sets.hpp"
#include "messages/actors.hpp"
#include "messages/contract.hpp"
#include "messages/import_messages.hpp"
#include "messages/jobs.hpp"
#include "messages/session_messages.hpp"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

namespace opforge {

struct importer_setup {
  job_runner_actor jobs;
  store_actor store;
  library_actor library;
  campaign_manager_actor campaigns; // for --repair; may be null
  std::string device_kind;          // the default, resolved (never "auto")
  std::vector<std::string> dtypes;  // the default
  double sample_timeout_s = 60;
  int64_t job_deadline_ms = 30 * 60 * 1000;
};

/// One import this daemon runs or ran since it started; its status is also stored
/// (persistence/import_records.hpp), after every change, so that it outlives the daemon.
struct import_run {
  import_status status;
  bool repair = false;
  backend_spec backend; // torch_library: the installed package
  std::vector<parsed_kernel> kernels;
  std::set<std::string> present;    // `kernels` keys the library held when the tests started
  std::vector<campaign_seed> seeds; // the failing kernels, one per operator
  uint64_t pending = 0;             // tests not decided yet
  bool storing = false;             // a write of the status is under way
  bool stale = false;               // the status changed since that write began
};

struct importer_state {
  importer_setup setup;
  std::map<std::string, import_run> imports; // by id

  static inline const char* name = "importer";
};

/// Spawn with `system.spawn(importer, setup)`.
importer_actor::behavior_type importer(importer_actor::stateful_pointer<importer_state> self,
                                       importer_setup setup);

} // namespace opforge
