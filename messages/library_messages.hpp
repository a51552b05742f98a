#pragma once

// What the library actor answers about its kernels. The kernels themselves travel as the
// contract's `library_kernel` (messages/contract.yaml), the shape that also leaves the daemon.

#include "messages/contract.hpp"

#include <cstdint>
#include <string>

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

} // namespace opforge
