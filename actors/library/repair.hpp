#pragma once

// Repair of regressions (issue 19): a regressed kernel becomes a debug-existing session seeded
// with its source and the failure on the new toolchain, its tests pinned to that toolchain's
// fingerprint, so the repair is proved where the old kernel fails. `opforge repair` and the
// maintenance actor (with `maintenance.repair: auto`) build their campaigns here.

#include "actors/library/regressions.hpp"
#include "messages/library_messages.hpp"
#include "messages/session_messages.hpp"

#include <vector>

namespace opforge {

/// The campaigns that repair `regressions` and `slower` (speed regressions no faster kernel
/// serves), one per regressed fingerprint, each seeding one session per regressed operator
/// variant with the kernel's source (from `kernels`, listed with sources) and, as first feedback,
/// its failure, or its times on both toolchains. Empty when there is nothing to repair. A speed
/// repair is proved like any repair; it counts as one only once it is timed faster there than
/// the regressed kernel (speed_regression::served_by), and until then `export` keeps serving the
/// faster regressed kernel.
std::vector<campaign_request> repair_campaigns(const std::vector<regression>& regressions,
                                               const std::vector<kernel_version>& kernels,
                                               const std::vector<speed_regression>& slower = {});

} // namespace opforge
