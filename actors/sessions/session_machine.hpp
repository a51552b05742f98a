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
// LINT or TEST (waiting) or in SUCCESS or FAILED (done). Endpoint faults and harness faults repeat
// the waiting step with a growing delay and never count against the candidate.

#include "actors/sessions/prompt_templates.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <caf/expected.hpp>

#include <nlohmann/json.hpp>

namespace opforge {

enum class session_state : uint8_t {
  prompt,
  generate,
  parse,
  lint,
  test,
  feedback,
  success,
  failed
};

/// "PROMPT", "GENERATE", ...
const char* to_string(session_state state);

struct session_budgets {
  uint32_t max_dialogs = 3;
  uint32_t max_calls_per_dialog = 15;
  uint64_t context_window_tokens = 0;   // the endpoint's window; 0: unknown, never checked
  uint64_t reply_reserve_tokens = 8192; // room kept for the answer when checking the window
};

/// JSON forms, for the records that embed budgets (sessions, campaigns).
void to_json(nlohmann::json& out, const session_budgets& budgets);
void from_json(const nlohmann::json& in, session_budgets& budgets);

struct session_message {
  std::string role; // "user" or "assistant"
  std::string content;
};

/// One verdict on one answer, kept for reports and `opforge show`.
struct session_attempt {
  uint32_t dialog = 0;
  uint32_t call = 0;   // within the dialog, 1-based
  std::string stage;   // "format", "lint" or "test"
  std::string outcome; // "format_error", "lint_violation", or the test outcome
  std::string detail;  // one line
};

/// Everything a session is, as stored under its key in the `sessions` family.
struct session_record {
  // What the session works on (set once, by the campaign).
  std::string session_id;
  std::string campaign_id;
  std::string op;
  std::string variant;
  std::string wrapper; // the wrapper's expected function name
  std::vector<std::string> dtypes;
  std::string docstring;   // the operator's docstring with the docstrings it references
  std::string seed_kernel; // a repair session's starting point; empty for a fresh one
  std::string endpoint;
  std::string model; // what the endpoint serves, for the kernel's provenance
  session_budgets budgets;
  // Where it is.
  session_state state = session_state::prompt;
  uint64_t revision = 0;           // transitions recorded so far
  uint32_t dialog = 0;             // 1-based index of the current dialog
  uint32_t calls_in_dialog = 0;    // answers received in the current dialog
  uint32_t total_calls = 0;        // answers received in all dialogs
  uint32_t consecutive_faults = 0; // endpoint or harness faults since the last progress
  uint32_t total_faults = 0;
  std::vector<session_message> messages; // the current dialog
  std::string proposal;                  // the latest parsed candidate's source
  std::string last_feedback;             // the latest feedback prompt, seeds a new dialog
  nlohmann::json verdict;                // the latest lint or test result payload
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  std::vector<session_attempt> history;
  std::string end_reason; // why it is SUCCESS or FAILED
};

/// The msgpack value stored for a record, and back. Decoding errors are errc::store_corrupt.
std::string encode_record(const session_record& record);
caf::expected<session_record> decode_record(std::string_view bytes);

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
};
struct lint_finished {
  nlohmann::json result; // the lint result payload
};
struct test_finished {
  nlohmann::json result; // the test result payload
};
struct harness_faulted {
  std::string detail; // the device job failed: never a verdict on the candidate
};
struct cancel_requested {
  std::string reason;
};

using session_event = std::variant<llm_answered, llm_context_exhausted, llm_faulted, lint_finished,
                                   test_finished, harness_faulted, cancel_requested>;

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
struct finish_session {
  bool success = false;
  std::string reason;
};

using session_action = std::variant<ask_llm, lint_candidate, test_candidate, finish_session>;

/// What the session must do next, from the record alone. A record in PROMPT has not started:
/// call `start` first.
session_action next_action(const session_record& record);

// -- transitions ----------------------------------------------------------------------------------

/// One transition, as appended to the session's event log.
struct session_transition {
  uint64_t revision = 0; // the record's revision after it
  session_state from = session_state::prompt;
  session_state to = session_state::prompt;
  std::string detail;
  int64_t at_ms = 0; // wall-clock time, stamped by the actor that records it
  // The full text that crossed the session's boundary on this transition, kept here because the
  // record holds only the current dialog: the prompt that opens a dialog (PROMPT -> GENERATE),
  // the model's answer (GENERATE -> PARSE), the feedback prompt (into FEEDBACK). Empty otherwise.
  std::string content;
};

/// The msgpack value stored for a transition, and back. Events written before `content` existed
/// decode with it empty. Decoding errors are errc::store_corrupt.
std::string encode_transition(const session_transition& transition);
caf::expected<session_transition> decode_transition(std::string_view bytes);

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

/// The delay before retrying a step after `consecutive_faults` faults: 0, 1 s, 2 s, 4 s ... 60 s.
std::chrono::milliseconds retry_delay(uint32_t consecutive_faults);

/// The token estimate used for the context window check: characters / 4.
uint64_t estimated_tokens(const std::vector<session_message>& messages);

} // namespace opforge
