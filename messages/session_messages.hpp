#pragma once

// What operator sessions and campaigns tell the rest of the daemon: the outcome of one session
// and the progress of a campaign.

#include "messages/contract.hpp"
#include "messages/llm_messages.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace opforge {

/// The outcome of one operator session, as its op_session actor replies to `run`; while it runs,
/// the same fields report its progress to its campaign (`state` is then the current state).
struct session_summary {
  std::string session_id{};
  std::string op{};
  contract::session_state state{}; // SUCCESS or FAILED
  std::string end_reason{};
  uint32_t dialogs = 0;
  uint32_t llm_calls = 0;
  uint32_t faults = 0; // endpoint and harness faults retried, never counted against the candidate
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  std::string kernel_key{}; // the accepted kernel's key in the `kernels` family, on SUCCESS
  std::string endpoint{};   // the LLM endpoint it asks (it may have failed over since it began)
  std::string variant{};    // the OpInfo variant of `op`, "" for none
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_summary& x) {
  return f(caf::meta::type_name("session_summary"), x.session_id, x.op, x.state, x.end_reason,
           x.dialogs, x.llm_calls, x.faults, x.prompt_tokens, x.completion_tokens, x.kernel_key,
           x.endpoint, x.variant);
}

/// A campaign at a glance.
struct campaign_status {
  std::string campaign_id{};
  contract::campaign_state state{};
  std::string error{}; // why it was rejected, or that it spent its token budget
  std::string endpoint{};
  std::string device_kind{};
  int64_t created_ms = 0; // wall clock
  int64_t ended_ms = 0;   // 0 while it runs
  uint64_t operators = 0;
  uint64_t waiting = 0; // not started yet
  uint64_t running = 0;
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  std::map<std::string, uint64_t> states{}; // running sessions by state (GENERATE, LINT, TEST)
  uint64_t llm_calls = 0;                   // of every session, running ones included
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  uint64_t faults = 0;
  std::vector<session_summary> finished{}; // in the order they finished
  // The health of the endpoints the campaign may use, in failover order; empty unless it runs.
  std::vector<endpoint_health> endpoints{};
  std::vector<std::string> operator_ids{}; // the operators it runs (`operator_id`), in order
  std::vector<std::string> covered{}; // operators selected but left out: they already had a kernel
  std::vector<session_summary> active{}; // the running sessions' progress, by session id
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, campaign_status& x) {
  return f(caf::meta::type_name("campaign_status"), x.campaign_id, x.state, x.error, x.endpoint,
           x.device_kind, x.created_ms, x.ended_ms, x.operators, x.waiting, x.running, x.succeeded,
           x.failed, x.states, x.llm_calls, x.prompt_tokens, x.completion_tokens, x.faults,
           x.finished, x.endpoints, x.operator_ids, x.covered, x.active);
}

/// A kernel to start an operator's session from (a debug-existing dialog): a failing kernel
/// that `opforge import --repair` hands on, and why it failed, its first feedback.
struct campaign_seed {
  std::string op{};
  std::string variant{};
  std::string kernel{};
  std::string feedback{};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, campaign_seed& x) {
  return f(caf::meta::type_name("campaign_seed"), x.op, x.variant, x.kernel, x.feedback);
}

/// What `opforge run` asks for. Empty or zero fields take the daemon's `campaigns:` defaults.
struct campaign_request {
  std::vector<std::string> names{};      // OpInfo names
  std::vector<std::string> categories{}; // catalog categories
  bool all = false;                      // every operator of the catalog
  bool failed = false;                   // the operators whose sessions failed in earlier campaigns
  std::vector<std::string> dtypes{};
  // An endpoint by name, or several separated by commas: the campaign fails over from one to the
  // next in this order when one is down.
  std::string endpoint{};
  std::string device_kind{};
  uint32_t concurrency = 0;
  uint32_t max_dialogs = 0;
  uint32_t max_calls_per_dialog = 0;
  uint64_t max_tokens = 0; // the campaign's LLM tokens in all (campaign_spec.max_tokens)
  /// Seeded operators: each is in the campaign, its session starting from its seed; with seeds,
  /// the other variants of a seeded operator's name are not, unless selected otherwise.
  std::vector<campaign_seed> seeds{};
  /// Test jobs run only on workers with this toolchain fingerprint ("" = any): a repair must pass
  /// where its kernel regressed.
  std::string fingerprint{};
  /// Sample sets every test must also pass, beyond the defaults (e.g. `model:gpt2`, a model's
  /// captured inputs).
  std::vector<std::string> sample_sets{};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, campaign_request& x) {
  return f(caf::meta::type_name("campaign_request"), x.names, x.categories, x.all, x.failed,
           x.dtypes, x.endpoint, x.device_kind, x.concurrency, x.max_dialogs,
           x.max_calls_per_dialog, x.max_tokens, x.seeds, x.fingerprint, x.sample_sets);
}

} // namespace opforge
