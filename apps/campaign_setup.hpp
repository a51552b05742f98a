#pragma once

// What `opforge serve` starts for campaigns: the LLM endpoints (from `llm.endpoints`, else
// OPFORGE_LLM_URL, else a replay server serving the bundled demo cassette of hand-written
// answers), the summarizer, the prompt templates and worked examples. Blocking (it starts replay
// server processes and reads files): call it while the daemon starts, never from an actor.

#include "actors/llm/replay_launcher.hpp"
#include "actors/sessions/campaign_manager.hpp"
#include "apps/control_protocol.hpp"
#include "config/config.hpp"
#include "messages/metrics.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

namespace opforge {

/// The endpoints a daemon serves campaigns with, before any actor exists.
struct endpoint_plan {
  std::vector<endpoint_config> endpoints;
  std::string default_endpoint;
  bool demo = false; // the only endpoint replays the demo cassette
};

/// Decides the endpoints: `llm.endpoints`; else OPFORGE_LLM_URL (with OPFORGE_LLM_MODEL, and the
/// API key in OPFORGE_LLM_API_KEY when set), named `env`; else the demo cassette. `env` looks up
/// environment variables. Errors are errc::config_invalid naming the variable.
caf::expected<endpoint_plan>
plan_endpoints(const config& cfg,
               const std::function<std::optional<std::string>(const std::string&)>& env);

/// The operators a cassette holds answers for. Errors name the file and line.
caf::expected<std::set<std::string>> cassette_operators(const std::string& path);

/// How an endpoint's concurrency compares with a campaign's (`campaigns.concurrency`): "concurrency
/// 8", and when the endpoint sends fewer requests at once than a campaign runs sessions, how many
/// of those sessions wait for it. `opforge check` and `opforge status` say it alike.
std::string concurrency_text(int64_t endpoint, int64_t campaigns);

/// What `opforge check` reports: the files `serve` reads at start (prompt templates, worked
/// examples, the summarizer's prompt when it uses one, the demo cassette when no LLM endpoint is
/// configured), each loaded as `serve` loads it, one line each, `<what>: <path>`, after
/// `config data: <resource_dir()>`; then one line per LLM endpoint `serve` would start (`llm
/// endpoint <name>: <model> at <url or cassette>, <concurrency_text>`). The first file that does
/// not load is the error. Blocking: it reads files.
caf::expected<std::vector<std::string>>
check_config_data(const config& cfg,
                  const std::function<std::optional<std::string>(const std::string&)>& env);

/// Everything campaigns need that lives as long as the daemon. Destroying it stops the replay
/// servers; stop the actors first (`stop`).
struct campaign_parts {
  std::vector<std::unique_ptr<replay_server>> replay_servers;
  std::vector<llm_endpoint_actor> endpoints;
  summarizer_actor summarizer;
  campaign_manager_setup setup; // store, devices and unfinished are left for the caller

  /// Stops the endpoint and summarizer actors.
  void stop();
};

/// Starts the planned endpoints (and the replay servers behind `kind: replay` ones, each serving by
/// answer index and logging hits to `<data_dir>/replay-<name>.jsonl`), the summarizer, and loads
/// the prompts and worked examples. `cfg.campaigns.device_kind` must be resolved.
caf::expected<campaign_parts> start_campaign_parts(caf::actor_system& sys, const config& cfg,
                                                   const endpoint_plan& plan,
                                                   std::shared_ptr<metrics> families);

} // namespace opforge
