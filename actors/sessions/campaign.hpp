#pragma once

// campaign: one per submitted run. It starts an op_session per operator, at most `concurrency` at
// once, aggregates their outcomes, and checkpoints itself in the `campaigns` family. A campaign
// restored after a crash resumes every unfinished session from its stored record and starts the
// sessions that had not started.

#include "actors/sessions/op_session.hpp"
#include "actors/sessions/session_machine.hpp"
#include "messages/actors.hpp"
#include "messages/contract.hpp"
#include "messages/session_messages.hpp"
#include "persistence/store.hpp"

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

namespace opforge {

/// Which operators of the catalog a campaign covers.
struct operator_selection {
  std::vector<std::string> names;      // OpInfo names, every variant of each
  std::vector<std::string> categories; // catalog categories, e.g. "elementwise"
  bool all = false;
  /// Operator ids (`operator_id`) that already have an accepted kernel; they are left out, so
  /// re-running what failed makes coverage the union across runs.
  std::set<std::string> covered;
  /// Operators whose sessions start from a kernel (campaign_request.seeds): their names count as
  /// named, but of a name in `seeded_only` only the seeded variants are selected.
  std::vector<campaign_seed> seeds;
  std::set<std::string> seeded_only;
};

struct selected_operators {
  std::vector<operator_spec> operators;
  std::vector<std::string> skipped; // "<id>: <why>", e.g. none of the requested dtypes
  std::vector<std::string> covered; // the ids of those skipped as having an accepted kernel
};

/// Resolves `selection` against a catalog result payload (messages/PROTOCOL.md, `catalog`) and
/// the requested dtypes. A name that is not in the catalog (with the reason when it was excluded),
/// or an unknown category, is an errc::request_invalid error naming it.
caf::expected<selected_operators> select_operators(const contract::catalog_result& catalog,
                                                   const operator_selection& selection,
                                                   const std::vector<std::string>& dtypes);

/// A catalog docstring (`root` and its `nodes`, the referenced docstrings) as prompt text.
std::string render_docstring(const std::optional<contract::docstring>& docstring);

/// The wrapper name the harness expects by convention: dots become underscores, then `_wrapper`
/// (`nn.functional.relu` -> `nn_functional_relu_wrapper`).
std::string wrapper_name(std::string_view op);

/// The id of the session of `spec` in `campaign`: `<campaign>/<operator id>`.
std::string session_id(const campaign_spec& campaign, const operator_spec& spec);

/// A new session record for `spec` in `campaign` (state PROMPT).
session_record new_session(const campaign_spec& campaign, const operator_spec& spec);

/// A campaign stored as running, with the records of the sessions it had started, or as
/// resolving, with the request it resolves (and no sessions yet).
struct unfinished_campaign {
  campaign_spec spec;
  std::vector<session_record> sessions;
  std::optional<campaign_request> resolving{};
};

/// Every campaign the store holds as running or resolving. Reads `db` synchronously: call it at
/// startup, before the actors that write to it exist.
caf::expected<std::vector<unfinished_campaign>> load_unfinished_campaigns(store& db);

struct campaign_state {
  campaign_spec spec;
  session_services services;
  std::map<std::string, session_record> restored;  // by operator
  std::deque<size_t> waiting;                      // indices into spec.operators
  std::map<std::string, op_session_actor> running; // by session id
  std::map<std::string, session_summary> live;     // progress of the running sessions
  campaign_status status;                          // without the running sessions' progress
  uint64_t interrupted = 0; // sessions that stopped without an outcome (no checkpoint)
  caf::typed_response_promise<campaign_status> promise;
  bool started = false;
  std::map<std::string, endpoint_health> health; // of services.endpoints, as last polled

  ~campaign_state();

  static inline const char* name = "campaign";
};

/// Fills in what `status` says about `spec` itself: its id, endpoint, device kind, creation time,
/// and its operators and those it left out as covered.
void describe(campaign_status& status, const campaign_spec& spec);

/// Adds an ended session to `status`.
void count(campaign_status& status, session_summary summary);

/// The status of a campaign read from the store: `stored` and the records of its sessions.
campaign_status stored_status(const stored_campaign& stored,
                              const std::vector<session_record>& sessions);

/// The status of a campaign with the progress of its running sessions folded in.
campaign_status live_status(const campaign_state& state);

/// The endpoint a session asks, from `endpoints` (in failover order) and their last known
/// `health`: `current` while it is not down, else the first that is up, else the first that is
/// only failing; empty when every other one is down too.
std::string pick_endpoint(const std::vector<session_endpoint>& endpoints,
                          const std::map<std::string, endpoint_health>& health,
                          const std::string& current);

/// Spawn with `system.spawn(campaign, spec, services, restored)`: `restored` holds the records
/// already stored for this campaign (empty for a new one). A campaign that is stopped stops its
/// sessions where they stand (their records say where). With `services.endpoints` it polls their
/// health (its status carries it) and moves a session waiting in GENERATE on an endpoint that is
/// down to the next one that is not.
campaign_actor::behavior_type campaign(campaign_actor::stateful_pointer<campaign_state> self,
                                       campaign_spec spec, session_services services,
                                       std::vector<session_record> restored);

} // namespace opforge
