#pragma once

// What operator sessions and campaigns tell the rest of the daemon: the outcome of one session
// and the progress of a campaign.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace opforge {

/// The outcome of one operator session, as its op_session actor replies to `run`.
struct session_summary {
  std::string session_id{};
  std::string op{};
  std::string state{}; // "SUCCESS" or "FAILED"
  std::string end_reason{};
  uint32_t dialogs = 0;
  uint32_t llm_calls = 0;
  uint32_t faults = 0; // endpoint and harness faults retried, never counted against the candidate
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  std::string kernel_key{}; // the accepted kernel's key in the `kernels` family, on SUCCESS
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_summary& x) {
  return f(caf::meta::type_name("session_summary"), x.session_id, x.op, x.state, x.end_reason,
           x.dialogs, x.llm_calls, x.faults, x.prompt_tokens, x.completion_tokens, x.kernel_key);
}

/// A campaign at a glance.
struct campaign_status {
  std::string campaign_id{};
  std::string state{}; // "running", "done" or "cancelled"
  uint64_t operators = 0;
  uint64_t waiting = 0; // not started yet
  uint64_t running = 0;
  uint64_t succeeded = 0;
  uint64_t failed = 0;
  uint64_t llm_calls = 0;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  std::vector<session_summary> finished{}; // in the order they finished
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, campaign_status& x) {
  return f(caf::meta::type_name("campaign_status"), x.campaign_id, x.state, x.operators, x.waiting,
           x.running, x.succeeded, x.failed, x.llm_calls, x.prompt_tokens, x.completion_tokens,
           x.finished);
}

} // namespace opforge
