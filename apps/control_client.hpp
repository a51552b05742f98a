#pragma once

// The CLI side of the control socket: one request, one reply, bounded in time, so that a daemon
// that is not running is reported at once instead of hanging the terminal.

#include <chrono>
#include <string>

#include <caf/expected.hpp>

#include <nlohmann/json.hpp>

namespace opforge {

/// Sends `request` (a map; `v` is added) to the daemon at `endpoint` and returns its reply. Fails
/// with errc::daemon_unreachable when nobody answers within `timeout`, and with
/// errc::request_invalid carrying the daemon's one-line error when the reply has `ok: false`.
caf::expected<nlohmann::json> control_request(const std::string& endpoint, nlohmann::json request,
                                              std::chrono::milliseconds timeout);

} // namespace opforge
