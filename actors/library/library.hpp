#pragma once

// The library actor: the one owner of the `kernels` and `validations` families apart from the
// sessions' checkpoints, which store an accepted kernel in the same batch as their SUCCESS (the
// write ops of actors/library/kernels.hpp) and then tell the library. Everything goes through the
// store actor by request, so no scheduler thread ever waits on RocksDB.
//
// "Current" is defined per device kind and, optionally, per toolchain fingerprint: for a
// fingerprint, the newest kernel of the operator variant with a passing validation there (so an
// older kernel stays current where a newer one fails); without one, the newest accepted kernel.

#include "actors/library/kernels.hpp"
#include "messages/actors.hpp"
#include "messages/library_messages.hpp"
#include "messages/metrics.hpp"

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

namespace opforge {

/// One stored kernel with every validation of its source.
struct stored_kernel {
  kernel_record record;
  std::vector<contract::toolchain_proof> proofs; // newest first
};

/// The operator's kernels as `list` replies: oldest version first, each numbered, the newest of
/// each device kind marked current. Sources are kept only when `with_sources`.
std::vector<kernel_version> versions(std::vector<stored_kernel> kernels, bool with_sources);

/// The kernels a bundle for `device_kind` and `fingerprint` ("" = none) takes from `kernels` (any
/// number of operators): one per operator variant, in operator id order. With a fingerprint, of
/// the versions that pass there the fastest by `relative_time` on their timings there (a timed
/// version before an untimed one, the newer where they cannot be compared), each with its
/// timings there; without one, the newest accepted on the device kind, with its timings of the
/// device kind.
std::vector<contract::library_kernel> choose(const std::vector<stored_kernel>& kernels,
                                             const std::string& device_kind,
                                             const std::string& fingerprint);

/// A `timed` request waiting its turn: timings are merged into the stored kernel record, a read
/// and a write, so the library applies them one at a time and none is lost to another's write.
struct timing_update {
  std::string key; // the kernel's `kernel_key`
  std::vector<contract::kernel_timing> timings;
  caf::typed_response_promise<atom::ok> promise;
};

struct library_state {
  // Not an aggregate: CAF would try to construct it from the actor's pointer.
  library_state() = default;

  store_actor store;
  std::shared_ptr<metrics> telemetry; // may be null
  std::string daemon_version;
  std::map<std::string, std::string> counted; // kernel key -> device kind, for the gauge
  std::deque<timing_update> timing_updates;   // the first one is being applied

  static inline const char* name = "library";
};

/// Spawn with `system.spawn(library, store, telemetry, version)`. It counts the stored kernels
/// for opforge_library_kernels at start.
library_actor::behavior_type library(library_actor::stateful_pointer<library_state> self,
                                     store_actor store, std::shared_ptr<metrics> telemetry,
                                     std::string daemon_version);

} // namespace opforge
