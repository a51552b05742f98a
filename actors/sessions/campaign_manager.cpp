#include "actors/sessions/campaign_manager.hpp"

#include "actors/library/kernels.hpp"
#include "actors/sessions/feedback.hpp"
#include "actors/store/store.hpp"
#include "messages/device_kind.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/jobs.hpp"
#include "messages/utc_time.hpp"
#include "messages/wire.hpp"
#include "persistence/keys.hpp"
#include "persistence/model_sets.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>

#include <spdlog/spdlog.h>

namespace opforge {

namespace {

using self_pointer = campaign_manager_actor::stateful_pointer<campaign_manager_state>;

// Scans read whole families; this only bounds a runaway store.
constexpr uint64_t scan_limit = 1'000'000;

caf::error invalid(std::string what) {
  return caf::make_error(errc::request_invalid, std::move(what));
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items)
    out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream items{text};
  for (std::string item; std::getline(items, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

// What one campaign's sessions share: the daemon's parts, its endpoint and its device kind.
caf::expected<session_services> services_for(const campaign_manager_setup& setup,
                                             const campaign_spec& spec) {
  auto endpoint = setup.endpoints.find(spec.endpoint);
  if (endpoint == setup.endpoints.end())
    return invalid("campaign " + spec.campaign_id + " uses endpoint '" + spec.endpoint +
                   "', which is not configured");
  session_services services;
  services.store = setup.store;
  services.llm = endpoint->second.actor;
  services.endpoints.push_back(
      {spec.endpoint, endpoint->second.config.model, endpoint->second.actor});
  for (const auto& name : spec.failover) {
    auto next = setup.endpoints.find(name);
    if (next == setup.endpoints.end()) {
      spdlog::warn("campaign {}: failover endpoint '{}' is not configured; left out",
                   spec.campaign_id, name);
      continue;
    }
    services.endpoints.push_back({name, next->second.config.model, next->second.actor});
  }
  services.jobs = setup.devices;
  services.summarizer = setup.summarizer;
  services.library = setup.library;
  services.summarize_over_chars = setup.summarize_over_chars;
  services.templates = setup.templates;
  services.examples = setup.examples;
  services.device_kind = spec.device_kind;
  services.fingerprint = spec.fingerprint;
  services.sample_timeout_s = static_cast<double>(setup.defaults.sample_timeout_s);
  services.job_deadline_ms = setup.defaults.job_deadline_s * 1000;
  services.confirmations = setup.acceptance.confirmations;
  services.telemetry = setup.telemetry;
  return services;
}

managed_campaign& entry(self_pointer self, const std::string& id) {
  return self->state.campaigns[id];
}

// Runs `spec` to its end; `restored` holds the records of sessions it had started.
void start(self_pointer self, campaign_spec spec, std::vector<session_record> restored) {
  auto id = spec.campaign_id;
  auto& managed = entry(self, id);
  describe(managed.status, spec);
  auto services = services_for(self->state.setup, spec);
  if (!services) {
    // Left as "running" in the store: it resumes once its endpoint is configured again.
    spdlog::error("cannot resume: {}", render(services.error()));
    managed.status.state = contract::campaign_state::interrupted;
    managed.status.error = message(services.error());
    return;
  }
  managed.status.state = contract::campaign_state::running;
  managed.actor = self->spawn(campaign, std::move(spec), std::move(*services), std::move(restored));
  self->request(managed.actor, caf::infinite, atom::run_v)
      .then(
          [self, id](campaign_status& status) {
            auto& managed = entry(self, id);
            spdlog::info("campaign {} {}: {} of {} operators passed", id, to_string(status.state),
                         status.succeeded, status.operators);
            managed.status = std::move(status);
            managed.actor = nullptr;
          },
          [self, id](const caf::error& err) {
            auto& managed = entry(self, id);
            spdlog::error("campaign {} stopped: {}", id, render(err));
            managed.status.state = contract::campaign_state::interrupted;
            managed.status.error = render(err);
            managed.actor = nullptr;
          });
}

// The catalog job a resolving campaign waits for.
std::string catalog_job_id(const std::string& campaign_id) {
  return "catalog:" + campaign_id;
}

// Stores a campaign that ended while resolving (rejected or cancelled) over its resolving record,
// so that `opforge attach` and a restarted daemon say how it ended instead of resolving it again.
void store_ended(self_pointer self, const std::string& id) {
  const auto& status = entry(self, id).status;
  campaign_spec spec;
  spec.campaign_id = id;
  spec.endpoint = status.endpoint;
  spec.device_kind = status.device_kind;
  spec.created_ms = status.created_ms;
  stored_campaign stored{std::move(spec), status.state, status.error, status.ended_ms};
  write_batch batch{{{family::campaigns, id, encode_campaign(stored)}}, true};
  self->request(self->state.setup.store, caf::infinite, atom::write_v, std::move(batch))
      .then([](atom::ok) {},
            [id, state = status.state](const caf::error& err) {
              spdlog::error("campaign {}: cannot store that it was {}: {}", id, to_string(state),
                            render(err));
            });
}

// Stores a campaign that will not run, so that `opforge attach` can say why.
void reject(self_pointer self, const std::string& id, const caf::error& why) {
  auto& managed = entry(self, id);
  if (managed.status.state != contract::campaign_state::resolving)
    return; // cancelled meanwhile
  managed.status.state = contract::campaign_state::rejected;
  managed.status.error = message(why);
  managed.status.ended_ms = now_ms();
  spdlog::warn("campaign {} rejected: {}", id, managed.status.error);
  store_ended(self, id);
}

// Reads every value of a family, then hands them over.
void scan_all(self_pointer self, family f, std::string prefix,
              std::function<void(std::vector<key_value>)> then,
              std::function<void(const caf::error&)> failed) {
  self->request(self->state.setup.store, caf::infinite, atom::scan_v, f, std::move(prefix),
                scan_limit)
      .then([then](std::vector<key_value>& entries) { then(std::move(entries)); },
            [failed](const caf::error& err) { failed(err); });
}

// The OpInfo names of operators whose sessions failed in earlier campaigns.
caf::expected<std::vector<std::string>> failed_names(const std::vector<key_value>& sessions) {
  std::set<std::string> names;
  for (const auto& kv : sessions) {
    auto record = decode_record(kv.value);
    if (!record)
      return record.error();
    if (record->state == session_state::failed)
      names.insert(record->op);
  }
  return std::vector<std::string>{names.begin(), names.end()};
}

// Asks a worker of the campaign's device kind for the catalog of `names` (all when empty), then
// selects the operators and starts the campaign.
void fetch_catalog(self_pointer self, std::string id, operator_selection selection,
                   std::vector<std::string> dtypes, campaign_spec spec,
                   std::map<std::string, model_set_files> model_sets) {
  // Cancelled while the store was read: no job may wait in the queue for it.
  if (entry(self, id).status.state != contract::campaign_state::resolving)
    return;
  auto job = catalog_job(catalog_job_id(id), spec.device_kind,
                         selection.all || !selection.categories.empty() ? std::vector<std::string>{}
                                                                        : selection.names,
                         catalog_deadline_ms);
  self->request(self->state.setup.devices, caf::infinite, atom::submit_v, std::move(job))
      .then(
          [self, id, selection, dtypes, spec,
           model_sets = std::move(model_sets)](device_job_result& result) mutable {
            if (entry(self, id).status.state != contract::campaign_state::resolving)
              return;
            if (result.status != contract::job_status::done)
              return reject(
                  self, id,
                  invalid("the catalog job " + to_string(result.status) + ": " + result.error));
            auto catalog =
                wire::decode_as<contract::catalog_result>(result.payload, "catalog_result");
            if (!catalog)
              return reject(self, id, catalog.error());
            auto selected = select_operators(*catalog, selection, dtypes);
            if (!selected)
              return reject(self, id, selected.error());
            for (const auto& skipped : selected->skipped)
              spdlog::info("campaign {}: left out {}", id, skipped);
            if (selected->operators.empty())
              return reject(self, id,
                            invalid("nothing to do: " + (selected->skipped.empty()
                                                             ? std::string{"no operator selected"}
                                                             : join(selected->skipped))));
            spec.operators = std::move(selected->operators);
            spec.covered = std::move(selected->covered);
            for (auto& op : spec.operators)
              for (const auto& [set, files] : model_sets) {
                auto file = files.find(operator_id(op.op, op.variant));
                op.model_samples[set] = file == files.end() ? "" : file->second;
              }
            spdlog::info("campaign {}: {} operators on {} with endpoint {}", id,
                         spec.operators.size(), spec.device_kind, spec.endpoint);
            start(self, std::move(spec), {});
          },
          [self, id](const caf::error& err) {
            reject(
                self, id,
                caf::make_error(errc::request_invalid, "no catalog from a worker: " + render(err)));
          });
}

// Reads the model sets among `sets` from the store, one after the other, then hands them over. A
// set the daemon does not hold rejects the campaign: its tests could not require it.
void load_model_sets(self_pointer self, std::string id, std::vector<std::string> sets,
                     std::map<std::string, model_set_files> loaded,
                     std::function<void(std::map<std::string, model_set_files>)> then) {
  auto next = std::find_if(sets.begin(), sets.end(), [&](const std::string& set) {
    return is_model_set(set) && !loaded.count(set);
  });
  if (next == sets.end())
    return then(std::move(loaded));
  auto set = *next;
  scan_all(
      self, family::meta, model_set_prefix(set),
      [self, id, set, sets = std::move(sets), loaded = std::move(loaded),
       then](std::vector<key_value> entries) mutable {
        auto files = read_model_set(set, entries);
        if (files.empty())
          return reject(self, id,
                        invalid("the daemon holds no model set " + set +
                                ": import it with `opforge run --from-model REPORT`, REPORT from "
                                "`python -m opforge_library modelcheck --capture`"));
        loaded.emplace(set, std::move(files));
        load_model_sets(self, id, std::move(sets), std::move(loaded), std::move(then));
      },
      [self, id](const caf::error& err) { reject(self, id, err); });
}

// Enters a campaign that is resolving into the manager's list.
void track_resolving(self_pointer self, const campaign_spec& spec) {
  auto& status = entry(self, spec.campaign_id).status;
  status.campaign_id = spec.campaign_id;
  status.state = contract::campaign_state::resolving;
  status.endpoint = spec.endpoint;
  status.device_kind = spec.device_kind;
  status.created_ms = spec.created_ms;
}

// Resolves a submitted request in the background: model sets, failed operators, covered ones,
// the catalog.
void resolve(self_pointer self, std::string id, campaign_request request, campaign_spec spec) {
  operator_selection selection{
      request.names, request.categories, request.all, {}, request.seeds, {}};
  for (const auto& seed : request.seeds)
    if (std::find(request.names.begin(), request.names.end(), seed.op) == request.names.end())
      selection.seeded_only.insert(seed.op);
  for (const auto& op : selection.seeded_only)
    selection.names.push_back(op);
  auto dtypes = request.dtypes;
  auto on_error = [self, id](const caf::error& err) { reject(self, id, err); };
  auto with_kernels = [self, id, selection, dtypes, spec,
                       on_error](std::vector<std::string> failed,
                                 std::map<std::string, model_set_files> model_sets) mutable {
    for (auto& name : failed)
      selection.names.push_back(std::move(name));
    // Pinned to a toolchain, an operator is covered where a kernel of it passed there (the
    // library's bundle for that fingerprint): a regressed one is not, so its repair runs.
    if (!spec.fingerprint.empty() && self->state.setup.library) {
      self->request(self->state.setup.library, caf::infinite, atom::bundle_v, spec.device_kind,
                    spec.fingerprint)
          .then(
              [self, id, selection, dtypes, spec,
               model_sets = std::move(model_sets)](contract::library_bundle& served) mutable {
                for (const auto& kernel : served.kernels)
                  selection.covered.insert(operator_id(kernel.op, kernel.variant));
                fetch_catalog(self, id, std::move(selection), std::move(dtypes), std::move(spec),
                              std::move(model_sets));
              },
              on_error);
      return;
    }
    scan_all(
        self, family::kernels, "",
        [self, id, selection, dtypes, spec,
         model_sets = std::move(model_sets)](std::vector<key_value> kernels) mutable {
          selection.covered = covered_operators(kernels);
          fetch_catalog(self, id, std::move(selection), std::move(dtypes), std::move(spec),
                        std::move(model_sets));
        },
        on_error);
  };
  auto with_failed = [self, id, failed = request.failed, with_kernels,
                      on_error](std::map<std::string, model_set_files> model_sets) mutable {
    if (!failed)
      return with_kernels({}, std::move(model_sets));
    scan_all(
        self, family::sessions, "",
        [self, id, with_kernels,
         model_sets = std::move(model_sets)](std::vector<key_value> sessions) mutable {
          auto names = failed_names(sessions);
          if (!names)
            return reject(self, id, names.error());
          if (names->empty())
            return reject(self, id, invalid("no operator failed in an earlier campaign"));
          with_kernels(std::move(*names), std::move(model_sets));
        },
        on_error);
  };
  load_model_sets(self, id, spec.sample_sets, {}, std::move(with_failed));
}

// Checks what can be checked at once and fills in the defaults.
caf::expected<campaign_spec> accept(const campaign_manager_setup& setup,
                                    campaign_request& request) {
  const auto& defaults = setup.defaults;
  campaign_spec spec;
  auto named = split(request.endpoint);
  if (named.empty())
    named.push_back(setup.default_endpoint);
  for (const auto& name : named) {
    if (setup.endpoints.count(name))
      continue;
    std::vector<std::string> names;
    for (const auto& [configured, e] : setup.endpoints)
      names.push_back(configured);
    return invalid("no endpoint named '" + name + "' (configured: " + join(names) + ")");
  }
  spec.endpoint = named.front();
  spec.failover.assign(named.begin() + 1, named.end());
  // One endpoint named (or none): with campaigns.failover the others follow in configured order.
  if (named.size() == 1 && defaults.failover)
    for (const auto& name : setup.endpoint_order)
      if (name != spec.endpoint)
        spec.failover.push_back(name);
  auto endpoint = setup.endpoints.find(spec.endpoint);
  const auto& replayed = endpoint->second.replayed_operators;
  bool selected = !request.names.empty() || !request.categories.empty() || request.all ||
                  request.failed || !request.seeds.empty();
  if (!replayed.empty()) {
    auto only = "endpoint '" + spec.endpoint + "' replays recorded answers only for " +
                join({replayed.begin(), replayed.end()}) +
                "; configure an LLM endpoint (llm.endpoints, or OPFORGE_LLM_URL) for others";
    if (!request.categories.empty() || request.all || request.failed)
      return invalid(only);
    for (const auto& name : request.names)
      if (!replayed.count(name))
        return invalid("operator '" + name + "': " + only);
    for (const auto& seed : request.seeds)
      if (!replayed.count(seed.op))
        return invalid("operator '" + seed.op + "': " + only);
    if (!selected)
      request.names.assign(replayed.begin(), replayed.end());
  } else if (!selected) {
    return invalid("name the operators to work on, or use --category, --all or --failed");
  }
  spec.device_kind = request.device_kind.empty() ? defaults.device_kind : request.device_kind;
  spec.fingerprint = request.fingerprint;
  if (!is_device_kind(spec.device_kind) || spec.device_kind == no_device_kind)
    return invalid("device kind '" + spec.device_kind +
                   "': must be a device kind other than none (" + std::string{device_kind_rule} +
                   ")");
  if (request.dtypes.empty())
    request.dtypes = split(defaults.dtypes);
  for (const auto& dtype : request.dtypes)
    if (!contract::from_string<contract::dtype>(dtype))
      return invalid("dtype '" + dtype + "': must be one of " +
                     contract::one_of<contract::dtype>());
  for (const auto& set : request.sample_sets)
    if (!contract::from_string<contract::sample_set>(set) && !is_model_set(set))
      return invalid("sample set '" + set + "': must be one of " +
                     contract::one_of<contract::sample_set>() + " or model:<name>");
  spec.sample_sets = request.sample_sets;
  auto or_default = [](uint32_t value, int64_t fallback) {
    return value > 0 ? value : static_cast<uint32_t>(fallback);
  };
  spec.concurrency = or_default(request.concurrency, defaults.concurrency);
  spec.budgets.max_dialogs = or_default(request.max_dialogs, defaults.max_dialogs);
  spec.budgets.max_calls_per_dialog =
      or_default(request.max_calls_per_dialog, defaults.max_calls_per_dialog);
  spec.budgets.same_failure_limit = static_cast<uint32_t>(defaults.same_failure_limit);
  spec.max_tokens =
      request.max_tokens > 0 ? request.max_tokens : static_cast<uint64_t>(defaults.max_tokens);
  spec.budgets.optimize = defaults.optimize == optimize_policy::on;
  spec.budgets.optimize_target_speedup = defaults.optimize_target_speedup;
  spec.budgets.optimize_calls = static_cast<uint32_t>(defaults.optimize_calls);
  spec.model = endpoint->second.config.model;
  spec.budgets.context_window_tokens = endpoint->second.config.context_window;
  spec.budgets.reply_reserve_tokens = endpoint->second.config.max_tokens;
  spec.created_ms = now_ms();
  return spec;
}

using status_promise = caf::typed_response_promise<campaign_status>;

// The status of a campaign this daemon does not run, read from the store.
void deliver_stored(self_pointer self, const std::string& id, status_promise promise) {
  self->request(self->state.setup.store, caf::infinite, atom::get_v, family::campaigns, id)
      .then(
          [self, promise, id](stored_value& value) mutable {
            if (!value.value)
              return void(promise.deliver(invalid("no campaign '" + id + "'")));
            auto campaign = decode_campaign(*value.value);
            if (!campaign)
              return void(promise.deliver(campaign.error()));
            scan_all(
                self, family::sessions, prefix_of(id),
                [promise, campaign = std::move(*campaign)](std::vector<key_value> kvs) mutable {
                  std::vector<session_record> sessions;
                  for (const auto& kv : kvs) {
                    auto record = decode_record(kv.value);
                    if (!record)
                      return void(promise.deliver(record.error()));
                    sessions.push_back(std::move(*record));
                  }
                  promise.deliver(stored_status(campaign, sessions));
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
          },
          [promise](const caf::error& err) mutable { promise.deliver(err); });
}

void deliver_status(self_pointer self, const std::string& id, status_promise promise) {
  auto found = self->state.campaigns.find(id);
  if (found == self->state.campaigns.end())
    return deliver_stored(self, id, std::move(promise));
  if (!found->second.actor)
    return void(promise.deliver(found->second.status));
  self->request(found->second.actor, std::chrono::seconds{10}, atom::status_v)
      .then([promise](campaign_status& status) mutable { promise.deliver(std::move(status)); },
            [promise](const caf::error& err) mutable { promise.deliver(err); });
}

// A campaign as `list` shows it: counts, without the per-operator lists that `status` carries.
campaign_status at_a_glance(campaign_status status) {
  status.finished.clear();
  status.operator_ids.clear();
  status.active.clear();
  return status;
}

// Every campaign: the stored ones, counted from their stored sessions (so a daemon that just
// restarted lists finished campaigns with their real counts), overlaid by what this daemon knows
// better.
void list_all(self_pointer self,
              caf::typed_response_promise<std::vector<campaign_status>> promise) {
  auto failed = [promise](const caf::error& err) mutable { promise.deliver(err); };
  scan_all(
      self, family::campaigns, "",
      [self, promise, failed](std::vector<key_value> campaigns) mutable {
        scan_all(
            self, family::sessions, "",
            [self, promise, campaigns = std::move(campaigns)](std::vector<key_value> kvs) mutable {
              std::map<std::string, std::vector<session_record>> sessions;
              for (const auto& kv : kvs) {
                auto record = decode_record(kv.value);
                if (!record)
                  return void(promise.deliver(record.error()));
                sessions[record->campaign_id].push_back(std::move(*record));
              }
              std::map<std::string, campaign_status> all;
              for (const auto& kv : campaigns) {
                auto campaign = decode_campaign(kv.value);
                if (!campaign)
                  return void(promise.deliver(campaign.error()));
                all[kv.key] = at_a_glance(stored_status(*campaign, sessions[kv.key]));
              }
              for (const auto& [id, managed] : self->state.campaigns) {
                all[id] = at_a_glance(managed.status);
              }
              std::vector<campaign_status> out;
              for (auto i = all.rbegin(); i != all.rend(); ++i)
                out.push_back(std::move(i->second));
              promise.deliver(std::move(out));
            },
            failed);
      },
      failed);
}

// The device manager answers from memory; the bound keeps `run` from hanging on a stuck one, and
// is below the control server's own (2 s), so that `run` hears this manager's reason.
constexpr auto devices_query_bound = std::chrono::seconds{1};

bool is_registered(const std::string& kind) {
  const auto& registry = contract::registered_device_kinds();
  return std::find(registry.begin(), registry.end(), kind) != registry.end();
}

// The registry's kinds, then the others workers announced (a lint worker's `none` aside).
std::vector<std::string> known_kinds(const std::vector<worker_info>& workers) {
  auto out = contract::registered_device_kinds();
  for (const auto& w : workers)
    if (w.device_kind != no_device_kind &&
        std::find(out.begin(), out.end(), w.device_kind) == out.end())
      out.push_back(w.device_kind);
  return out;
}

// Stores an accepted campaign as resolving, then answers and resolves it.
void admit(self_pointer self, status_promise promise, campaign_spec spec,
           campaign_request request) {
  auto id = timestamped_id();
  while (self->state.campaigns.count(id))
    id = timestamped_id();
  spec.campaign_id = id;
  track_resolving(self, spec);
  spdlog::info("campaign {} submitted: {}{}{}{}", id, join(request.names),
               request.categories.empty() ? "" : " categories " + join(request.categories),
               request.all ? " all operators" : "",
               request.failed ? " operators that failed before" : "");
  // Stored before the reply names it: a campaign whose id `run` printed survives a kill or a
  // shutdown in any state, resolving included, and resolves again after a restart.
  stored_campaign stored{spec, contract::campaign_state::resolving, {}, 0, request};
  write_batch batch{{{family::campaigns, id, encode_campaign(stored)}}, true};
  self->request(self->state.setup.store, caf::infinite, atom::write_v, std::move(batch))
      .then(
          [self, promise, id, request = std::move(request),
           spec = std::move(spec)](atom::ok) mutable {
            promise.deliver(entry(self, id).status);
            resolve(self, id, std::move(request), std::move(spec));
          },
          [self, promise, id](const caf::error& err) mutable {
            self->state.campaigns.erase(id);
            promise.deliver(caf::make_error(
                errc::store_io_failed, "campaign " + id + " could not be stored: " + render(err)));
          });
}

} // namespace

campaign_manager_state::~campaign_manager_state() {
  // Campaigns are not linked to the manager: a campaign that fails is reported through its reply.
  for (const auto& [id, managed] : campaigns)
    if (managed.actor)
      caf::anon_send_exit(managed.actor, caf::exit_reason::user_shutdown);
}

campaign_manager_actor::behavior_type
campaign_manager(campaign_manager_actor::stateful_pointer<campaign_manager_state> self,
                 campaign_manager_setup setup) {
  self->state.setup = std::move(setup);
  auto unfinished = std::move(self->state.setup.unfinished);
  for (auto& campaign : unfinished) {
    auto id = campaign.spec.campaign_id;
    if (campaign.resolving) {
      spdlog::info("resuming campaign {}: resolving its operators again", id);
      track_resolving(self, campaign.spec);
      resolve(self, id, std::move(*campaign.resolving), std::move(campaign.spec));
      continue;
    }
    spdlog::info("resuming campaign {}: {} operators, {} sessions started", id,
                 campaign.spec.operators.size(), campaign.sessions.size());
    start(self, std::move(campaign.spec), std::move(campaign.sessions));
  }
  return {
      [self](atom::submit, campaign_request& request) -> caf::result<campaign_status> {
        auto spec = accept(self->state.setup, request);
        if (!spec)
          return spec.error();
        auto promise = self->make_response_promise<campaign_status>();
        if (is_registered(spec->device_kind)) {
          admit(self, promise, std::move(*spec), std::move(request));
          return promise;
        }
        // Not the registry's: still served when a worker announced it (a kind newer than this
        // daemon); else no worker could ever take its jobs, and waiting would hide that.
        self->request(self->state.setup.devices, devices_query_bound, atom::workers_v)
            .then(
                [self, promise, spec = std::move(*spec),
                 request = std::move(request)](std::vector<worker_info>& workers) mutable {
                  auto kinds = known_kinds(workers);
                  if (std::find(kinds.begin(), kinds.end(), spec.device_kind) != kinds.end())
                    return admit(self, promise, std::move(spec), std::move(request));
                  promise.deliver(invalid(
                      "device kind '" + spec.device_kind +
                      "': no connected worker announced it and the worker's registry has no such "
                      "kind (known kinds: " +
                      join(kinds) + ")"));
                },
                [promise](const caf::error& err) mutable {
                  promise.deliver(caf::make_error(
                      errc::request_invalid,
                      "the device manager did not say which device kinds it serves: " +
                          render(err)));
                });
        return promise;
      },
      [self](atom::status, std::string& id) -> caf::result<campaign_status> {
        auto promise = self->make_response_promise<campaign_status>();
        if (!id.empty()) {
          deliver_status(self, id, promise);
          return promise;
        }
        // The newest: ids sort by time, in the store and in memory alike.
        scan_all(
            self, family::campaigns, "",
            [self, promise](std::vector<key_value> kvs) mutable {
              std::string newest = kvs.empty() ? std::string{} : kvs.back().key;
              if (!self->state.campaigns.empty())
                newest = std::max(newest, self->state.campaigns.rbegin()->first);
              if (newest.empty())
                return void(
                    promise.deliver(invalid("no campaign yet: start one with `opforge run`")));
              deliver_status(self, newest, promise);
            },
            [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self](atom::list) -> caf::result<std::vector<campaign_status>> {
        auto promise = self->make_response_promise<std::vector<campaign_status>>();
        list_all(self, promise);
        return promise;
      },
      [self](atom::cancel, std::string& id) -> caf::result<campaign_status> {
        auto found = self->state.campaigns.find(id);
        if (found == self->state.campaigns.end())
          return invalid("campaign '" + id + "' is not running in this daemon");
        auto& managed = found->second;
        if (managed.status.state == contract::campaign_state::resolving) {
          spdlog::info("cancelling campaign {} while it resolves", id);
          managed.status.state = contract::campaign_state::cancelled;
          managed.status.ended_ms = now_ms();
          // Its catalog job leaves the device manager's queue (and the queue-depth gauge) now,
          // not when a worker of its kind turns up; the job's error reply finds it cancelled.
          self->send(self->state.setup.devices, atom::cancel_v, catalog_job_id(id));
          store_ended(self, id);
          return managed.status;
        }
        if (!managed.actor)
          return invalid("campaign '" + id + "' is not running (it is " +
                         to_string(managed.status.state) + ")");
        spdlog::info("cancelling campaign {}", id);
        self->send(managed.actor, atom::cancel_v);
        auto promise = self->make_response_promise<campaign_status>();
        deliver_status(self, id, promise);
        return promise;
      },
      [self](atom::shutdown) {
        self->quit();
        return atom::ok_v;
      },
  };
}

} // namespace opforge
