#include "actors/sessions/campaign.hpp"

#include "messages/errors.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

#include <spdlog/spdlog.h>

namespace opforge {

namespace {

using self_pointer = campaign_actor::stateful_pointer<campaign_state>;

void launch_more(self_pointer self);

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void checkpoint_campaign(self_pointer self, contract::campaign_state state,
                         std::function<void()> then) {
  auto& st = self->state;
  stored_campaign stored{st.spec, state, st.status.error,
                         state == contract::campaign_state::running ? 0 : now_ms()};
  write_batch batch{{{family::campaigns, st.spec.campaign_id, encode_campaign(stored)}}, true};
  self->request(st.services.store, caf::infinite, atom::write_v, std::move(batch))
      .then(
          [self, then, ended = stored.ended_ms](atom::ok) {
            self->state.status.ended_ms = ended;
            then();
          },
          [self](const caf::error& err) {
            self->state.promise.deliver(
                caf::make_error(errc::store_io_failed,
                                "campaign " + self->state.spec.campaign_id + ": " + render(err)));
            self->quit(err);
          });
}

} // namespace

void count(campaign_status& status, session_summary summary) {
  (summary.state == session_state::success ? status.succeeded : status.failed) += 1;
  status.llm_calls += summary.llm_calls;
  status.faults += summary.faults;
  status.prompt_tokens += summary.prompt_tokens;
  status.completion_tokens += summary.completion_tokens;
  status.finished.push_back(std::move(summary));
}

namespace {

// Moves a session's count in opforge_sessions{state} from where it was (if anywhere) to `to`.
void track_state(campaign_state& st, const std::string& session_id, const session_state* to) {
  if (!st.services.telemetry)
    return;
  if (auto was = st.live.find(session_id); was != st.live.end())
    st.services.telemetry->sessions(to_string(was->second.state)).Decrement();
  if (to)
    st.services.telemetry->sessions(to_string(*to)).Increment();
}

void finished(self_pointer self, session_summary summary) {
  auto& st = self->state;
  track_state(st, summary.session_id, nullptr);
  if (st.services.telemetry)
    st.services.telemetry->sessions_ended(to_string(summary.state)).Increment();
  st.running.erase(summary.session_id);
  st.live.erase(summary.session_id);
  --st.status.running;
  count(st.status, std::move(summary));
  launch_more(self);
}

// Points a session about to start at the endpoint it should ask: the one its record names (a
// resumed session keeps the endpoint it failed over to) unless that one is down.
void choose_endpoint(const campaign_state& st, session_record& record, session_services& services) {
  const auto& endpoints = st.services.endpoints;
  if (endpoints.empty())
    return;
  auto name = pick_endpoint(endpoints, st.health, record.endpoint);
  auto chosen = std::find_if(endpoints.begin(), endpoints.end(),
                             [&](const session_endpoint& e) { return e.name == name; });
  if (chosen == endpoints.end()) // every endpoint is down: the record's, or else the first
    chosen = std::find_if(endpoints.begin(), endpoints.end(),
                          [&](const session_endpoint& e) { return e.name == record.endpoint; });
  if (chosen == endpoints.end())
    chosen = endpoints.begin();
  record.endpoint = chosen->name;
  record.model = chosen->model;
  services.llm = chosen->actor;
}

void launch(self_pointer self, const operator_spec& op) {
  auto& st = self->state;
  auto id = session_id(st.spec, op);
  auto restored = st.restored.find(id);
  auto record =
      restored != st.restored.end() ? std::move(restored->second) : new_session(st.spec, op);
  if (restored != st.restored.end())
    st.restored.erase(restored);
  // Only the sessions hold the campaign's handle: in its own state it would keep it alive forever.
  auto services = st.services;
  services.progress = caf::actor_cast<campaign_actor>(self);
  services.extra_sets = st.spec.sample_sets;
  services.model_samples = op.model_samples;
  choose_endpoint(st, record, services);
  auto session = self->spawn(op_session, std::move(record), std::move(services));
  st.running.emplace(id, session);
  ++st.status.running;
  auto name = op.op;
  self->request(session, caf::infinite, atom::run_v)
      .then([self](session_summary& summary) { finished(self, std::move(summary)); },
            [self, id, name](const caf::error& err) {
              // Not a verdict: the session could not checkpoint. It resumes when the daemon does,
              // so it is not counted, and the campaign must stay "running" in the store.
              auto& st = self->state;
              spdlog::error("campaign {}: session {} stopped: {}", st.spec.campaign_id, id,
                            render(err));
              track_state(st, id, nullptr);
              st.running.erase(id);
              st.live.erase(id);
              --st.status.running;
              ++st.interrupted;
              launch_more(self);
            });
}

void publish_progress(const campaign_state& st) {
  auto* telemetry = st.services.telemetry.get();
  if (!telemetry)
    return;
  const auto& id = st.spec.campaign_id;
  telemetry->campaign_operators(id, "waiting").Set(static_cast<double>(st.status.waiting));
  telemetry->campaign_operators(id, "running").Set(static_cast<double>(st.status.running));
  telemetry->campaign_operators(id, "succeeded").Set(static_cast<double>(st.status.succeeded));
  telemetry->campaign_operators(id, "failed").Set(static_cast<double>(st.status.failed));
}

void launch_more(self_pointer self) {
  auto& st = self->state;
  while (!st.waiting.empty() && st.status.state == contract::campaign_state::running &&
         st.running.size() < std::max<uint32_t>(st.spec.concurrency, 1)) {
    auto index = st.waiting.front();
    st.waiting.pop_front();
    --st.status.waiting;
    launch(self, st.spec.operators[index]);
  }
  // Every start, verdict and cancellation passes through here, so the gauges follow the status.
  publish_progress(st);
  if (!st.running.empty() ||
      (!st.waiting.empty() && st.status.state == contract::campaign_state::running))
    return;
  auto deliver = [self] { self->state.promise.deliver(live_status(self->state)); };
  if (st.interrupted > 0) {
    st.status.state = contract::campaign_state::interrupted;
    deliver();
  } else if (st.status.state == contract::campaign_state::running) {
    st.status.state = contract::campaign_state::done;
    if (st.services.tokens->spent())
      st.status.error = "token budget spent: " + st.services.tokens->describe();
    checkpoint_campaign(self, contract::campaign_state::done, deliver);
  } else if (st.status.state == contract::campaign_state::cancelled) {
    checkpoint_campaign(self, contract::campaign_state::cancelled, deliver);
  }
}

// How often a running campaign asks its endpoints how they are.
constexpr auto health_poll = std::chrono::seconds{1};

std::string describe_outage(const endpoint_health& health) {
  auto for_s = (now_ms() - health.failing_since_ms) / 1000;
  return "endpoint " + health.name + " down for " + std::to_string(for_s) +
         " s: " + health.last_error;
}

// Moves each session that waits in GENERATE on an endpoint that is down to the next one that is
// not. A session busy checkpointing ignores the request; the next poll asks it again.
void fail_over(self_pointer self) {
  auto& st = self->state;
  if (st.services.endpoints.size() < 2)
    return;
  for (const auto& [id, progress] : st.live) {
    auto health = st.health.find(progress.endpoint);
    if (progress.state != contract::session_state::generate || health == st.health.end() ||
        health->second.state != endpoint_state::down)
      continue;
    auto target = pick_endpoint(st.services.endpoints, st.health, progress.endpoint);
    auto session = st.running.find(id);
    if (target.empty() || session == st.running.end())
      continue;
    self->send(session->second, atom::failover_v, target, describe_outage(health->second));
  }
}

void poll_health(self_pointer self) {
  auto& st = self->state;
  if (st.status.state != contract::campaign_state::running || st.services.endpoints.empty())
    return;
  for (const auto& endpoint : st.services.endpoints)
    self->request(endpoint.actor, health_poll * 5, atom::health_v)
        .then(
            [self](endpoint_health& health) {
              auto name = health.name;
              self->state.health[name] = std::move(health);
              fail_over(self);
            },
            // An endpoint too busy to answer keeps its last known health; the next poll asks again.
            [](const caf::error&) {});
  self->delayed_send(self, health_poll, atom::tick_v);
}

} // namespace

std::string pick_endpoint(const std::vector<session_endpoint>& endpoints,
                          const std::map<std::string, endpoint_health>& health,
                          const std::string& current) {
  auto state_of = [&](const std::string& name) {
    auto found = health.find(name);
    return found == health.end() ? endpoint_state::up : found->second.state;
  };
  auto listed = std::any_of(endpoints.begin(), endpoints.end(),
                            [&](const session_endpoint& e) { return e.name == current; });
  if (listed && state_of(current) != endpoint_state::down)
    return current;
  for (auto wanted : {endpoint_state::up, endpoint_state::failing})
    for (const auto& e : endpoints)
      if (e.name != current && state_of(e.name) == wanted)
        return e.name;
  return {};
}

std::string render_docstring(const std::optional<contract::docstring>& docstring) {
  if (!docstring)
    return "(PyTorch has no docstring for this operator)";
  std::string out;
  for (const auto& node : docstring->nodes) {
    if (node.depth == 0)
      out = node.text + out;
    else
      out += "\n\n### Referenced: " + node.name + "\n" + node.text;
  }
  return out;
}

caf::expected<selected_operators> select_operators(const contract::catalog_result& catalog,
                                                   const operator_selection& selection,
                                                   const std::vector<std::string>& dtypes) {
  auto invalid = [](std::string what) {
    return caf::make_error(errc::request_invalid, std::move(what));
  };
  std::set<std::string> names, categories;
  for (const auto& op : catalog.operators) {
    names.insert(op.name);
    categories.insert(op.category);
  }
  for (const auto& category : selection.categories)
    if (!categories.count(category)) {
      std::string known;
      for (const auto& c : categories)
        known += (known.empty() ? "" : ", ") + c;
      return invalid("unknown category '" + category + "' (the catalog has: " + known + ")");
    }
  for (const auto& name : selection.names) {
    if (names.count(name))
      continue;
    for (const auto& excluded : catalog.excluded)
      if (excluded.name == name)
        return invalid("operator '" + name + "' is excluded from the catalog: " + excluded.reason);
    return invalid("operator '" + name + "' is not in the catalog");
  }
  auto has = [](const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  };
  auto wanted = [&](const contract::catalog_operator& op) {
    return selection.all || has(selection.names, op.name) || has(selection.categories, op.category);
  };
  selected_operators result;
  for (const auto& op : catalog.operators) {
    if (!wanted(op))
      continue;
    operator_spec spec{.op = op.name,
                       .variant = op.variant,
                       .category = op.category,
                       .docstring = render_docstring(op.docstring),
                       .dtypes = {},
                       .aten_overloads = op.aten_overloads};
    auto seed = std::find_if(selection.seeds.begin(), selection.seeds.end(), [&](const auto& s) {
      return s.op == op.name && s.variant == op.variant;
    });
    if (seed != selection.seeds.end()) {
      spec.seed_kernel = seed->kernel;
      spec.seed_feedback = seed->feedback;
    } else if (selection.seeded_only.count(op.name)) {
      continue;
    }
    auto id = operator_id(spec.op, spec.variant);
    if (selection.covered.count(id)) {
      result.skipped.push_back(id + ": already has an accepted kernel");
      result.covered.push_back(id);
      continue;
    }
    for (const auto& dtype : dtypes)
      if (has(op.dtypes, dtype))
        spec.dtypes.push_back(dtype);
    if (spec.dtypes.empty()) {
      result.skipped.push_back(id + ": supports none of the requested dtypes");
      continue;
    }
    result.operators.push_back(std::move(spec));
  }
  return result;
}

std::string wrapper_name(std::string_view op) {
  std::string name{op};
  std::replace(name.begin(), name.end(), '.', '_');
  return name + "_wrapper";
}

std::string session_id(const campaign_spec& campaign, const operator_spec& spec) {
  return campaign.campaign_id + "/" + operator_id(spec.op, spec.variant);
}

session_record new_session(const campaign_spec& campaign, const operator_spec& spec) {
  session_record r;
  r.session_id = session_id(campaign, spec);
  r.campaign_id = campaign.campaign_id;
  r.op = spec.op;
  r.variant = spec.variant;
  r.wrapper = wrapper_name(spec.op);
  r.dtypes = spec.dtypes;
  r.docstring = spec.docstring;
  r.aten_overloads = spec.aten_overloads;
  r.seed_kernel = spec.seed_kernel;
  r.last_feedback = spec.seed_feedback;
  r.endpoint = campaign.endpoint;
  r.model = campaign.model;
  r.budgets = campaign.budgets;
  return r;
}

namespace {

// A running session's part of its campaign's status.
void add_progress(campaign_status& status, const session_summary& progress) {
  ++status.states[to_string(progress.state)];
  status.llm_calls += progress.llm_calls;
  status.prompt_tokens += progress.prompt_tokens;
  status.completion_tokens += progress.completion_tokens;
  status.faults += progress.faults;
}

} // namespace

campaign_state::~campaign_state() {
  // Sessions are not linked to their campaign (a session that fails to checkpoint is reported
  // through its reply, not by taking the campaign down), so a stopped campaign stops them here.
  for (const auto& [id, session] : running)
    caf::anon_send_exit(session, caf::exit_reason::user_shutdown);
  if (services.telemetry)
    for (const auto& [id, progress] : live)
      services.telemetry->sessions(to_string(progress.state)).Decrement();
}

void describe(campaign_status& status, const campaign_spec& spec) {
  status.campaign_id = spec.campaign_id;
  status.endpoint = spec.endpoint;
  status.device_kind = spec.device_kind;
  status.created_ms = spec.created_ms;
  status.operators = spec.operators.size();
  status.operator_ids.clear();
  for (const auto& op : spec.operators)
    status.operator_ids.push_back(operator_id(op.op, op.variant));
  status.covered = spec.covered;
}

campaign_status stored_status(const stored_campaign& stored,
                              const std::vector<session_record>& sessions) {
  campaign_status status;
  describe(status, stored.spec);
  status.state = stored.state;
  status.error = stored.error;
  status.ended_ms = stored.ended_ms;
  for (const auto& record : sessions) {
    auto summary = summarize(record);
    if (record.state == session_state::success || record.state == session_state::failed) {
      count(status, std::move(summary));
      continue;
    }
    ++status.running;
    add_progress(status, summary);
    status.active.push_back(std::move(summary));
  }
  auto started = status.succeeded + status.failed + status.running;
  status.waiting = status.operators > started ? status.operators - started : 0;
  return status;
}

campaign_status live_status(const campaign_state& st) {
  auto status = st.status;
  for (const auto& [id, progress] : st.live) {
    add_progress(status, progress);
    status.active.push_back(progress);
  }
  for (const auto& endpoint : st.services.endpoints) {
    auto found = st.health.find(endpoint.name);
    endpoint_health unknown;
    unknown.name = endpoint.name;
    status.endpoints.push_back(found != st.health.end() ? found->second : unknown);
  }
  return status;
}

caf::expected<std::vector<unfinished_campaign>> load_unfinished_campaigns(store& db) {
  std::vector<unfinished_campaign> result;
  caf::error failure;
  auto err = db.scan(family::campaigns, "", [&](std::string_view, std::string_view value) {
    auto decoded = decode_campaign(value);
    if (!decoded) {
      failure = decoded.error();
      return false;
    }
    if (decoded->state == contract::campaign_state::running)
      result.push_back({std::move(decoded->spec), {}});
    else if (decoded->state == contract::campaign_state::resolving)
      result.push_back({std::move(decoded->spec), {}, std::move(decoded->request)});
    return true;
  });
  if (err || failure)
    return err ? err : failure;
  for (auto& c : result) {
    if (c.resolving)
      continue;
    err = db.scan(family::sessions, prefix_of(c.spec.campaign_id),
                  [&](std::string_view, std::string_view value) {
                    auto record = decode_record(value);
                    if (!record) {
                      failure = record.error();
                      return false;
                    }
                    c.sessions.push_back(std::move(*record));
                    return true;
                  });
    if (err || failure)
      return err ? err : failure;
  }
  return result;
}

campaign_actor::behavior_type campaign(campaign_actor::stateful_pointer<campaign_state> self,
                                       campaign_spec spec, session_services services,
                                       std::vector<session_record> restored) {
  auto& st = self->state;
  st.spec = std::move(spec);
  st.services = std::move(services);
  describe(st.status, st.spec);
  st.status.state = contract::campaign_state::running;
  // Its sessions share its token budget; a resumed campaign counts what its sessions had used.
  st.services.tokens = std::make_shared<token_ledger>();
  st.services.tokens->limit = st.spec.max_tokens;
  for (auto& record : restored) {
    st.services.tokens->used += record.prompt_tokens + record.completion_tokens;
    st.restored.emplace(record.session_id, std::move(record));
  }
  for (size_t i = 0; i < st.spec.operators.size(); ++i) {
    // Sessions that ended before a restart are counted, not run again.
    auto done = st.restored.find(session_id(st.spec, st.spec.operators[i]));
    if (done != st.restored.end() && (done->second.state == session_state::success ||
                                      done->second.state == session_state::failed)) {
      count(st.status, summarize(done->second));
      st.restored.erase(done);
      continue;
    }
    st.waiting.push_back(i);
  }
  st.status.waiting = st.waiting.size();
  return {
      [self](atom::run) -> caf::result<campaign_status> {
        auto& st = self->state;
        if (st.started)
          return caf::make_error(errc::request_invalid,
                                 "campaign " + st.spec.campaign_id + " is already running");
        st.started = true;
        st.promise = self->make_response_promise<campaign_status>();
        checkpoint_campaign(self, contract::campaign_state::running, [self] {
          launch_more(self);
          poll_health(self);
        });
        return st.promise;
      },
      [self](atom::status) { return live_status(self->state); },
      [self](atom::cancel) {
        auto& st = self->state;
        if (st.status.state != contract::campaign_state::running)
          return;
        st.status.state = contract::campaign_state::cancelled;
        st.status.waiting = 0;
        st.waiting.clear();
        publish_progress(st);
        for (const auto& [op, session] : st.running)
          self->send(session, atom::cancel_v);
        if (st.started && st.running.empty())
          launch_more(self);
      },
      [self](atom::progress, session_summary& progress) {
        auto& st = self->state;
        if (!st.running.count(progress.session_id))
          return;
        track_state(st, progress.session_id, &progress.state);
        st.live[progress.session_id] = std::move(progress);
      },
      [self](atom::tick) { poll_health(self); },
  };
}

} // namespace opforge
