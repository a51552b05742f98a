#pragma once

#include "config/config.hpp"

#include <string>

#include <caf/error.hpp>

namespace opforge {

/// Runs the daemon in the foreground until SIGTERM, SIGINT or a `shutdown` control request, then
/// stops taking work, flushes and joins everything. Returns an error (errc::config_*, one line)
/// when it cannot start; nothing after a clean shutdown.
caf::error serve(config cfg, const std::string& version);

} // namespace opforge
