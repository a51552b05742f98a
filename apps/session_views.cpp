#include "apps/session_views.hpp"

#include "actors/sessions/op_session.hpp"
#include "actors/sessions/session_machine.hpp"
#include "actors/store/store.hpp"
#include "apps/actor_query.hpp"
#include "messages/errors.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <optional>
#include <vector>

namespace opforge {

namespace {

// The store serves requests in arrival order, behind the campaigns' checkpoints; the bound keeps
// the control thread answering (clients wait 5 s by default) when it is far behind.
constexpr auto store_read_bound = std::chrono::milliseconds{4000};

// The states a stored record can be in: PARSE and FEEDBACK are only passed through.
constexpr std::array resting_states{
    session_state::prompt,   session_state::generate, session_state::lint,  session_state::test,
    session_state::optimize, session_state::success,  session_state::failed};

nlohmann::json failure(const std::string& what) {
  return {{"ok", false}, {"error", what}};
}

std::string store_failure(const caf::error& err) {
  return "reading the store failed: " + render(err);
}

std::string corrupt_entry(family f, const std::string& key, const caf::error& err) {
  return std::string{to_string(f)} + " entry '" + printable(key) +
         "' is unreadable: " + render(err);
}

// At most `limit` entries of a scan, and whether the store holds more.
struct bounded_scan {
  std::vector<key_value> entries;
  bool truncated = false;
};

caf::expected<bounded_scan> scan(caf::actor_system& sys, const store_actor& store, family f,
                                 std::string prefix, uint64_t limit, std::string after = {}) {
  auto entries = ask<std::vector<key_value>>(sys, store_read_bound, store, atom::scan_v, f,
                                             std::move(prefix), std::move(after), limit + 1);
  if (!entries)
    return std::move(entries.error());
  bool truncated = entries->size() > limit;
  if (truncated)
    entries->pop_back();
  return bounded_scan{std::move(*entries), truncated};
}

caf::expected<std::optional<std::string>> get(caf::actor_system& sys, const store_actor& store,
                                              family f, std::string key) {
  auto stored = ask<stored_value>(sys, store_read_bound, store, atom::get_v, f, std::move(key));
  if (!stored)
    return std::move(stored.error());
  return std::move(stored->value);
}

std::optional<session_state> resting_state_named(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (auto state : resting_states)
    if (name == to_string(state))
      return state;
  return std::nullopt;
}

std::string resting_state_names() {
  std::string out;
  for (auto state : resting_states)
    out += (out.empty() ? "" : ", ") + std::string{to_string(state)};
  return out;
}

nlohmann::json summary(const session_record& r) {
  return {{"session_id", r.session_id},
          {"campaign_id", r.campaign_id},
          {"operator", operator_id(r.op, r.variant)},
          {"op", r.op},
          {"variant", r.variant},
          {"state", to_string(r.state)},
          {"dialog", r.dialog},
          {"total_calls", r.total_calls},
          {"faults", r.total_faults},
          {"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"last_outcome", r.history.empty() ? std::string{} : to_string(r.history.back().outcome)},
          {"end_reason", r.end_reason}};
}

nlohmann::json to_json(const session_transition& t) {
  return {{"revision", t.revision}, {"from", to_string(t.from)}, {"to", to_string(t.to)},
          {"detail", t.detail},     {"at_ms", t.at_ms},          {"content", t.content}};
}

// The stored record of `op` in the first of `campaigns` that has one.
caf::expected<std::optional<std::string>> first_session(caf::actor_system& sys,
                                                        const store_actor& store,
                                                        const std::vector<std::string>& campaigns,
                                                        const std::string& op) {
  for (const auto& campaign : campaigns) {
    auto stored = get(sys, store, family::sessions, session_key(campaign, op));
    if (!stored || *stored)
      return stored;
  }
  return std::nullopt;
}

// The operator ids `name/variant` with a session in the first of `campaigns` that has any: an
// OpInfo name with variants has no session of its own, and `show max` should point at `max/binary`.
caf::expected<std::vector<std::string>> variants_of(caf::actor_system& sys,
                                                    const store_actor& store,
                                                    const std::vector<std::string>& campaigns,
                                                    const std::string& name) {
  std::vector<std::string> ids;
  for (const auto& campaign : campaigns) {
    auto found =
        scan(sys, store, family::sessions, session_key(campaign, name + "/"), max_hinted_variants);
    if (!found)
      return std::move(found.error());
    for (const auto& entry : found->entries)
      ids.push_back(entry.key.substr(prefix_of(campaign).size()));
    if (!ids.empty())
      break;
  }
  return ids;
}

// The reply when none of `campaigns` (searched for `show`) has a session of `op`.
nlohmann::json no_session(caf::actor_system& sys, const store_actor& store,
                          const std::vector<std::string>& campaigns, const std::string& op,
                          const std::string& named_campaign) {
  auto variants = variants_of(sys, store, campaigns, op);
  if (!variants)
    return failure(store_failure(variants.error()));
  std::string hint;
  for (const auto& id : *variants)
    hint += (hint.empty() ? " (sessions exist for " : ", ") + id;
  return failure("no session for operator '" + op + "'" +
                 (named_campaign.empty() ? std::string{} : " in campaign " + named_campaign) +
                 (hint.empty() ? hint : hint + ")"));
}

} // namespace

nlohmann::json list_sessions(caf::actor_system& sys, const store_actor& store,
                             const session_filter& filter) {
  std::optional<session_state> wanted;
  if (!filter.state.empty()) {
    wanted = resting_state_named(filter.state);
    if (!wanted)
      return failure("unknown state '" + filter.state + "' (one of " + resting_state_names() + ")");
  }
  auto entries = scan(sys, store, family::sessions,
                      filter.campaign.empty() ? std::string{} : prefix_of(filter.campaign),
                      max_listed_sessions, filter.after);
  if (!entries)
    return failure(store_failure(entries.error()));
  auto sessions = nlohmann::json::array();
  for (const auto& entry : entries->entries) {
    auto record = decode_record(entry.value);
    if (!record)
      return failure(corrupt_entry(family::sessions, entry.key, record.error()));
    if (!wanted || record->state == *wanted)
      sessions.push_back(summary(*record));
  }
  nlohmann::json reply{
      {"ok", true}, {"sessions", std::move(sessions)}, {"truncated", entries->truncated}};
  if (entries->truncated)
    reply["next"] = entries->entries.back().key;
  return reply;
}

nlohmann::json show_session(caf::actor_system& sys, const store_actor& store, const std::string& op,
                            const std::string& campaign) {
  if (op.empty())
    return failure("show needs an operator id: an OpInfo name, or name/variant");
  // The campaigns to search, in order: the one named, or all of them from the newest (campaign
  // ids sort in the order they were created).
  std::vector<std::string> campaigns{campaign};
  if (campaign.empty()) {
    // The scan yields the oldest first, so every page is read before the newest is known.
    campaigns.clear();
    for (bool more = true; more;) {
      auto stored = scan(sys, store, family::campaigns, "", max_searched_campaigns,
                         campaigns.empty() ? std::string{} : campaigns.back());
      if (!stored)
        return failure(store_failure(stored.error()));
      for (auto& c : stored->entries)
        campaigns.push_back(std::move(c.key));
      more = stored->truncated;
    }
    std::reverse(campaigns.begin(), campaigns.end());
  }
  auto stored = first_session(sys, store, campaigns, op);
  if (!stored)
    return failure(store_failure(stored.error()));
  if (!*stored)
    return no_session(sys, store, campaigns, op, campaign);
  auto record = decode_record(**stored);
  if (!record)
    return failure("the session of operator '" + op + "' is unreadable: " + render(record.error()));
  auto entries = scan(sys, store, family::events, prefix_of(record->session_id), max_shown_events);
  if (!entries)
    return failure(store_failure(entries.error()));
  auto events = nlohmann::json::array();
  for (const auto& entry : entries->entries) {
    auto transition = decode_transition(entry.value);
    if (!transition)
      return failure(corrupt_entry(family::events, entry.key, transition.error()));
    events.push_back(to_json(*transition));
  }
  // Every field of the record, as this build stores it (also for a record an older build wrote).
  auto bytes = encode_record(*record);
  auto session = nlohmann::json::from_msgpack(bytes.begin(), bytes.end());
  session.erase("schema");
  return {{"ok", true},
          {"session", std::move(session)},
          {"events", std::move(events)},
          {"truncated", entries->truncated}};
}

} // namespace opforge
