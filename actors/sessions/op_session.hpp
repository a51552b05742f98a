#pragma once

// op_session: one operator's generation loop as an actor. It owns a session_record and drives the
// pure state machine (actors/session_machine.hpp) over the store, an LLM endpoint and the device
// manager. Every step is checkpointed as ONE write batch (the record and the transitions it made)
// and only once the store has acknowledged it does the next request leave, so a session that is
// spawned again from its stored record after a crash asks for exactly what it was waiting for.

#include "actors/sessions/prompt_templates.hpp"
#include "actors/sessions/session_machine.hpp"
#include "config/endpoint_config.hpp"
#include "messages/actors.hpp"
#include "messages/metrics.hpp"
#include "messages/session_messages.hpp"
#include "messages/write_batch.hpp"
#include "persistence/keys.hpp"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

namespace opforge {

/// An LLM endpoint a campaign may move a session to.
struct session_endpoint {
  std::string name;
  std::string model;
  llm_endpoint_actor actor; // its campaign also asks it how it is
};

/// A campaign's token budget (campaign_spec.max_tokens), shared by its sessions: each adds the
/// tokens of every answer it receives, and none starts an LLM call once they reach the limit.
/// Sessions run on any scheduler thread, hence the atomic.
struct token_ledger {
  uint64_t limit = 0; // 0: unlimited
  std::atomic<uint64_t> used{0};

  bool spent() const { return limit > 0 && used.load() >= limit; }
  std::string describe() const {
    return std::to_string(used.load()) + " tokens used of the campaign's " + std::to_string(limit);
  }
};

/// What every session of a daemon shares.
struct session_services {
  checkpoint_actor store;
  chat_actor llm; // the endpoint the record names
  // The campaign's endpoints in failover order, the first being the campaign's own: it watches
  // their health and moves sessions between them (`atom::failover`). Empty: nobody watches.
  std::vector<session_endpoint> endpoints;
  job_runner_actor jobs;
  summarizer_actor summarizer; // may be invalid: long logs are then only cut
  // A log in a failure (log_fields, actors/feedback.hpp) longer than this is summarized first.
  size_t summarize_over_chars = summarizer_config{}.summarize_over_chars;
  std::shared_ptr<const prompt_templates> templates;
  std::string examples;                     // the worked examples, ready for the initial prompt
  std::string device_kind = "interpreter";  // where tests run; also the lint profile
  std::string fingerprint;                  // the toolchain tests must run on ("" = any)
  double sample_timeout_s = 60;             // per-sample limit in the candidate process
  int64_t job_deadline_ms = 30 * 60 * 1000; // wall-clock budget of one device job
  int64_t confirmations = 1;                // passing verdicts from distinct hosts a kernel needs
  // The campaign's sets beyond the generated ones, and its operator's file in each model set
  // (operator_spec.model_samples): set per session by its campaign.
  std::vector<std::string> extra_sets;
  std::map<std::string, std::string> model_samples;
  campaign_actor progress; // told where each session stands after each checkpoint; may be null
  library_actor library;   // told of the kernel a SUCCESS checkpoint stored; may be null
  std::shared_ptr<metrics> telemetry;   // sessions by state and outcome; may be null
  std::shared_ptr<token_ledger> tokens; // set per campaign by the campaign; may be null
};

/// The batch that checkpoints one step: the record under `session_key`, each transition under
/// `event_key`, and on SUCCESS the accepted kernel with its provenance and its first validation
/// (`accept_kernel`, actors/library/kernels.hpp). Synced when the session ends; a process crash
/// loses nothing either way, a power loss at most the steps since the last synced write of the
/// database.
write_batch checkpoint(const session_record& record,
                       const std::vector<session_transition>& transitions, int64_t now_ms);

/// The summary `run` replies with.
session_summary summarize(const session_record& record);

struct op_session_state {
  session_record record;
  session_services services;
  caf::typed_response_promise<session_summary> promise;
  bool running = false;                // `run` arrived
  bool writing = false;                // a checkpoint is in flight: no request is
  bool cancel_pending = false;         // cancel arrived while writing
  std::optional<uint64_t> llm_request; // the chat request in flight
  std::optional<std::string> job;      // the device job in flight

  static inline const char* name = "op_session";
};

/// Spawn with `system.spawn(op_session, record, services)`. `record` is a new one (state PROMPT)
/// or one restored from the store.
op_session_actor::behavior_type
op_session(op_session_actor::stateful_pointer<op_session_state> self, session_record record,
           session_services services);

} // namespace opforge
