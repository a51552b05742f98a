#pragma once

// The CLI side of the control socket: one request, one reply, bounded in time, so that a daemon
// that is not running is reported at once instead of hanging the terminal.

#include "apps/control_protocol.hpp"

#include <chrono>
#include <cstddef>
#include <string>

#include <caf/expected.hpp>

#include <nlohmann/json.hpp>

namespace opforge {

/// The largest control request: a handful of keys, or a run that imports a model set (at most
/// model_set_max_bytes, persistence/model_sets.hpp). The daemon's socket drops a larger
/// message before reading it whole (ZMQ_MAXMSGSIZE), and the client refuses to send one.
inline constexpr size_t control_max_request_bytes = size_t{32} << 20;

/// Sends a request of `type` to the daemon at `endpoint`, its other fields in `request` (a map, or
/// null for none; `type` and `v` are added), and returns its reply. Fails with
/// errc::daemon_unreachable when nobody answers within `timeout`, and with errc::request_invalid
/// carrying the daemon's one-line error when the reply has `ok: false`, or when the request is over
/// control_max_request_bytes. A socket the user may not connect to is errc::permission_denied, not
/// "no daemon answers".
caf::expected<nlohmann::json> control_request(const std::string& endpoint, request_type type,
                                              nlohmann::json request,
                                              std::chrono::milliseconds timeout);

} // namespace opforge
