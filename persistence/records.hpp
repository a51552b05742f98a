#pragma once

// The records opforge stores, with their codecs: sessions (`sessions`), their transitions
// (`events`) and campaigns (`campaigns`). The bytes are part of the on-disk schema: a record that
// an older build wrote must decode here, and a field added later decodes as its default.

#include "messages/contract.hpp"
#include "messages/session_messages.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <caf/expected.hpp>

namespace opforge {

/// The contract's session states; to_string gives "PROMPT", "GENERATE", ...
using contract::session_state;

struct session_budgets {
  uint32_t max_dialogs = 3;
  uint32_t max_calls_per_dialog = 15;
  uint64_t context_window_tokens = 0;   // the endpoint's window; 0: unknown, never checked
  uint64_t reply_reserve_tokens = 8192; // room kept for the answer when checking the window
  // The OPTIMIZE stage (campaigns.optimize): whether a passing session goes on to it, the speedup
  // over the baseline that ends it, and the LLM calls it may use beyond the dialogs' budget.
  bool optimize = false;
  double optimize_target_speedup = 1.0;
  uint32_t optimize_calls = 0;
  // A dialog whose answers fail the same way this many times in a row ends early, and a session
  // whose dialogs all did ends (actors/sessions/repeated_failure.hpp); 0: off, as in records
  // stored before it existed.
  uint32_t same_failure_limit = 0;
};

struct session_message {
  std::string role; // "user" or "assistant"
  std::string content;
};

/// One verdict on one answer, kept for reports and `opforge show`.
struct session_attempt {
  uint32_t dialog = 0;
  uint32_t call = 0; // within the dialog, 1-based
  contract::attempt_stage stage = contract::attempt_stage::format;
  contract::attempt_outcome outcome = contract::attempt_outcome::format_error;
  std::string detail; // one line
};

/// Which hosts a test verdict was seen on when acceptance asks for confirmations: a pass
/// confirmed on several hosts, or a failure on one after passes on others.
struct verdict_hosts {
  std::vector<std::string> confirmed_on; // a pass: every host it passed on
  std::vector<std::string> passed_on;    // a failure after passes: where it passed
  std::string failed_on;                 // and where it failed
};

/// The latest verdict on the session's candidate: none yet, the worker's lint result or its test
/// result. Stored as the result's map, with `confirmed_on` and `disagreement: {passed_on,
/// failed_on}` beside its keys when there are hosts to name; nil when there is none.
struct session_verdict {
  std::variant<std::monostate, contract::lint_result, contract::test_result> result;
  verdict_hosts hosts;

  const contract::test_result* test() const { return std::get_if<contract::test_result>(&result); }
};

/// A version of the session's kernel that passed the full test: the first, and each one the
/// OPTIMIZE stage asked for that passed too. Every one enters the library on SUCCESS.
struct proved_version {
  std::string source;
  contract::test_result verdict; // its passing test
  std::string toolchain;         // where it passed: fingerprint, device kind, versions
  std::string device_kind;
  std::map<std::string, std::string> toolchain_versions;
  uint32_t llm_calls = 0;   // the session's answers up to and with this one
  int64_t proved_at_ms = 0; // wall clock of the checkpoint that recorded it
  // Its benchmark: whether it came back, and then its timings per dtype and shape class
  // (class_timings, actors/library/kernels.hpp) with the geometric-mean speedup over the
  // baseline, or why it timed nothing (a timing check fired, outputs wrong after timing).
  bool benchmarked = false;
  std::vector<contract::kernel_timing> timings{};
  double speedup = 0;
  std::string timer{};        // benchmark_result.timer
  std::string timing_error{}; // "" when timed
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
  session_verdict verdict;
  std::string toolchain;   // the fingerprint of the toolchain the latest test ran on
  std::string device_kind; // and the kind of device
  std::map<std::string, std::string> toolchain_versions; // and its versions, as its worker said
  std::vector<std::string> aten_overloads;               // what the operator dispatches to
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  std::vector<session_attempt> history;
  std::string end_reason; // why it is SUCCESS or FAILED
  // The OPTIMIZE stage: the proved versions in the order they passed, whether the current dialog
  // is the stage's (its answers are optimized versions of the kept one), and its answers so far.
  std::vector<proved_version> versions;
  bool optimizing = false;
  uint32_t optimize_calls_used = 0;
};

/// The msgpack value stored for a record, and back. A record is only ever stored in a state where
/// a session rests (never PARSE or FEEDBACK), so one that is not is corrupt. Decoding errors are
/// errc::store_corrupt.
std::string encode_record(const session_record& record);
caf::expected<session_record> decode_record(std::string_view bytes);

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

/// One operator of a campaign, resolved from the catalog.
struct operator_spec {
  std::string op;
  std::string variant;
  std::string category;
  std::string docstring;                     // with the docstrings it references
  std::vector<std::string> dtypes;           // the requested dtypes the operator supports
  std::vector<std::string> aten_overloads{}; // from the catalog, for the library's kernels
  std::string seed_kernel{};   // a repair's starting point (session_record.seed_kernel)
  std::string seed_feedback{}; // why the seed failed: the first dialog's status
  // The campaign's model sets (`model:<name>`) -> this operator's file in each, as the daemon
  // holds it (base64; "" when the model never called it). Copied in when the campaign starts, so
  // that a resumed campaign tests on the set it started with.
  std::map<std::string, std::string> model_samples{};
};

/// What `opforge run` submits, resolved.
struct campaign_spec {
  std::string campaign_id;
  std::string endpoint;
  // The endpoints its sessions may fail over to, in order, when the one they ask is down.
  std::vector<std::string> failover;
  std::string model;                       // what the endpoint serves
  std::string device_kind = "interpreter"; // where its candidates are tested
  int64_t created_ms = 0;                  // wall clock
  session_budgets budgets;
  uint32_t concurrency = 8;
  std::vector<operator_spec> operators;
  // Operator ids the selection named but left out because they already had an accepted kernel.
  std::vector<std::string> covered;
  // Sample sets every test must pass beyond the defaults (campaign_request.sample_sets).
  std::vector<std::string> sample_sets{};
  // Test jobs run only on workers with this toolchain fingerprint ("" = any): a repair is proved
  // where its kernel regressed. Campaigns stored before it decode with "".
  std::string fingerprint{};
  // The LLM tokens (prompt and completion) its sessions may use in all; 0: unlimited. Once they
  // reach it no LLM call starts, and every session that would ask ends "token budget spent".
  uint64_t max_tokens = 0;
};

/// A campaign as the `campaigns` family holds it.
struct stored_campaign {
  campaign_spec spec;
  contract::campaign_state state = contract::campaign_state::running; // never interrupted
  std::string error;                                                  // why it was rejected
  int64_t ended_ms = 0;
  // A campaign is stored as soon as it is submitted, in state resolving, with the request it
  // resolves (its defaults filled in): a daemon that restarts resolves it again from here.
  campaign_request request{};
};

/// The `campaigns` value of a campaign, and back. Decoding errors are errc::store_corrupt.
std::string encode_campaign(const stored_campaign& campaign);
caf::expected<stored_campaign> decode_campaign(std::string_view bytes);

} // namespace opforge
