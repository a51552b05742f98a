#pragma once

// The operator session as a pure state machine: `step(record, event)` gives the next record and
// the transitions it made, and `next_action(record)` what must happen next (ask the LLM, lint,
// test, finish). No I/O: the op_session actor persists the record with its transitions in one write
// and only then carries out the action. Because the action is a function of the record alone, a
// session restored from the store after a crash asks for exactly what it was waiting for, and
// never again for an answer or a verdict that was recorded.
//
//  PROMPT -> GENERATE -> PARSE -> LINT -> TEST -> SUCCESS
//    ^          |          |       |       |
//    |          v          v       v       v
//    +------ FEEDBACK <----+-------+-------+      budget spent -> FAILED
//
// PROMPT, PARSE and FEEDBACK take no time: a step passes through them and rests in GENERATE,
// LINT or TEST (waiting) or in SUCCESS or FAILED (done). With budgets.same_failure_limit, a
// dialog whose answers fail the same way that many times in a row opens the next one early, and a
// session whose dialogs all ended so fails "repeated failure"
// (actors/sessions/repeated_failure.hpp). Endpoint faults and harness faults repeat the waiting
// step with a growing delay and never count against the candidate.
//
// With budgets.optimize a pass goes to OPTIMIZE instead of SUCCESS: the proved version is timed
// against the baseline (a benchmark job). While the fastest proved version is below the target
// speedup and the stage has LLM calls left, an optimize prompt (its timings per shape class)
// opens the stage's dialog: PROMPT -> GENERATE, and the answer goes through PARSE, LINT and TEST
// like any other, failures fed back within the stage's calls. A new version that passes the full
// test is timed in OPTIMIZE in turn. The stage ends in SUCCESS with the fastest proved version
// (the first when none could be timed), whatever ends it: the target reached, its calls spent, a
// failed or slower version, an endpoint's refusal or a cancel. A proved kernel is never lost.
//
// The record and its transitions, as stored, are in persistence/records.hpp.

#include "actors/sessions/prompt_templates.hpp"
#include "persistence/records.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace opforge {

// -- events ---------------------------------------------------------------------------------------

struct llm_answered {
  std::string content;
  bool truncated = false; // the answer hit max_tokens
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
};
struct llm_context_exhausted {
  std::string detail;
};
struct llm_faulted {
  std::string detail;
  // The endpoint refused this request for good (chat_outcome::rejected): the session fails
  // rather than asking again forever.
  bool permanent = false;
};
struct endpoint_moved {
  std::string endpoint; // the endpoint asked from now on
  std::string model;    // what it serves
  std::string reason;   // why the campaign moved the session
};
struct lint_finished {
  contract::lint_result result;
};
struct test_finished {
  contract::test_result result;
  std::string toolchain{}; // the fingerprint of the toolchain it ran on
  std::string device_kind{};
  verdict_hosts hosts{}; // where it was confirmed, or contradicted an earlier pass
  std::map<std::string, std::string> toolchain_versions{}; // python, torch, triton, ...
};
struct benchmark_finished {
  contract::benchmark_result result;
  std::string fingerprint{}; // the toolchain it ran on
  std::string device_kind{};
  int64_t measured_at_ms = 0; // wall clock
};
struct harness_faulted {
  std::string detail; // the device job failed: never a verdict on the candidate
};
struct cancel_requested {
  std::string reason;
};
/// The campaign's token budget was spent before the next LLM call (campaign_spec.max_tokens).
struct tokens_spent {
  std::string detail;
};

using session_event = std::variant<llm_answered, llm_context_exhausted, llm_faulted, endpoint_moved,
                                   lint_finished, test_finished, benchmark_finished,
                                   harness_faulted, cancel_requested, tokens_spent>;

// -- actions --------------------------------------------------------------------------------------

struct ask_llm {
  std::vector<session_message> messages;
  std::chrono::milliseconds delay{0}; // back off before asking (after faults)
};
struct lint_candidate {
  std::string source;
  std::chrono::milliseconds delay{0};
};
struct test_candidate {
  std::string source;
  std::chrono::milliseconds delay{0};
};
/// Time the newest proved version (OPTIMIZE).
struct benchmark_candidate {
  std::string source;
  std::vector<std::string> dtypes; // the dtypes it passed
  std::chrono::milliseconds delay{0};
};
struct finish_session {
  bool success = false;
  std::string reason;
};

using session_action =
    std::variant<ask_llm, lint_candidate, test_candidate, benchmark_candidate, finish_session>;

/// What the session must do next, from the record alone. A record in PROMPT has not started:
/// call `start` first.
session_action next_action(const session_record& record);

// -- transitions ----------------------------------------------------------------------------------

struct step_result {
  session_record record;
  std::vector<session_transition> transitions; // empty: the event was ignored
};

/// What a session needs besides its record to build prompts.
struct session_context {
  const prompt_templates& templates;
  std::string examples; // the worked examples, ready to paste into a prompt
};

/// Opens the first dialog of a record in PROMPT.
step_result start(session_record record, const session_context& context);

/// Applies `event`. An event that does not belong to the record's state (a late reply for a step
/// already recorded) is ignored: the result has no transitions.
step_result step(session_record record, const session_event& event, const session_context& context);

/// The index in `record.versions` of the fastest proved version: among those timed, the one
/// that takes least time relative to the others where they share timed classes (else the higher
/// speedup over the baseline); the first version when none was timed. Nothing without versions.
std::optional<size_t> fastest_version(const session_record& record);

/// The delay before retrying a step after `consecutive_faults` faults: 0, 1 s, 2 s, 4 s ... 60 s.
std::chrono::milliseconds retry_delay(uint32_t consecutive_faults);

/// The token estimate used for the context window check: characters / 4.
uint64_t estimated_tokens(const std::vector<session_message>& messages);

} // namespace opforge
