#include "apps/campaign_events.hpp"

#include "apps/control_protocol.hpp"
#include "messages/contract.hpp"
#include "messages/llm_messages.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace opforge {

namespace {

using json = nlohmann::json;

std::string text(const json& from, const char* key) {
  return from.value(key, std::string{});
}

uint64_t number(const json& from, const char* key) {
  return from.value(key, uint64_t{0});
}

json copy(const json& from, std::initializer_list<const char*> keys) {
  json out = json::object();
  for (const auto* key : keys)
    if (from.contains(key))
      out[key] = from[key];
  return out;
}

json event(campaign_event kind, const json& campaign, json fields) {
  json out{{"event", to_string(kind)}, {"campaign", text(campaign, "campaign_id")}};
  out.update(fields);
  return out;
}

bool ended(const std::string& state) {
  return state != to_string(contract::campaign_state::resolving) &&
         state != to_string(contract::campaign_state::running);
}

std::string clock_text(double seconds) {
  auto s = static_cast<long>(std::max(seconds, 0.0));
  char out[32];
  std::snprintf(out, sizeof out, "%02ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return out;
}

std::string tokens_text(uint64_t tokens) {
  if (tokens < 10000)
    return std::to_string(tokens);
  char out[32];
  std::snprintf(out, sizeof out, "%.1fk", static_cast<double>(tokens) / 1000);
  return out;
}

double now_s() {
  return std::chrono::duration<double>{std::chrono::system_clock::now().time_since_epoch()}.count();
}

std::string joined(const json& items) {
  std::string out;
  for (const auto& item : items)
    out += (out.empty() ? "" : ", ") + item.get<std::string>();
  return out;
}

// One line: where the campaign stands, LLM use, elapsed time and a naive remaining estimate.
std::string progress_line(const json& p) {
  auto done = number(p, "succeeded") + number(p, "failed");
  auto ended_ms = p.value("ended_ms", int64_t{0});
  auto elapsed = (ended_ms > 0 ? static_cast<double>(ended_ms) / 1000 : now_s()) -
                 static_cast<double>(p.value("created_ms", int64_t{0})) / 1000;
  std::string line = "[" + clock_text(elapsed) + "] " + text(p, "state") + ": " +
                     std::to_string(done) + "/" + std::to_string(number(p, "operators")) +
                     " ended (" + std::to_string(number(p, "succeeded")) + " passed, " +
                     std::to_string(number(p, "failed")) + " failed), " +
                     std::to_string(number(p, "running")) + " running";
  std::string states;
  auto by_state = p.value("states", json::object());
  for (const auto& [state, n] : by_state.items())
    states += (states.empty() ? "" : " ") + state + " " + n.dump();
  if (!states.empty())
    line += " (" + states + ")";
  line += ", " + std::to_string(number(p, "waiting")) + " waiting | LLM " +
          std::to_string(number(p, "llm_calls")) + " calls, " +
          tokens_text(number(p, "prompt_tokens") + number(p, "completion_tokens")) + " tokens";
  if (done > 0 && done < number(p, "operators"))
    line += " | ~" +
            clock_text(elapsed / static_cast<double>(done) *
                       static_cast<double>(number(p, "operators") - done)) +
            " left";
  return line;
}

std::string resolved_text(const json& e) {
  auto operators = e.value("operator_ids", json::array());
  auto covered = e.value("covered", json::array());
  std::string out = "resolved: " + std::to_string(operators.size()) + " operators to run";
  if (!covered.empty())
    out += "; skipped " + std::to_string(covered.size()) +
           " already covered (an accepted kernel in the library): " + joined(covered);
  return out;
}

std::string endpoint_text(const json& e) {
  if (text(e, "state") == to_string(endpoint_state::up))
    return "endpoint " + text(e, "name") + " up again";
  auto since_ms = e.value("failing_since_ms", int64_t{0});
  return "endpoint " + text(e, "name") + " down: failing for " +
         clock_text(now_s() - static_cast<double>(since_ms) / 1000) + " (breaker " +
         text(e, "breaker") + "); last error: " + text(e, "last_error");
}

std::string device_text(const json& e) {
  auto kind = text(e, "device_kind");
  if (!e.value("waiting", false))
    return "a worker of kind " + kind + " connected; the campaign goes on";
  auto jobs = number(e, "unserved_jobs");
  return "no worker of kind " + kind + " is connected; the campaign waits for one (" +
         std::to_string(jobs) + (jobs == 1 ? " job" : " jobs") + " queued for it)";
}

std::string operator_text(const json& e) {
  return "  " + std::string{e.value("passed", false) ? "PASS" : "FAIL"} + "  " +
         text(e, "operator") + "  (" + std::to_string(number(e, "llm_calls")) + " LLM calls, " +
         std::to_string(number(e, "dialogs")) + " dialogs): " + text(e, "reason");
}

std::string finished_text(const json& e) {
  auto state = text(e, "state");
  std::string out = "campaign " + text(e, "campaign") + " " + state;
  if (!text(e, "error").empty())
    out += ": " + text(e, "error");
  if (state == to_string(contract::campaign_state::rejected))
    return out;
  out += "\n  " + std::to_string(number(e, "succeeded")) + " of " +
         std::to_string(number(e, "operators")) +
         " operators passed and are in the kernel library; " + std::to_string(number(e, "failed")) +
         " failed; " + std::to_string(number(e, "llm_calls")) + " LLM calls, " +
         tokens_text(number(e, "prompt_tokens") + number(e, "completion_tokens")) + " tokens, " +
         std::to_string(number(e, "faults")) + " faults retried";
  if (text(e, "endpoint") == demo_endpoint_name)
    out += "\n  (the demo endpoint replays hand-written answers, not a model: configure "
           "llm.endpoints or OPFORGE_LLM_URL for real runs)";
  return out;
}

std::string detached_text(const json& e) {
  auto id = text(e, "campaign");
  return "detached: campaign " + id + " goes on in the daemon; `opforge attach " + id +
         "` follows it again, `opforge cancel " + id + "` stops it";
}

// The fields of a session summary (`finished` or `active` of a campaign reply) an event carries.
json session_fields(const json& s) {
  auto out =
      copy(s, {"dialogs", "llm_calls", "faults", "prompt_tokens", "completion_tokens", "endpoint"});
  out["operator"] = s.value("operator", text(s, "op"));
  return out;
}

} // namespace

std::optional<campaign_event> event_kind(const json& event) {
  return from_string<campaign_event>(text(event, "event"));
}

json submitted_event(const json& campaign) {
  return event(campaign_event::submitted, campaign, copy(campaign, {"endpoint", "device_kind"}));
}

json detached_event(const std::string& campaign_id) {
  return {{"event", to_string(campaign_event::detached)}, {"campaign", campaign_id}};
}

std::vector<json> campaign_events(const json& c, campaign_watch& seen) {
  std::vector<json> events;
  auto state = text(c, "state");
  // A rejected campaign never had its operators resolved.
  bool resolved = state != to_string(contract::campaign_state::resolving) &&
                  state != to_string(contract::campaign_state::rejected);
  if (state == to_string(contract::campaign_state::resolving) && !seen.resolving) {
    seen.resolving = true;
    events.push_back(event(campaign_event::resolving, c, copy(c, {"endpoint", "device_kind"})));
  }
  if (resolved && !seen.resolved) {
    seen.resolved = true;
    events.push_back(event(campaign_event::resolved, c,
                           copy(c, {"endpoint", "device_kind", "operator_ids", "covered"})));
  }
  // A blip that heals before the endpoint is down says nothing; failing between down and up
  // again is still the same outage.
  for (const auto& e : c.value("endpoints", json::array())) {
    auto name = text(e, "name");
    auto now = text(e, "state");
    auto& was = seen.endpoints[name];
    auto down = to_string(endpoint_state::down);
    if ((now == down && was != down) || (now == to_string(endpoint_state::up) && was == down))
      events.push_back(
          event(campaign_event::endpoint, c,
                copy(e, {"name", "state", "breaker", "last_error", "failing_since_ms"})));
    if (now != to_string(endpoint_state::failing))
      was = now;
  }
  // Unknown (no `unserved_jobs`: the device manager did not answer) changes nothing.
  if (c.contains("unserved_jobs") && (number(c, "unserved_jobs") > 0) != seen.unserved) {
    seen.unserved = !seen.unserved;
    events.push_back(event(campaign_event::device, c,
                           {{"device_kind", text(c, "device_kind")},
                            {"waiting", seen.unserved},
                            {"unserved_jobs", number(c, "unserved_jobs")}}));
  }
  std::map<std::string, std::string> resting;
  for (const auto& s : c.value("active", json::array())) {
    auto id = text(s, "session_id");
    resting[id] = text(s, "state");
    auto was = seen.sessions.find(id);
    if (was == seen.sessions.end() || was->second != resting[id]) {
      auto fields = session_fields(s);
      fields["state"] = resting[id];
      events.push_back(event(campaign_event::session, c, std::move(fields)));
    }
  }
  seen.sessions = std::move(resting);
  auto finished = c.value("finished", json::array());
  for (; seen.finished < finished.size(); ++seen.finished) {
    const auto& s = finished[seen.finished];
    auto fields = session_fields(s);
    fields["state"] = text(s, "state");
    fields["passed"] = text(s, "state") == to_string(contract::session_state::success);
    fields["reason"] = text(s, "end_reason");
    fields["kernel_key"] = text(s, "kernel_key");
    events.push_back(event(campaign_event::operator_, c, std::move(fields)));
  }
  if (resolved) {
    auto progress = event(campaign_event::progress, c,
                          copy(c, {"state", "operators", "succeeded", "failed", "running",
                                   "waiting", "states", "llm_calls", "prompt_tokens",
                                   "completion_tokens", "faults", "created_ms", "ended_ms"}));
    if (progress != seen.progress) {
      seen.progress = progress;
      events.push_back(std::move(progress));
    }
  }
  if (ended(state))
    events.push_back(event(
        campaign_event::finished, c,
        copy(c, {"state", "error", "endpoint", "operators", "succeeded", "failed", "llm_calls",
                 "prompt_tokens", "completion_tokens", "faults", "created_ms", "ended_ms"})));
  return events;
}

void campaign_display::show(const json& e) {
  if (mode_ == mode::json_lines) {
    // A failure's reason may quote a log cut mid-character: replaced, not an exception.
    out_ << e.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    return;
  }
  auto kind = event_kind(e);
  if (!kind)
    return;
  switch (*kind) {
  case campaign_event::progress:
    progress_ = e;
    if (mode_ == mode::log) {
      out_ << progress_line(e) << std::endl;
      return;
    }
    line_open_ = true;
    redraw();
    return;
  case campaign_event::submitted:
    return line("campaign " + text(e, "campaign") + " submitted (endpoint " + text(e, "endpoint") +
                    ", device " + text(e, "device_kind") + ")",
                false);
  case campaign_event::resolving:
    return line("resolving: a worker is reading the catalog for the requested operators", false);
  case campaign_event::resolved:
    return line(resolved_text(e), false);
  case campaign_event::endpoint:
    return line(endpoint_text(e), false);
  case campaign_event::device:
    return line(device_text(e), false);
  case campaign_event::operator_:
    return line(operator_text(e), false);
  case campaign_event::finished:
    return line(finished_text(e), true);
  case campaign_event::detached:
    return line(detached_text(e), true);
  case campaign_event::session:
    // In the progress line's count of sessions by state.
    return;
  }
}

void campaign_display::redraw() {
  if (mode_ == mode::terminal && line_open_)
    out_ << "\r\033[K" << progress_line(progress_) << std::flush;
}

void campaign_display::close_line() {
  if (line_open_)
    out_ << std::endl;
  line_open_ = false;
}

void campaign_display::line(const std::string& text, bool keep_progress) {
  if (line_open_)
    out_ << (keep_progress ? "\n" : "\r\033[K");
  // Flushed: a log gets each line as it happens.
  out_ << text << std::endl;
  // The progress line comes back under it, unless the campaign is over.
  if (line_open_ && !keep_progress)
    out_ << "\r\033[K" << progress_line(progress_) << std::flush;
  else
    line_open_ = false;
}

std::string concurrency_warning(const json& llm, uint32_t concurrency,
                                const std::string& endpoints) {
  auto wanted =
      concurrency > 0 ? int64_t{concurrency} : llm.value("campaign_concurrency", int64_t{0});
  auto asked = endpoints.substr(0, endpoints.find(','));
  // Without a name `status` does not say which endpoint is the default: the warning holds only
  // when every endpoint allows fewer, and names the one that allows most.
  std::string name;
  int64_t allows = 0;
  for (const auto& e : llm.value("endpoints", json::array()))
    if ((asked.empty() || text(e, "name") == asked) &&
        e.value("concurrency", int64_t{0}) >= allows) {
      name = text(e, "name");
      allows = e.value("concurrency", int64_t{0});
    }
  if (name.empty() || allows <= 0 || allows >= wanted)
    return {};
  return "concurrency " + std::to_string(wanted) + " but endpoint " + name + " allows " +
         std::to_string(allows) + ": " + std::to_string(wanted - allows) +
         " of the campaign's sessions wait for it";
}

} // namespace opforge
