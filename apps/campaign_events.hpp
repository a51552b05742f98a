#pragma once

// What `opforge run` and `opforge attach` report while they follow a campaign: one stream of
// events, found by comparing successive `campaign` replies (messages/PROTOCOL.md), and two ways
// to show it: the text display for people, or JSON lines for scripts (`--json`). The README's
// "Campaigns" section documents the event kinds and their fields.

#include "messages/enum_names.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace opforge {

/// An event's kind, its `event` field: the word scripts reading `--json` match on. `operator` is a
/// C++ keyword, hence `operator_` (the wire says "operator").
enum class campaign_event : uint8_t {
  submitted,
  resolving,
  resolved,
  endpoint,
  device,
  session,
  operator_,
  progress,
  finished,
  detached,
};

template <>
struct contract::enum_traits<campaign_event> {
  static constexpr std::string_view label = "campaign_event";
  static constexpr std::array<std::string_view, 10> names{
      "submitted", "resolving", "resolved", "endpoint", "device",
      "session",   "operator",  "progress", "finished", "detached"};
  static_assert(names.size() - 1 == static_cast<size_t>(campaign_event::detached));
};

/// The kind of `event`, or nullopt when it has none this follower knows.
std::optional<campaign_event> event_kind(const nlohmann::json& event);

/// What a follower has already reported of one campaign.
struct campaign_watch {
  bool resolving = false;                       // the `resolving` event went out
  bool resolved = false;                        // the `resolved` event went out
  size_t finished = 0;                          // `operator` events: entries of `finished`
  std::map<std::string, std::string> sessions;  // session id -> the state last reported
  std::map<std::string, std::string> endpoints; // endpoint -> up, failing or down
  bool unserved = false;   // the `device` event that went out last said no worker serves it
  nlohmann::json progress; // the last `progress` event
};

/// The `submitted` event of a campaign `run` has just submitted (the reply's `campaign`).
nlohmann::json submitted_event(const nlohmann::json& campaign);

/// The `detached` event: the follower stops, the campaign goes on in the daemon.
nlohmann::json detached_event(const std::string& campaign_id);

/// "concurrency 64 but endpoint local-vllm allows 8: ..." when a campaign of `concurrency`
/// sessions (0: the daemon's campaigns.concurrency) would ask an endpoint that sends fewer
/// requests at once; "" otherwise. `llm` is the `llm` part of `status`; `endpoints` the run's
/// --endpoint (its first is the one asked while it is up; "" the default: warned of only when
/// every endpoint allows fewer).
std::string concurrency_warning(const nlohmann::json& llm, uint32_t concurrency,
                                const std::string& endpoints);

/// The events that `campaign` (a `campaign` reply's status) adds to what `seen` holds, in the
/// order they are shown: resolving; resolved (its operators, and those skipped as already
/// covered); endpoint down or up; device (its jobs wait for a worker of its device kind, none
/// being connected, or such a worker took them); session (a running session moved to another
/// state); operator (one ended, passed or failed, with why); progress (the counts changed);
/// finished (the campaign ended, with its counts). Updates `seen`.
std::vector<nlohmann::json> campaign_events(const nlohmann::json& campaign, campaign_watch& seen);

/// Shows events: as the text display (on a terminal the progress line is redrawn in place with
/// its clock; in a log, a line only when something changed), or as one JSON object per line,
/// flushed per line.
class campaign_display {
public:
  enum class mode { terminal, log, json_lines };

  campaign_display(std::ostream& out, mode how) : out_{out}, mode_{how} {}

  void show(const nlohmann::json& event);

  /// On a terminal, the last progress line again with its clock moved on; else nothing.
  void redraw();

  /// Ends a progress line drawn in place, so that what follows (an error) starts a line.
  void close_line();

private:
  void line(const std::string& text, bool keep_progress);

  std::ostream& out_;
  mode mode_;
  nlohmann::json progress_; // the progress event on screen, on a terminal
  bool line_open_ = false;  // a progress line is drawn without its newline
};

} // namespace opforge
