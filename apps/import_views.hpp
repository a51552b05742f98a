#pragma once

// The control socket's `import` and `import_status` requests (messages/PROTOCOL.md, "Control
// socket"): what the importer is asked and answers, as control replies. They block on the
// importer for a bounded time: call them from the control thread, never from an actor.

#include "apps/control_protocol.hpp"
#include "messages/actors.hpp"
#include "messages/msgpack_codec.hpp"

#include <string>

#include <caf/actor_system.hpp>

#include <nlohmann/json.hpp>

namespace opforge {

/// At most this many files in one `import` request: each is a map of two entries, and a control
/// request's containers hold at most 1,024 (the CLI sends larger sets in parts).
inline constexpr size_t max_import_files_per_request = 200;

/// An import's status as the control socket says it, its verdicts with `with_verdicts`.
nlohmann::json import_json(const import_status& status, bool with_verdicts);

/// The reply to `import` (one part of a kernel set) or `import_status` (`type`): `ok: true` with
/// `import`, the import's status; to `imports`: `ok: true` with `imports`, every stored import's
/// status without its verdicts; or `ok: false` with a one-line error.
nlohmann::json import_reply(caf::actor_system& sys, const importer_actor& importer,
                            request_type type, const wire::map_reader& fields);

} // namespace opforge
