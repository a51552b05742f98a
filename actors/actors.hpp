#pragma once

// Every typed actor interface of the daemon, one line of comment per handler (the style of
// tenzir/vast). Implementations live in one .hpp/.cpp pair per actor beside this file.

#include "messages/type_ids.hpp"

#include <caf/typed_actor.hpp>

namespace opforge {

// -- persistence
// -----------------------------------------------------------------------------------

// -- devices
// ---------------------------------------------------------------------------------------

// -- control and metrics
// ---------------------------------------------------------------------------

// -- llm endpoints and summarizer
// ------------------------------------------------------------------

/// One configured OpenAI-compatible endpoint (or a replay server standing in for one).
using llm_endpoint_actor = caf::typed_actor<
    // Completes a chat; every accepted request gets exactly one reply, never a candidate failure.
    caf::replies_to<atom::complete, chat_request>::with<chat_result>,
    // Cancels the sender's request with this id: its reply becomes `cancelled`; else a no-op.
    caf::reacts_to<atom::cancel, uint64_t>,
    // Reports breaker state, queue, in-flight requests, retries and token totals.
    caf::replies_to<atom::status>::with<endpoint_status>,
    // Internal: the endpoint's HTTP thread finished one attempt.
    caf::reacts_to<atom::http_done, http_exchange>,
    // Internal: the backoff of the request with this ticket has passed.
    caf::reacts_to<atom::retry, uint64_t>,
    // Internal: a rate-limit window may have reopened.
    caf::reacts_to<atom::wakeup>>;

/// Condenses compiler logs for feedback prompts; falls back to the deterministic summary.
using summarizer_actor = caf::typed_actor<
    // Summarizes one log; never fails, the method says how the summary was made.
    caf::replies_to<atom::summarize, summary_request>::with<summary_result>>;

// -- sessions and campaigns
// ------------------------------------------------------------------------

} // namespace opforge
