#pragma once

// summarizer: condenses long compiler logs and tracebacks for the feedback prompt. A deterministic
// pass always runs first (ANSI codes, progress output and repeats out; the first error kept with
// its context); when the result is still longer than the threshold and the LLM step is on, the
// summarizer's own endpoint condenses it further with config/prompts/summary.md. Any failure of
// the LLM step falls back to the deterministic summary, so a summary is always delivered.

#include "config/endpoint_config.hpp"
#include "messages/actors.hpp"
#include "messages/llm_messages.hpp"
#include "messages/metrics.hpp"

#include <memory>
#include <string>
#include <string_view>

#include <caf/typed_event_based_actor.hpp>

namespace opforge {

struct condense_options {
  size_t max_chars = 6000;   // the result never exceeds this
  size_t context_lines = 12; // kept before the first error; twice as many after it
  size_t max_line_chars = 400;
};

/// The deterministic summary of a log: strips ANSI escapes and carriage-return progress output,
/// collapses repeated lines (equal up to numbers and addresses) and repeated blocks (the same
/// traceback once per sample), and, when the result is still longer than `max_chars`, keeps the
/// first error with its context and the end of the log, marking what was left out.
std::string condense_log(std::string_view log, const condense_options& options = {});

/// Fills the summary prompt: `{{operator}}` and `{{log}}` are replaced.
std::string render_summary_prompt(std::string_view prompt_template, std::string_view op,
                                  std::string_view log);

struct summarizer_state {
  static inline const char* name = "summarizer";
  summarizer_config cfg;
  std::string prompt_template;
  llm_endpoint_actor endpoint; // null unless the mode is llm
  std::shared_ptr<metrics> metrics_ptr;
  uint64_t next_request_id = 1;
};

/// Spawn with `system.spawn(summarizer, config, prompt_template, endpoint, metrics)`; `endpoint`
/// may be null when `config.mode` is not llm. `prompt_template` is the text of the prompt file
/// (read it with `read_prompt_file` while loading the configuration).
summarizer_actor::behavior_type
summarizer(summarizer_actor::stateful_pointer<summarizer_state> self, summarizer_config config,
           std::string prompt_template, llm_endpoint_actor endpoint,
           std::shared_ptr<metrics> metrics_ptr);

} // namespace opforge
