#pragma once

// What `opforge run` and `opforge attach` report while they follow a campaign: one stream of
// events, found by comparing successive `campaign` replies (messages/PROTOCOL.md), and two ways
// to show it: the text display for people, or JSON lines for scripts (`--json`). The README's
// "Campaigns" section documents the event kinds and their fields.

#include <cstddef>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace opforge {

/// What a follower has already reported of one campaign.
struct campaign_watch {
  bool resolving = false;                       // the `resolving` event went out
  bool resolved = false;                        // the `resolved` event went out
  size_t finished = 0;                          // `operator` events: entries of `finished`
  std::map<std::string, std::string> sessions;  // session id -> the state last reported
  std::map<std::string, std::string> endpoints; // endpoint -> up, failing or down
  nlohmann::json progress;                      // the last `progress` event
};

/// The `submitted` event of a campaign `run` has just submitted (the reply's `campaign`).
nlohmann::json submitted_event(const nlohmann::json& campaign);

/// The `detached` event: the follower stops, the campaign goes on in the daemon.
nlohmann::json detached_event(const std::string& campaign_id);

/// The events that `campaign` (a `campaign` reply's status) adds to what `seen` holds, in the
/// order they are shown: resolving; resolved (its operators, and those skipped as already
/// covered); endpoint down or up; session (a running session moved to another state); operator
/// (one ended, passed or failed, with why); progress (the counts changed); finished (the
/// campaign ended, with its counts). Updates `seen`.
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
