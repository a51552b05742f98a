#pragma once

// What the library actor answers about its kernels. The kernels themselves travel as the
// contract's `library_kernel` (messages/contract.yaml), the shape that also leaves the daemon.

#include "messages/contract.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace opforge {

/// One kernel of an operator, as `opforge kernels` lists it: the kernel (its proofs newest
/// first), where it stands among the operator's versions, and whether it is current.
struct kernel_version {
  contract::library_kernel kernel{};
  uint32_t version = 0;      // 1 = the operator's first accepted kernel, by acceptance time
  std::string device_kind{}; // where it was accepted
  int64_t accepted_at_ms = 0;
  bool current = false; // the operator's newest accepted kernel on `device_kind`
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kernel_version& x) {
  return f(caf::meta::type_name("kernel_version"), x.kernel, x.version, x.device_kind,
           x.accepted_at_ms, x.current);
}

/// What re-validation owes one toolchain (a device kind and fingerprint) and has done there.
struct revalidation_status {
  std::string device_kind{};
  std::string fingerprint{};
  std::map<std::string, std::string> toolchain{}; // as its workers announced it
  bool live = false;                              // a connected worker has this fingerprint
  int64_t requested_at_ms = 0; // verdicts older than this do not count; 0: any verdict does
  uint64_t owed = 0;           // current kernels without a counting verdict there
  uint64_t running = 0;        // of those, jobs in flight
  uint64_t passed = 0;         // counting verdicts there
  uint64_t failed = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, revalidation_status& x) {
  return f(caf::meta::type_name("revalidation_status"), x.device_kind, x.fingerprint, x.toolchain,
           x.live, x.requested_at_ms, x.owed, x.running, x.passed, x.failed);
}

/// The maintenance actor's view: every toolchain it knows, and what it found.
struct maintenance_status {
  std::vector<revalidation_status> toolchains{};
  uint64_t regressions = 0; // that no other kernel of the operator serves (passes there)
  std::vector<std::string> repair_campaigns{}; // campaigns it started to repair regressions
  uint64_t speed_regressions = 0;              // that no faster kernel of the operator serves
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, maintenance_status& x) {
  return f(caf::meta::type_name("maintenance_status"), x.toolchains, x.regressions,
           x.repair_campaigns, x.speed_regressions);
}

} // namespace opforge
