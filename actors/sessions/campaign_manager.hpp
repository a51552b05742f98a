#pragma once

// campaign_manager: the daemon's one owner of campaigns. It turns an `opforge run` request into a
// campaign (resolving operators against a device worker's catalog, leaving out operators that
// already have an accepted kernel, or for a campaign pinned to a toolchain fingerprint, a kernel
// that passed there), resumes the campaigns a previous daemon left running, answers
// progress queries for running and stored campaigns, and cancels. Campaigns are linked to it, so
// stopping it stops them where they stand; their checkpoints say where.

#include "actors/sessions/campaign.hpp"
#include "config/config.hpp"
#include "config/endpoint_config.hpp"
#include "messages/actors.hpp"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

namespace opforge {

/// One LLM endpoint as campaigns see it.
struct campaign_endpoint {
  llm_endpoint_actor actor;
  endpoint_config config;
  /// For an endpoint that replays a cassette: the operators it holds answers for (a request for
  /// another operator is refused). Empty for a live endpoint.
  std::set<std::string> replayed_operators;
};

/// What the manager is started with.
struct campaign_manager_setup {
  store_actor store;
  device_manager_actor devices;
  summarizer_actor summarizer;                                            // may be null
  library_actor library;                                                  // may be null
  size_t summarize_over_chars = summarizer_config{}.summarize_over_chars; // see session_services
  std::map<std::string, campaign_endpoint> endpoints;
  std::vector<std::string> endpoint_order; // as configured: `campaigns.failover` goes this way
  std::string default_endpoint;            // used when a request names none
  std::shared_ptr<const prompt_templates> templates;
  std::string examples;
  campaigns_config defaults; // device_kind resolved (never "auto")
  acceptance_config acceptance;
  std::shared_ptr<metrics> telemetry;
  /// Campaigns the store holds as running (`load_unfinished_campaigns`): resumed at once.
  std::vector<unfinished_campaign> unfinished;
};

/// A campaign the manager knows in this daemon's lifetime.
struct managed_campaign {
  campaign_status status; // as of the last event; the actor knows better while it runs
  campaign_actor actor;   // null unless it runs
};

struct campaign_manager_state {
  campaign_manager_setup setup;
  std::map<std::string, managed_campaign> campaigns; // by id

  ~campaign_manager_state();

  static inline const char* name = "campaign_manager";
};

/// Spawn with `system.spawn(campaign_manager, setup)`.
campaign_manager_actor::behavior_type
campaign_manager(campaign_manager_actor::stateful_pointer<campaign_manager_state> self,
                 campaign_manager_setup setup);

} // namespace opforge
