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

/// What differs between two toolchains, key by key in key order ("triton 3.6.0 -> 3.5.1, ..."),
/// a component one side lacks shown as "none"; "" when they are equal.
std::string toolchain_change(const std::map<std::string, std::string>& before,
                             const std::map<std::string, std::string>& after);

/// Every regressed kernel of `kernels`, in their order. For each fingerprint only its newest
/// verdict counts, so a kernel that failed and then passed again there is no regression. A
/// regression stays listed after its repair (the kernel still fails there), with `served_by`.
std::vector<regression> find_regressions(const std::vector<kernel_version>& kernels);

/// The re-validation a new toolchain owes (the maintenance actor's pending work, derived from
/// the validations family alone so a restart neither repeats nor loses a verdict): the source
/// hashes of `kernels` accepted on `device_kind` that have no verdict yet on `fingerprint`, each
/// once, in the kernels' order. Verdicts made before `since_ms` (a re-validation asked by hand)
/// do not count.
std::vector<std::string> pending_validations(const std::vector<kernel_version>& kernels,
                                             const std::string& device_kind,
                                             const std::string& fingerprint, int64_t since_ms = 0);

} // namespace opforge
