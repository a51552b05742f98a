// The opforge binary: `serve` runs the daemon; every other subcommand talks to a running daemon
// over the control socket. Exit codes: 0 success, 1 the daemon is unreachable or refused the
// request, 2 bad configuration or usage, or the daemon could not start.

#include "apps/campaign_events.hpp"
#include "apps/campaign_setup.hpp"
#include "apps/cli_common.hpp"
#include "apps/control_client.hpp"
#include "apps/import_command.hpp"
#include "apps/library_commands.hpp"
#include "apps/repair_command.hpp"
#include "apps/serve.hpp"
#include "apps/worker_keys.hpp"
#include "config/config.hpp"
#include "messages/contract.hpp"
#include "messages/device_kind.hpp"
#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "persistence/model_sets.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <unistd.h>

using namespace opforge;
using namespace opforge::cli;

namespace {

// Options every subcommand takes to find the configuration, and with it the control socket.
struct common_options {
  std::string config_file;
  std::string data_dir;
  std::string control;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--config", config_file, "YAML configuration file")->envname("OPFORGE_CONFIG");
    cmd.add_option("--data-dir", data_dir, "data directory (default var)");
    cmd.add_option("--control", control, "control socket (default ipc://<data-dir>/control.sock)");
  }
};

// Only the flags the user gave: an absent flag must not hide the environment or the file.
void add_flag(config_sources& sources, CLI::App& cmd, const char* flag, const char* key,
              const std::string& value) {
  if (auto* option = cmd.get_option_no_throw(flag); option && option->count() > 0)
    sources.flags[key] = {value, flag};
}

std::string format_duration(double seconds) {
  auto s = static_cast<long>(seconds);
  if (s < 60)
    return std::to_string(s) + "s";
  if (s < 3600)
    return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h" + std::to_string(s % 3600 / 60) + "m";
}

// An actor's part of the status reply: its report, or why it did not give one.
void print_part(const char* label, const nlohmann::json& part,
                void (*print)(const nlohmann::json&)) {
  std::cout << "  " << label;
  if (part.contains("error"))
    std::cout << "not answering: " << part["error"].get<std::string>();
  else
    print(part);
  std::cout << '\n';
}

void print_workers_part(const nlohmann::json& part) {
  int64_t live = 0;
  std::string by_kind;
  auto connected = part.value("connected", nlohmann::json::object());
  for (auto& [kind, states] : connected.items())
    for (auto& [state, count] : states.items()) {
      if (state != to_string(contract::worker_state::dead))
        live += count.get<int64_t>();
      by_kind += (by_kind.empty() ? "" : ", ") + kind + " " + state + " " + count.dump();
    }
  std::cout << part.value("endpoint", std::string{}) << ", " << live << " live";
  if (!by_kind.empty())
    std::cout << " (" << by_kind << ")";
  std::cout << "; jobs: " << part.value("queued", 0) << " queued, " << part.value("running", 0)
            << " running, " << part.value("done", 0) << " done, " << part.value("failed", 0)
            << " failed, " << part.value("requeued", 0) << " requeued, " << part.value("lost", 0)
            << " lost";
  // Queued jobs of a kind no live worker serves wait until one connects: said plainly, since
  // nothing else moves.
  auto unserved = part.value("unserved", nlohmann::json::object());
  for (auto& [kind, count] : unserved.items())
    std::cout << "; no " << (kind.empty() ? "device worker" : "worker of kind " + kind)
              << " is connected: " << count.get<int64_t>()
              << (count.get<int64_t>() == 1 ? " job waits" : " jobs wait") << " for one";
}

// One line per LLM endpoint: its health, breaker, concurrency (and how far below the campaigns'
// it is), load, and last error.
void print_llm_part(const nlohmann::json& part) {
  auto endpoints = part.value("endpoints", nlohmann::json::array());
  if (endpoints.empty())
    std::cout << "no endpoints";
  auto campaigns = part.value("campaign_concurrency", int64_t{0});
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const auto& e = endpoints[i];
    auto text = [&](const char* key) { return e.value(key, std::string{}); };
    std::cout << (i ? "\n            " : "") << text("name") << ": ";
    if (e.contains("error")) {
      std::cout << "not answering: " << text("error");
      continue;
    }
    std::cout << text("state") << ", breaker " << text("breaker") << ", "
              << concurrency_text(e.value("concurrency", int64_t{0}), campaigns) << ", "
              << e.value("in_flight", 0) << " in flight, " << e.value("queued", 0) << " queued";
    if (!text("last_error").empty())
      std::cout << "; last error: " << text("last_error");
  }
}

void print_store_part(const nlohmann::json& part) {
  uint64_t keys = 0;
  for (auto& family : part.value("families", nlohmann::json::object()))
    keys += family.value("estimated_keys", uint64_t{0});
  std::cout << part.value("path", std::string{}) << ", schema v" << part.value("schema_version", 0)
            << ", ~" << keys << " keys, " << part.value("batches_written", 0)
            << " batches written since start";
  if (auto failure = part.value("write_failure", std::string{}); !failure.empty())
    std::cout << "; WRITES PAUSED (" << part.value("paused_writes", 0)
              << " waiting, sessions that need to write wait too; retried until they work): "
              << failure;
  else if (auto last = part.value("last_error", std::string{}); !last.empty())
    std::cout << ", last error: " << last;
}

// Re-validation per toolchain: "interpreter 0123abcd live: 3 owed (1 running), 40 passed, 2
// failed", then the regressions.
void print_maintenance_part(const nlohmann::json& part) {
  auto toolchains = part.value("toolchains", nlohmann::json::array());
  if (toolchains.empty())
    std::cout << "no toolchains seen yet";
  for (size_t i = 0; i < toolchains.size(); ++i) {
    const auto& t = toolchains[i];
    std::cout << (i ? "; " : "") << t.value("device_kind", std::string{}) << " "
              << t.value("fingerprint", std::string{}) << (t.value("live", false) ? " live" : "")
              << ": " << t.value("owed", 0) << " owed (" << t.value("running", 0) << " running), "
              << t.value("passed", 0) << " passed, " << t.value("failed", 0) << " failed";
  }
  std::cout << "; " << part.value("regressions", 0) << " regressions, "
            << part.value("speed_regressions", 0) << " speed regressions";
  std::string repairs;
  for (const auto& id : part.value("repair_campaigns", nlohmann::json::array()))
    repairs += (repairs.empty() ? "" : ", ") + id.get<std::string>();
  if (!repairs.empty())
    std::cout << ", repaired by campaign(s) " << repairs;
}

// Per device kind and fingerprint its conformance, then a line per defect.
void print_toolchains_part(const nlohmann::json& part) {
  if (!part.is_array()) {
    std::cout << "not answering: " << part.value("error", std::string{});
    return;
  }
  if (part.empty())
    std::cout << "no conformance report from any worker yet";
  for (const auto& t : part) {
    std::cout << "\n    " << t.value("device_kind", std::string{}) << " "
              << t.value("fingerprint", std::string{}) << ": " << t.value("summary", std::string{});
    for (const auto& d : t.value("defects", nlohmann::json::array()))
      std::cout << "\n      " << d.value("description", std::string{});
  }
}

void print_status(const nlohmann::json& reply) {
  auto text = [&](const char* key) { return reply.value(key, std::string{}); };
  std::cout << "opforge " << text("version") << ", pid " << reply.value("pid", 0) << ", up "
            << format_duration(reply.value("uptime_s", 0.0)) << '\n'
            << "  data dir  " << text("data_dir") << '\n'
            << "  control   " << text("control") << '\n'
            << "  metrics   "
            << (text("metrics").empty() ? "disabled" : "http://" + text("metrics") + "/metrics")
            << '\n';
  print_part("workers   ", reply["workers"], print_workers_part);
  // A daemon older than `llm` in `status` leaves it out.
  if (reply.contains("llm"))
    print_part("llm       ", reply["llm"], print_llm_part);
  print_part("store     ", reply["store"], print_store_part);
  if (reply.contains("toolchains")) {
    std::cout << "  toolchain defects ";
    print_toolchains_part(reply["toolchains"]);
    std::cout << '\n';
  }
  if (reply.contains("maintenance"))
    print_part("maintenance ", reply["maintenance"], print_maintenance_part);
}

// One line per worker: id, role and device kind, device, toolchain fingerprint, slots in use,
// time since its last heartbeat, and its state when it is not plainly alive.
void print_workers(const nlohmann::json& reply) {
  auto workers = reply.value("workers", nlohmann::json::array());
  if (workers.empty()) {
    std::cout << "no workers connected\n";
    return;
  }
  for (auto& w : workers) {
    auto text = [&](const char* key) {
      auto value = w.value(key, std::string{});
      return value.empty() ? std::string{"-"} : value;
    };
    std::cout << text("worker_id") << "  " << text("role") << "/" << text("device_kind") << "  "
              << text("device_name") << "  toolchain " << text("fingerprint") << "  "
              << w.value("busy", 0) << "/" << w.value("slots", 0) << " slots busy  heartbeat "
              << w.value("ms_since_heartbeat", 0) << " ms ago";
    if (text("state") == to_string(contract::worker_state::dead))
      std::cout << "  DEAD (" << text("dead_reason") << ")";
    std::cout << '\n';
  }
}

// -- campaigns ---------------------------------------------------------------------------------

// What `opforge run` sends: operators by name, category, all or failed, and the overrides.
struct run_options {
  std::vector<std::string> names;
  std::vector<std::string> from_model;
  std::vector<std::string> categories;
  bool all = false;
  bool failed = false;
  std::string dtypes;
  std::string sets;
  // Imported with the run: the model sets the --from-model reports captured, by set name.
  std::map<std::string, model_set_files> model_sets;
  std::string endpoint;
  std::string device;
  uint32_t concurrency = 0;
  uint32_t max_dialogs = 0;
  uint32_t max_calls = 0;
  uint64_t max_tokens = 0;
  bool detach = false;

  void add_to(CLI::App& cmd) {
    cmd.add_option("operators", names, "OpInfo names (e.g. abs nn.functional.relu)");
    cmd.add_option("--category", categories, "every operator of a catalog category (repeatable)");
    cmd.add_option("--from-model", from_model,
                   "the operators a model check left missing: the JSON report of `python -m "
                   "opforge_library modelcheck` (repeatable)");
    cmd.add_flag("--all", all, "every operator of the catalog");
    cmd.add_flag("--failed", failed, "the operators whose sessions failed in earlier campaigns");
    cmd.add_option("--dtypes", dtypes, "comma-separated dtypes (default: campaigns.dtypes)");
    cmd.add_option("--sets", sets,
                   "comma-separated sample sets every test must also pass, e.g. model:gpt2 (a "
                   "model's inputs, imported by --from-model; its reports' sets are required "
                   "without naming them)");
    cmd.add_option("--endpoint", endpoint,
                   "LLM endpoint by name (default: the first configured); a,b fails over from a "
                   "to b while a is down");
    cmd.add_option("--device", device, "where candidates are tested: a device kind, e.g. cuda")
        ->check([](const std::string& kind) {
          return is_device_kind(kind) ? "" : "a device kind is " + std::string{device_kind_rule};
        });
    cmd.add_option("--concurrency", concurrency, "sessions at once");
    cmd.add_option("--max-dialogs", max_dialogs, "dialogs per operator");
    cmd.add_option("--max-calls", max_calls, "LLM calls per dialog");
    cmd.add_option("--max-tokens", max_tokens,
                   "LLM tokens the campaign may use in all (default: campaigns.max_tokens; 0 "
                   "there: unlimited)");
    cmd.add_flag("--detach", detach, "submit and return; follow later with `opforge attach`");
  }

  nlohmann::json request() const {
    nlohmann::json out{{"names", names},
                       {"categories", categories},
                       {"all", all},
                       {"failed", failed},
                       {"endpoint", endpoint},
                       {"device_kind", device},
                       {"concurrency", concurrency},
                       {"max_dialogs", max_dialogs},
                       {"max_calls_per_dialog", max_calls},
                       {"max_tokens", max_tokens}};
    auto list = nlohmann::json::array();
    std::stringstream items{dtypes};
    for (std::string item; std::getline(items, item, ',');)
      if (!item.empty())
        list.push_back(item);
    out["dtypes"] = list;
    auto required = nlohmann::json::array();
    std::stringstream named{sets};
    for (std::string item; std::getline(named, item, ',');)
      if (!item.empty())
        required.push_back(item);
    for (const auto& [set, files] : model_sets)
      if (std::find(required.begin(), required.end(), set) == required.end())
        required.push_back(set);
    out["sample_sets"] = required;
    if (!model_sets.empty())
      out["model_sets"] = model_sets;
    return out;
  }
};

volatile std::sig_atomic_t detach_requested = 0;

// Follows a campaign until it ends or the user detaches (Ctrl-C), showing its events on `display`.
// Exit status: 0 when it ended "done" with every operator passed, 3 when done with some failed,
// 1 when it was rejected, cancelled or interrupted, or the daemon went away.
int follow(const config& cfg, const client_options& opts, std::string id,
           campaign_display& display) {
  std::signal(SIGINT, [](int) { detach_requested = 1; });
  campaign_watch seen;
  for (;;) {
    auto reply = control_request(cfg.control.listen, request_type::campaign, {{"id", id}},
                                 std::chrono::milliseconds{opts.timeout_ms});
    if (!reply) {
      display.close_line();
      return fail(reply.error(), exit_unreachable);
    }
    auto c = (*reply)["campaign"];
    id = c.value("campaign_id", id); // "" asked for the newest
    for (const auto& event : campaign_events(c, seen)) {
      display.show(event);
      if (event_kind(event) != campaign_event::finished)
        continue;
      if (c.value("state", std::string{}) != to_string(contract::campaign_state::done))
        return exit_unreachable;
      return c.value("failed", 0) > 0 ? exit_operators_failed : 0;
    }
    for (int i = 0; i < 5 && !detach_requested; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds{100});
    if (detach_requested) {
      display.show(detached_event(id));
      return 0;
    }
    display.redraw();
  }
}

campaign_display::mode display_mode(const client_options& opts) {
  if (opts.json)
    return campaign_display::mode::json_lines;
  return ::isatty(STDOUT_FILENO) ? campaign_display::mode::terminal : campaign_display::mode::log;
}

int attach(const config& cfg, const client_options& opts, const std::string& id) {
  campaign_display display{std::cout, display_mode(opts)};
  return follow(cfg, opts, id, display);
}

caf::error bad_report(const std::string& path, const std::string& what) {
  return caf::make_error(errc::request_invalid, "--from-model " + path + ": " + what);
}

// What model-check reports ask of a campaign: their missing operators, each once, in the order
// the reports name them, and the model sets they captured.
struct model_reports {
  std::vector<std::string> names;
  std::map<std::string, model_set_files> sets;
};

// Reads model-check reports (a file holds one model_report or a list of them) with the contract's
// codec: nlohmann only turns the file's JSON into the msgpack that codec reads. A captured set
// that the daemon would refuse (too large) is refused here, before it is sent.
caf::expected<model_reports> model_operators(const std::vector<std::string>& paths) {
  model_reports out;
  auto& names = out.names;
  for (const auto& path : paths) {
    std::ifstream in{path};
    if (!in)
      return bad_report(path, std::string{"cannot read it: "} + std::strerror(errno));
    auto document = nlohmann::json::parse(in, nullptr, false);
    if (document.is_discarded())
      return bad_report(path, "not JSON (want a modelcheck report)");
    auto reports = document.is_array() ? document : nlohmann::json::array({document});
    for (size_t i = 0; i < reports.size(); ++i) {
      auto bytes = nlohmann::json::to_msgpack(reports[i]);
      auto where = path + (document.is_array() ? " [" + std::to_string(i) + "]" : "");
      // Room for a captured set over the daemon's cap, which replace_model_set names.
      auto handle = wire::unpack({reinterpret_cast<const char*>(bytes.data()), bytes.size()},
                                 {.max_bytes = 2 * control_max_request_bytes});
      if (!handle)
        return bad_report(where, message(handle.error()));
      contract::model_report report;
      if (auto bad = contract::read_value(handle->get(), report))
        return bad_report(where, "model_report: " + bad->message());
      for (const auto& op : report.missing_operators)
        if (std::find(names.begin(), names.end(), op.op) == names.end())
          names.push_back(op.op);
      if (!report.captured_inputs || report.captured_inputs->empty())
        continue;
      auto set = "model:" + report.model;
      if (auto checked = replace_model_set(set, *report.captured_inputs, {}); !checked)
        return bad_report(where, message(checked.error()));
      out.sets[set] = std::move(*report.captured_inputs);
    }
  }
  return out;
}

int run_campaign(const config& cfg, const client_options& opts, run_options run) {
  if (!run.from_model.empty()) {
    auto reports = model_operators(run.from_model);
    if (!reports)
      return fail(reports.error(), exit_bad_config);
    auto* missing = &reports->names;
    if (missing->empty()) {
      std::cout << "the model reports name no missing operator: the library serves every "
                   "overload they call\n";
      return 0;
    }
    run.model_sets = std::move(reports->sets);
    // A campaign selects operators by name: every variant of each.
    for (auto& name : *missing)
      if (std::find(run.names.begin(), run.names.end(), name) == run.names.end())
        run.names.push_back(std::move(name));
  }
  auto timeout = std::chrono::milliseconds{opts.timeout_ms};
  // On stderr, so that --json's event lines stay the only output on stdout.
  if (auto live = control_request(cfg.control.listen, request_type::status, nullptr, timeout))
    if (auto warning = concurrency_warning((*live)["llm"], run.concurrency, run.endpoint);
        !warning.empty())
      std::cerr << "warning: " << warning << '\n';
  auto reply = control_request(cfg.control.listen, request_type::run, run.request(), timeout);
  if (!reply)
    return fail(reply.error(), exit_unreachable);
  auto c = (*reply)["campaign"];
  auto id = c.value("campaign_id", std::string{});
  if (opts.json && run.detach) {
    std::cout << c.dump(2) << '\n';
    return 0;
  }
  campaign_display display{std::cout, display_mode(opts)};
  display.show(submitted_event(c));
  if (run.detach) {
    std::cout << "follow it with `opforge attach " << id << "`\n";
    return 0;
  }
  return follow(cfg, opts, id, display);
}

void print_campaigns(const nlohmann::json& reply) {
  auto list = reply.value("campaigns", nlohmann::json::array());
  if (list.empty()) {
    std::cout << "no campaigns yet: start one with `opforge run`\n";
    return;
  }
  for (auto& c : list) {
    std::cout << c.value("campaign_id", "") << "  " << c.value("state", "") << "  "
              << c.value("operators", 0) << " operators  endpoint " << c.value("endpoint", "")
              << "  device " << c.value("device_kind", "");
    if (!c.value("error", std::string{}).empty())
      std::cout << "  (" << c.value("error", "") << ")";
    std::cout << '\n';
  }
}

int run_client(const config& cfg, const client_options& opts, request_type type,
               void (*print)(const nlohmann::json&)) {
  return request_and_print(cfg, opts, type, {}, print);
}

// -- sessions and show -------------------------------------------------------------------------

// What `sessions` and `show` select.
struct session_options {
  std::string campaign;
  std::string state;
  std::string op;
};

// One line per session; the end reason comes last.
void print_sessions(const nlohmann::json& reply, const session_options& selected) {
  auto sessions = reply.value("sessions", nlohmann::json::array());
  if (sessions.empty()) {
    std::cout << "no " << (selected.state.empty() ? "" : selected.state + " ") << "sessions"
              << (selected.campaign.empty() ? "" : " in campaign " + selected.campaign) << '\n';
    return;
  }
  std::vector<std::vector<std::string>> rows{
      {"OPERATOR", "CAMPAIGN", "STATE", "DIALOGS", "CALLS", "LAST OUTCOME", "END"}};
  for (auto& s : sessions) {
    auto text = [&](const char* key) {
      auto value = s.value(key, std::string{});
      return value.empty() ? std::string{"-"} : value;
    };
    rows.push_back({text("operator"), text("campaign_id"), text("state"),
                    std::to_string(s.value("dialog", 0)), std::to_string(s.value("total_calls", 0)),
                    text("last_outcome"), text("end_reason")});
  }
  print_table(rows);
}

// The daemon lists sessions a page at a time; this reads every page into one reply.
int list_all_sessions(const config& cfg, const client_options& opts,
                      const session_options& selected) {
  nlohmann::json request{{"campaign", selected.campaign}, {"state", selected.state}};
  auto all = nlohmann::json::array();
  for (;;) {
    auto reply = control_request(cfg.control.listen, request_type::sessions, request,
                                 std::chrono::milliseconds{opts.timeout_ms});
    if (!reply)
      return fail(reply.error(), exit_unreachable);
    for (auto& s : (*reply)["sessions"])
      all.push_back(std::move(s));
    if (!reply->value("truncated", false))
      break;
    request["after"] = (*reply)["next"];
  }
  nlohmann::json reply{{"ok", true}, {"sessions", std::move(all)}, {"truncated", false}};
  if (opts.json)
    std::cout << reply.dump(2) << '\n';
  else
    print_sessions(reply, selected);
  return 0;
}

// `text` with every line indented by `by` spaces.
std::string indented(const std::string& text, size_t by) {
  std::istringstream lines{text};
  std::string out, line;
  while (std::getline(lines, line))
    out += (line.empty() ? "" : std::string(by, ' ') + line) + '\n';
  return out;
}

// The session's transcript: a header, then every transition in order, each dialog opening with
// its prompt, each answer and feedback prompt in full under the transition that carried it; then
// the accepted kernel.
void print_show(const nlohmann::json& reply) {
  auto session = reply.value("session", nlohmann::json::object());
  auto text = [&](const char* key) { return session.value(key, std::string{}); };
  auto variant = text("variant");
  auto budgets = session.value("budgets", nlohmann::json::object());
  std::cout << "operator  " << text("op") << (variant.empty() ? "" : "/" + variant) << '\n'
            << "campaign  " << text("campaign_id") << '\n'
            << "state     " << text("state")
            << (text("end_reason").empty() ? "" : ": " + text("end_reason")) << '\n'
            << "dtypes    " << joined(session.value("dtypes", nlohmann::json::array())) << '\n'
            << "calls     " << session.value("total_calls", 0) << " in "
            << session.value("dialog", 0) << " dialogs (budget " << budgets.value("max_dialogs", 0)
            << " dialogs of " << budgets.value("max_calls_per_dialog", 0) << " calls), "
            << session.value("total_faults", 0) << " faults\n"
            << "tokens    " << session.value("prompt_tokens", 0) << " prompt, "
            << session.value("completion_tokens", 0) << " completion\n";
  auto events = reply.value("events", nlohmann::json::array());
  if (events.empty())
    std::cout << "\nno transitions recorded\n";
  for (auto& e : events) {
    auto from = e.value("from", std::string{});
    auto to = e.value("to", std::string{});
    auto detail = e.value("detail", std::string{});
    auto content = e.value("content", std::string{});
    if (from == to_string(contract::session_state::prompt) &&
        to == to_string(contract::session_state::generate)) {
      std::cout << '\n' << detail << '\n';
      if (!content.empty())
        std::cout << "  prompt:\n" << indented(content, 6);
      continue;
    }
    auto step = from + " -> " + to;
    std::cout << "  " << step << std::string(22 - std::min<size_t>(step.size(), 20), ' ') << detail
              << '\n'
              << indented(content, 6);
  }
  if (reply.value("truncated", false))
    std::cout << "(only the first " << events.size() << " transitions read)\n";
  if (text("state") == to_string(contract::session_state::success))
    std::cout << "\naccepted kernel:\n" << indented(text("proposal"), 4);
}

// -- the library -------------------------------------------------------------------------------

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"opforge: LLM-driven Triton kernels for every ATen operator, proven on device"};
  app.set_version_flag("--version", std::string{"opforge "} + OPFORGE_VERSION);
  app.require_subcommand(1);

  common_options common;
  client_options client;

  auto* serve_cmd = app.add_subcommand("serve", "run the daemon in the foreground");
  common.add_to(*serve_cmd);
  std::string workers_listen, metrics_listen, log_level;
  serve_cmd->add_option("--workers-listen", workers_listen, "ZeroMQ endpoint for device workers");
  serve_cmd->add_option("--metrics-listen", metrics_listen,
                        "Prometheus endpoint host:port (\"\" disables)");
  serve_cmd->add_option("--log-level", log_level, "trace, debug, info, warn, error");

  auto* check_cmd = app.add_subcommand(
      "check", "load the configuration and the data it names as serve would, start nothing");
  common.add_to(*check_cmd);

  auto* status_cmd = app.add_subcommand("status", "show what the running daemon is doing");
  auto* workers_cmd = app.add_subcommand("workers", "list the connected device and lint workers");
  auto* shutdown_cmd = app.add_subcommand("shutdown", "stop the running daemon cleanly");
  run_options run;
  auto* run_cmd =
      app.add_subcommand("run", "start a campaign over operators and follow it (Ctrl-C detaches)");
  run.add_to(*run_cmd);
  std::string campaign_id;
  auto* attach_cmd =
      app.add_subcommand("attach", "follow a campaign's progress again (Ctrl-C detaches)");
  attach_cmd->add_option("campaign", campaign_id, "campaign id (default: the newest)");
  auto* campaigns_cmd = app.add_subcommand("campaigns", "list every campaign, newest first");
  auto* cancel_cmd = app.add_subcommand("cancel", "cancel a running campaign");
  cancel_cmd->add_option("campaign", campaign_id, "campaign id")->required();

  session_options selected;
  auto* sessions_cmd = app.add_subcommand("sessions", "list operator sessions, one line each");
  sessions_cmd->add_option("--state", selected.state, "only sessions in this state, e.g. FAILED");
  auto* show_cmd = app.add_subcommand(
      "show", "an operator's session: every prompt, answer, verdict and feedback in order");
  show_cmd->add_option("OP", selected.op, "operator id: OpInfo name, or name/variant")->required();
  for (auto* cmd : {sessions_cmd, show_cmd})
    cmd->add_option("--campaign", selected.campaign,
                    "campaign id (default: every campaign; for show, the newest that has OP)");

  auto* keys_cmd = app.add_subcommand(
      "keys", "the CURVE keys of the workers socket; works without a running daemon");
  keys_cmd->require_subcommand(1);
  auto* keys_generate_cmd = keys_cmd->add_subcommand(
      "generate", "a worker's key pair, admitted to the allow-list; or, with --server, the "
                  "daemon's own");
  std::string key_name, key_dir;
  bool server_keys = false, replace_keys = false;
  keys_generate_cmd->add_option("NAME", key_name, "the worker's name, e.g. its host");
  keys_generate_cmd->add_option(
      "--out", key_dir, "where the worker's key pair goes (default <data-dir>/keys/workers)");
  auto* server_flag =
      keys_generate_cmd->add_flag("--server", server_keys, "the daemon's key pair instead");
  keys_generate_cmd->add_flag("--force", replace_keys, "with --server: replace an existing pair")
      ->needs(server_flag);
  auto* keys_list_cmd =
      keys_cmd->add_subcommand("list", "the daemon's public key and every admitted worker key");
  for (auto* cmd : {keys_generate_cmd, keys_list_cmd})
    common.add_to(*cmd);
  kernels_options kernels_selected;
  auto* kernels_cmd = app.add_subcommand(
      "kernels", "list the kernel library: every version of every operator, or of OP");
  kernels_cmd->add_option("OP", kernels_selected.op,
                          "operator id (name/variant), or an OpInfo name for all its variants");
  kernels_cmd->add_flag("--source", kernels_selected.source, "print OP's current kernel source");
  auto* regressions_cmd = app.add_subcommand(
      "regressions", "kernels that passed on an earlier toolchain and fail on a newer one, or "
                     "run slower there");
  std::string revalidate_fingerprint;
  std::string revalidate_device;
  auto* revalidate_cmd = app.add_subcommand(
      "revalidate", "test the library's current kernels again on live toolchains, even where "
                    "verdicts exist, and print what that owes");
  revalidate_cmd->add_option("--fingerprint", revalidate_fingerprint,
                             "the toolchain fingerprint of a connected worker (default: each)");
  revalidate_cmd->add_option("--device", revalidate_device, "the device kind (default: each)");
  repair_options repair;
  auto* repair_cmd = app.add_subcommand(
      "repair", "start sessions that repair the regressions, each seeded with the regressed kernel "
                "and tested on the toolchain it fails on");
  repair.add_to(*repair_cmd);
  export_options exported;
  auto* export_cmd = app.add_subcommand(
      "export", "write the library as a Python package or BackendBench's directory layout");
  exported.add_to(*export_cmd);
  report_options reported;
  auto* report_cmd = app.add_subcommand(
      "report", "coverage by category and dtype, coverage against LLM calls, failures, costs");
  reported.add_to(*report_cmd);
  common.add_to(*report_cmd);

  import_options import_opts;
  auto* import_cmd = app.add_subcommand(
      "import", "test a kernel set on a device worker; those that pass enter the library");
  auto* import_show_cmd = import_opts.add_to(*import_cmd);
  auto* imports_cmd =
      app.add_subcommand("imports", "every import the daemon's store holds, oldest first");

  for (auto* cmd :
       {status_cmd, workers_cmd, shutdown_cmd, run_cmd, attach_cmd, campaigns_cmd, cancel_cmd,
        sessions_cmd, show_cmd, kernels_cmd, regressions_cmd, revalidate_cmd, repair_cmd,
        export_cmd, import_cmd, import_show_cmd, imports_cmd}) {
    common.add_to(*cmd);
    client.add_to(*cmd);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    auto code = app.exit(e);
    return code == 0 ? 0 : exit_bad_config;
  }

  auto* cmd = app.get_subcommands().front();
  if (cmd == keys_cmd)
    cmd = keys_cmd->get_subcommands().front();
  if (cmd == import_cmd && import_show_cmd->parsed())
    cmd = import_show_cmd;
  config_sources sources{{}, process_env, std::nullopt};
  if (!common.config_file.empty())
    sources.file = common.config_file;
  add_flag(sources, *cmd, "--data-dir", "data_dir", common.data_dir);
  add_flag(sources, *cmd, "--control", "control.listen", common.control);
  add_flag(sources, *cmd, "--workers-listen", "workers.listen", workers_listen);
  add_flag(sources, *cmd, "--metrics-listen", "metrics.listen", metrics_listen);
  add_flag(sources, *cmd, "--log-level", "log.level", log_level);
  auto cfg = load_config(sources);
  if (!cfg)
    return fail(cfg.error(), exit_bad_config);

  if (cmd == check_cmd) {
    auto report = check_config_data(*cfg, process_env);
    if (!report)
      return fail(report.error(), exit_bad_config);
    auto workers = check_worker_keys(*cfg);
    if (!workers)
      return fail(workers.error(), exit_bad_config);
    for (const auto& line : *report)
      std::cout << line << '\n';
    std::cout << *workers << '\n';
    // The endpoints' live state is the running daemon's, when one answers; check starts none,
    // and waits briefly: no daemon is a normal answer here.
    auto live = control_request(cfg->control.listen, request_type::status, nullptr,
                                std::chrono::milliseconds{2000});
    if (!live || !live->contains("llm")) {
      std::cout << "llm endpoints live: "
                << (live ? "the daemon does not report them" : message(live.error())) << '\n';
      return 0;
    }
    std::cout << "llm endpoints live (the daemon at " << cfg->control.listen << "):\n";
    print_part("llm       ", (*live)["llm"], print_llm_part);
    return 0;
  }
  if (cmd == keys_generate_cmd || cmd == keys_list_cmd) {
    if (cmd == keys_generate_cmd && server_keys == !key_name.empty())
      return fail(caf::make_error(errc::config_invalid,
                                  "keys generate: name a worker (NAME) or pass --server"),
                  exit_bad_config);
    auto lines = cmd == keys_list_cmd ? list_keys(*cfg)
                 : server_keys        ? generate_server_keys(*cfg, replace_keys)
                                      : generate_worker_keys(*cfg, key_name, key_dir);
    if (!lines)
      return fail(lines.error(), exit_bad_config);
    for (const auto& line : *lines)
      std::cout << line << '\n';
    return 0;
  }
  if (cmd == serve_cmd) {
    if (auto err = serve(std::move(*cfg), OPFORGE_VERSION))
      return fail(err, exit_bad_config);
    return 0;
  }
  if (cmd == status_cmd)
    return run_client(*cfg, client, request_type::status, print_status);
  if (cmd == workers_cmd)
    return run_client(*cfg, client, request_type::workers, print_workers);
  if (cmd == run_cmd)
    return run_campaign(*cfg, client, run);
  if (cmd == attach_cmd)
    return attach(*cfg, client, campaign_id);
  if (cmd == campaigns_cmd)
    return run_client(*cfg, client, request_type::campaigns, print_campaigns);
  if (cmd == cancel_cmd)
    return request_and_print(*cfg, client, request_type::cancel, {{"id", campaign_id}},
                             [&campaign_id](const nlohmann::json&) {
                               std::cout
                                   << "campaign " << campaign_id
                                   << " is being cancelled: running sessions stop, waiting ones "
                                      "never start\n";
                             });
  if (cmd == sessions_cmd)
    return list_all_sessions(*cfg, client, selected);
  if (cmd == kernels_cmd)
    return list_kernels(*cfg, client, kernels_selected);
  if (cmd == regressions_cmd)
    return list_regressions(*cfg, client);
  if (cmd == revalidate_cmd)
    return request_and_print(
        *cfg, client, request_type::revalidate,
        {{"device_kind", revalidate_device}, {"fingerprint", revalidate_fingerprint}},
        print_revalidation);
  if (cmd == repair_cmd)
    return run_repair(cfg->control.listen, repair, client.json,
                      std::chrono::milliseconds{client.timeout_ms});
  if (cmd == export_cmd)
    return export_library(*cfg, client, exported);
  if (cmd == import_show_cmd)
    return show_import(cfg->control.listen, import_opts.show_id, client.json,
                       std::chrono::milliseconds{client.timeout_ms});
  if (cmd == import_cmd)
    return run_import(cfg->control.listen, import_opts, client.json,
                      std::chrono::milliseconds{client.timeout_ms});
  if (cmd == imports_cmd)
    return list_imports(cfg->control.listen, client.json,
                        std::chrono::milliseconds{client.timeout_ms});
  if (cmd == report_cmd)
    return write_report(*cfg, reported);
  if (cmd == show_cmd)
    return request_and_print(*cfg, client, request_type::show,
                             {{"op", selected.op}, {"campaign", selected.campaign}}, print_show);
  return run_client(*cfg, client, request_type::shutdown,
                    [](const nlohmann::json&) { std::cout << "the daemon is shutting down\n"; });
}
