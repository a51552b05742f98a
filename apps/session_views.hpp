#pragma once

// The read-only views of sessions behind `opforge sessions` and `opforge show`: they read the
// store through its actor and build the control replies (messages/PROTOCOL.md, "Control socket").
// They block on the store: call them from a plain thread (the control thread), never from an actor.

#include "messages/actors.hpp"

#include <cstdint>
#include <string>

#include <caf/actor_system.hpp>

#include <nlohmann/json.hpp>

namespace opforge {

// The store answers a scan in one reply; these bounds keep a large store from producing a huge one.

/// At most this many session records are read for one `sessions` reply, a page; a reply that
/// stopped there says `truncated` and names the key to continue `after` in `next`.
inline constexpr uint64_t max_listed_sessions = 2000;

/// `show` reads the campaigns, to search them for the newest one that has the operator, in pages
/// of this many.
inline constexpr uint64_t max_searched_campaigns = 2000;

/// At most this many variants are named when `show` is given an OpInfo name that has only
/// sessions of its variants.
inline constexpr uint64_t max_hinted_variants = 8;

/// At most this many events are read for one `show` reply; a reply that stopped there says
/// `truncated`.
inline constexpr uint64_t max_shown_events = 10000;

/// Which sessions `sessions` lists.
struct session_filter {
  std::string campaign; // empty: every campaign
  std::string state;    // empty: every state; else a state name, e.g. "FAILED" (any case)
  std::string after;    // the `next` of the previous page; empty: from the first session
};

/// The `sessions` reply: `ok: true` with one summary per matching session in key order (campaign,
/// then operator) and `truncated`, with `next` when it is true; or `ok: false` with a one-line
/// error.
nlohmann::json list_sessions(caf::actor_system& sys, const store_actor& store,
                             const session_filter& filter);

/// The `show` reply for operator `op` (`name` or `name/variant`) in `campaign`, or without one in
/// the newest campaign that has it: `ok: true` with the stored record and every event of the
/// session; or `ok: false` with a one-line error.
nlohmann::json show_session(caf::actor_system& sys, const store_actor& store, const std::string& op,
                            const std::string& campaign);

} // namespace opforge
