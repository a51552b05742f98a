#pragma once

// The maintenance actor (issue 19): keeps the library proved on every toolchain its workers run.
// Every `poll` it asks the device manager for the live workers' toolchains and the library for its
// kernels; each live (device kind, fingerprint) owes a verdict for every current kernel of the
// device kind that has none there yet (pending_validations, actors/library/regressions.hpp). So
// a new fingerprint owes the whole current library, and the owed work is derived from the
// `validations` family alone: a restart neither repeats a recorded verdict nor loses one that was
// not recorded. Owed kernels become background test jobs pinned to the fingerprint; verdicts go
// to the library. A current kernel that passes on a live toolchain and has no timing there is
// owed a timing the same way (pending_timings): a background benchmark job whose timings go to the
// library, so each toolchain's speed is measured beside its verdicts, the export routes each shape
// class by them, and a kernel slower than on the previous toolchain is a speed regression
// (find_speed_regressions). A device kind whose worker times with the logic-only
// timer (the interpreter) is timed no further in the daemon's life: its timings measure nothing.
// `revalidate` by hand stores its request in the store (`family::meta`), so verdicts older than it
// stop counting, and a restart resumes it. With `repair` on, each new regression is handed to
// repair_campaigns (actors/library/repair.hpp) and its campaign started.

#include "messages/actors.hpp"
#include "messages/device_messages.hpp"
#include "messages/library_messages.hpp"
#include "messages/metrics.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

namespace opforge {

/// What the maintenance actor needs of the device manager (device_manager_actor converts to it):
/// the workers' toolchains, and the jobs that judge kernels there.
using maintenance_fleet_actor =
    caf::typed_actor<caf::replies_to<atom::submit, device_job>::with<device_job_result>,
                     caf::reacts_to<atom::cancel, std::string>,
                     caf::replies_to<atom::workers>::with<std::vector<worker_info>>>;

struct maintenance_setup {
  maintenance_fleet_actor fleet;
  library_actor library;
  store_actor store;
  campaign_manager_actor campaigns;   // starts repair campaigns; may be null
  std::shared_ptr<metrics> telemetry; // may be null
  /// Off: only toolchains asked for by hand (`revalidate`) are re-validated.
  bool enabled = true;
  std::chrono::milliseconds poll{5000};
  bool repair = false; // `maintenance.repair: auto`
  bool retime = true;  // `maintenance.retime`: time the kernels that pass on each toolchain
  double speed_regression = 0.10; // `maintenance.speed_regression_percent` / 100
  double sample_timeout_s = 60;
  int64_t job_deadline_ms = 30 * 60 * 1000;
};

/// A toolchain: device kind and fingerprint.
using toolchain_id = std::pair<std::string, std::string>;

struct toolchain_work {
  revalidation_status status;
  std::map<std::string, std::string> running; // kernel hash -> job id
  std::map<std::string, std::string> timing;  // kernel hash -> benchmark job id
};

struct maintenance_state {
  maintenance_setup setup;
  std::map<toolchain_id, toolchain_work> toolchains;
  std::map<std::pair<std::string, std::string>, int>
      faults;                                             // (hash, fingerprint) -> harness faults
  std::set<std::pair<std::string, std::string>> repaired; // (hash, fingerprint) repairs started
  std::set<toolchain_id> metered;                         // toolchains with metric series
  std::map<std::pair<std::string, std::string>, int>
      timing_faults;                      // (hash, fingerprint) -> failed benchmarks
  std::set<std::string> regression_kinds; // device kinds with the gauges
  std::set<std::string> untimed_kinds;    // device kinds whose timer measures no kernel
  uint64_t regressions = 0;
  uint64_t speed_regressions = 0;
  std::vector<std::string> repair_campaigns;
  bool polling = false;
  uint64_t jobs_submitted = 0;

  static inline const char* name = "maintenance";
};

/// The counts of `status` for the current kernels of its device kind in `kernels` (the library's
/// `list` reply): owed (no verdict there since `requested_at_ms`), passed and failed (their
/// newest counting verdict). `running` is left as it is.
void count_revalidation(revalidation_status& status, const std::vector<kernel_version>& kernels);

/// Spawn with `system.spawn(maintenance, setup)`. It reads its stored requests, then polls.
maintenance_actor::behavior_type
maintenance(maintenance_actor::stateful_pointer<maintenance_state> self, maintenance_setup setup);

} // namespace opforge
