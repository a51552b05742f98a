#pragma once

// Regressions of the library and the re-validation a new toolchain owes (issue 19). A regression
// is a kernel that passed on one toolchain fingerprint and whose newest verdict on a later
// fingerprint of the same device kind is a failure. Pure functions over the library's `list`
// reply, so `opforge regressions` and the maintenance actor agree.

#include "messages/library_messages.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace opforge {

struct regression {
  std::string op;
  std::string variant;
  std::string hash;                 // the regressed kernel's source hash
  std::string change;               // the toolchain change in words: "triton 3.6.0 -> 3.5.1"
  contract::toolchain_proof before; // the newest pass on another fingerprint
  contract::toolchain_proof after;  // the failing verdict
  // Another kernel of the operator variant whose newest verdict on the failing fingerprint is a
  // pass (a repair, or an older version that still passes there), so the library still serves
  // the operator on that toolchain; "" while none does.
  std::string served_by;
};

/// One dtype and shape class where a kernel got slower: its timings on the two toolchains.
struct slowdown {
  contract::kernel_timing before;
  contract::kernel_timing after;
  double ratio = 0; // after.kernel_us / before.kernel_us
};

/// A kernel that passes on a later toolchain of its device kind but runs slower there than on the
/// previous one it was timed on: `slower` holds every dtype and shape class, not launch-bound,
/// where its time there exceeds the previous by more than the threshold beyond the noise of both
/// (its lower end above their upper end times 1 + threshold), slowest first.
struct speed_regression {
  std::string op;
  std::string variant;
  std::string hash;
  std::string change;               // the toolchain change in words, as for a regression
  contract::toolchain_proof before; // the newest pass on the previous toolchain
  contract::toolchain_proof after;  // the newest pass on the slower one
  std::vector<slowdown> slower;
  // Another kernel of the operator variant that passes on the slower toolchain and is timed
  // faster there than this one (a repair, or another version), so what the library serves there
  // lost no speed; "" while none is.
  std::string served_by;
};

/// What differs between two toolchains, key by key in key order ("triton 3.6.0 -> 3.5.1, ..."),
/// a component one side lacks shown as "none"; "" when they are equal.
std::string toolchain_change(const std::map<std::string, std::string>& before,
                             const std::map<std::string, std::string>& after);

/// Every regressed kernel of `kernels`, in their order. For each fingerprint only its newest
/// verdict counts, so a kernel that failed and then passed again there is no regression. A
/// regression stays listed after its repair (the kernel still fails there), with `served_by`.
std::vector<regression> find_regressions(const std::vector<kernel_version>& kernels);

/// Every speed regression of `kernels` (listed with their timings), in their order, with
/// `threshold` the relative slowdown that counts (0.10: more than 10% slower beyond the noise).
std::vector<speed_regression> find_speed_regressions(const std::vector<kernel_version>& kernels,
                                                     double threshold);

/// The re-validation a new toolchain owes (the maintenance actor's pending work, derived from
/// the validations family alone so a restart neither repeats nor loses a verdict): the source
/// hashes of `kernels` accepted on `device_kind` that have no verdict yet on `fingerprint`, each
/// once, in the kernels' order. Verdicts made before `since_ms` (a re-validation asked by hand)
/// do not count.
std::vector<std::string> pending_validations(const std::vector<kernel_version>& kernels,
                                             const std::string& device_kind,
                                             const std::string& fingerprint, int64_t since_ms = 0);

/// The timing a new toolchain owes, derived from the store as the re-validation is: the source
/// hashes of `kernels` accepted on `device_kind` whose newest verdict on `fingerprint` is a pass
/// and that have no timing there measured since `since_ms`, each once, in the kernels' order.
std::vector<std::string> pending_timings(const std::vector<kernel_version>& kernels,
                                         const std::string& device_kind,
                                         const std::string& fingerprint, int64_t since_ms = 0);

} // namespace opforge
