#include "apps/control_server.hpp"

#include "actors/library/regressions.hpp"
#include "actors/library/repair.hpp"
#include "actors/library/report.hpp"
#include "actors/store/store.hpp"
#include "apps/actor_query.hpp"
#include "apps/control_client.hpp"
#include "apps/import_views.hpp"
#include "apps/session_views.hpp"
#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/library_messages.hpp"
#include "messages/llm_messages.hpp"
#include "messages/msgpack_codec.hpp"
#include "messages/session_messages.hpp"
#include "messages/wire.hpp"
#include "persistence/keys.hpp"
#include "persistence/model_sets.hpp"

#include <algorithm>
#include <future>
#include <optional>

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace opforge {

namespace {

const wire::unpack_limits request_limits{control_max_request_bytes, 1024, 8};

// Actors answer status queries from memory; this bound only keeps a stuck actor from stalling the
// control socket (clients wait 5 s by default).
constexpr auto actor_query_bound = std::chrono::milliseconds{2000};
// The library reads its kernels from the store behind the sessions' checkpoints; it gets longer,
// still within the clients' default wait of 5 s.
constexpr auto library_query_bound = std::chrono::milliseconds{4500};

nlohmann::json to_json(const store_status& status) {
  auto families = nlohmann::json::object();
  for (auto& f : status.families)
    families[f.family] = {{"estimated_keys", f.estimated_keys},
                          {"estimated_bytes", f.estimated_bytes}};
  return {{"path", status.path},
          {"schema_version", status.schema_version},
          {"batches_written", status.batches_written},
          {"last_error", status.last_error},
          {"write_failure", status.write_failure},
          {"paused_writes", status.paused_writes},
          {"families", families}};
}

nlohmann::json to_json(const device_manager_status& status) {
  return {{"endpoint", status.endpoint},
          {"connected", status.workers},
          {"queued", status.queued},
          {"unserved", status.unserved},
          {"running", status.running},
          {"submitted", status.submitted},
          {"done", status.done},
          {"failed", status.failed},
          {"cancelled", status.cancelled},
          {"refused", status.refused},
          {"lost", status.lost},
          {"requeued", status.requeued},
          {"late_results", status.late_results}};
}

nlohmann::json to_json(const worker_info& w) {
  return {{"worker_id", w.worker_id},
          {"role", to_string(w.role)},
          {"device_kind", w.device_kind},
          {"device_name", w.device_name},
          {"toolchain", w.toolchain},
          {"fingerprint", w.fingerprint},
          {"slots", w.slots},
          {"busy", w.busy},
          {"ms_since_heartbeat", w.ms_since_heartbeat},
          {"host", w.host},
          {"pid", w.pid},
          {"state", to_string(w.state)},
          {"dead_reason", w.dead_reason}};
}

nlohmann::json to_json(const revalidation_status& r) {
  return {{"device_kind", r.device_kind},
          {"fingerprint", r.fingerprint},
          {"toolchain", r.toolchain},
          {"live", r.live},
          {"requested_at_ms", r.requested_at_ms},
          {"owed", r.owed},
          {"running", r.running},
          {"passed", r.passed},
          {"failed", r.failed}};
}

nlohmann::json to_json(const maintenance_status& m) {
  auto toolchains = nlohmann::json::array();
  for (const auto& r : m.toolchains)
    toolchains.push_back(to_json(r));
  return {{"toolchains", toolchains},
          {"regressions", m.regressions},
          {"speed_regressions", m.speed_regressions},
          {"repair_campaigns", m.repair_campaigns}};
}

// A toolchain's conformance: its summary line, then every defect the probes found.
nlohmann::json to_json(const contract::conformance_report& r) {
  auto defects = nlohmann::json::array();
  for (const auto& d : r.defects)
    defects.push_back({{"probe", d.probe},
                       {"primitive", d.primitive},
                       {"dtype", d.dtype},
                       {"expression", d.expression},
                       {"inputs", d.inputs},
                       {"expected", d.expected},
                       {"actual", d.actual},
                       {"known", d.known},
                       {"patch", d.patch},
                       {"workaround", d.workaround},
                       {"reproducer", d.reproducer},
                       {"description", describe_toolchain_defect(d)}});
  return {{"device_kind", r.device_kind},      {"fingerprint", r.fingerprint},
          {"probes_run", r.probes_run},        {"error", r.error},
          {"summary", conformance_summary(r)}, {"defects", defects}};
}

nlohmann::json to_json(const std::vector<contract::conformance_report>& reports) {
  auto out = nlohmann::json::array();
  for (const auto& r : reports)
    out.push_back(to_json(r));
  return out;
}

// An actor's part of `status`: its report, or why there is none.
template <class Status>
nlohmann::json part(const caf::expected<Status>& status) {
  if (!status)
    return {{"error", render(status.error())}};
  return to_json(*status);
}

nlohmann::json to_json(const session_summary& s) {
  return {{"session_id", s.session_id},
          {"op", s.op},
          {"variant", s.variant},
          {"operator", operator_id(s.op, s.variant)},
          {"state", to_string(s.state)},
          {"end_reason", s.end_reason},
          {"dialogs", s.dialogs},
          {"llm_calls", s.llm_calls},
          {"faults", s.faults},
          {"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.completion_tokens},
          {"kernel_key", s.kernel_key},
          {"endpoint", s.endpoint}};
}

nlohmann::json to_json(const endpoint_health& h) {
  return {{"name", h.name},
          {"state", to_string(h.state)},
          {"breaker", h.breaker},
          {"last_error", h.last_error},
          {"failing_since_ms", h.failing_since_ms},
          {"last_error_ms", h.last_error_ms},
          {"outage_after_ms", h.outage_after_ms}};
}

// An endpoint as `status` shows it: its health, its concurrency next to the campaigns' (what
// `concurrency_shortfall` sessions of a campaign wait for), and its load.
nlohmann::json to_json(const endpoint_status& s, int64_t campaign_concurrency) {
  return {{"name", s.name},
          {"model", s.model},
          {"state", to_string(s.health.state)},
          {"breaker", s.breaker},
          {"last_error", s.health.last_error},
          {"last_error_ms", s.health.last_error_ms},
          {"failing_since_ms", s.health.failing_since_ms},
          {"concurrency", s.concurrency},
          {"concurrency_shortfall",
           std::max<int64_t>(0, campaign_concurrency - int64_t{s.concurrency})},
          {"in_flight", s.in_flight},
          {"queued", s.queued},
          {"backing_off", s.backing_off},
          {"retries", s.retries},
          {"requests", s.requests}};
}

nlohmann::json to_json(const campaign_status& c) {
  auto sessions = [](const std::vector<session_summary>& list) {
    auto out = nlohmann::json::array();
    for (const auto& s : list)
      out.push_back(to_json(s));
    return out;
  };
  auto endpoints = nlohmann::json::array();
  for (const auto& e : c.endpoints)
    endpoints.push_back(to_json(e));
  return {{"campaign_id", c.campaign_id},
          {"state", to_string(c.state)},
          {"error", c.error},
          {"endpoint", c.endpoint},
          {"device_kind", c.device_kind},
          {"created_ms", c.created_ms},
          {"ended_ms", c.ended_ms},
          {"operators", c.operators},
          {"waiting", c.waiting},
          {"running", c.running},
          {"succeeded", c.succeeded},
          {"failed", c.failed},
          {"states", c.states},
          {"llm_calls", c.llm_calls},
          {"prompt_tokens", c.prompt_tokens},
          {"completion_tokens", c.completion_tokens},
          {"faults", c.faults},
          {"operator_ids", c.operator_ids},
          {"covered", c.covered},
          {"finished", sessions(c.finished)},
          {"active", sessions(c.active)},
          {"endpoints", endpoints}};
}

nlohmann::json to_json(const contract::toolchain_proof& p) {
  return {{"fingerprint", p.fingerprint},
          {"device_kind", p.device_kind},
          {"toolchain", p.toolchain},
          {"outcome", to_string(p.outcome)},
          {"tests_run", p.tests_run},
          {"tests_passed", p.tests_passed},
          {"validated_at_ms", p.validated_at_ms},
          {"detail", p.detail}};
}

nlohmann::json to_json(const contract::kernel_timing& t) {
  nlohmann::json out{{"fingerprint", t.fingerprint},
                     {"device_kind", t.device_kind},
                     {"dtype", to_string(t.dtype)},
                     {"shape_class", t.shape_class},
                     {"baseline", t.baseline},
                     {"kernel_us", t.kernel_us},
                     {"baseline_us", t.baseline_us},
                     {"speedup", t.speedup},
                     {"noise", t.noise},
                     {"launch_bound", t.launch_bound},
                     {"peak_share", nullptr},
                     {"measured_at_ms", t.measured_at_ms}};
  if (t.peak_share)
    out["peak_share"] = *t.peak_share;
  return out;
}

nlohmann::json to_json(const std::vector<contract::kernel_timing>& timings) {
  auto out = nlohmann::json::array();
  for (const auto& t : timings)
    out.push_back(to_json(t));
  return out;
}

nlohmann::json to_json(const speed_regression& r) {
  auto slower = nlohmann::json::array();
  for (const auto& s : r.slower)
    slower.push_back({{"dtype", to_string(s.after.dtype)},
                      {"shape_class", s.after.shape_class},
                      {"before_us", s.before.kernel_us},
                      {"after_us", s.after.kernel_us},
                      {"before_noise", s.before.noise},
                      {"after_noise", s.after.noise},
                      {"ratio", s.ratio}});
  return {{"operator", operator_id(r.op, r.variant)},
          {"hash", r.hash},
          {"change", r.change},
          {"before", to_json(r.before)},
          {"after", to_json(r.after)},
          {"slower", slower},
          {"served_by", r.served_by}};
}

// A kernel as `kernels` lists it; its source only when it was asked for.
nlohmann::json to_json(const kernel_version& v) {
  const auto& k = v.kernel;
  auto proofs = nlohmann::json::array();
  for (const auto& p : k.proofs)
    proofs.push_back(to_json(p));
  nlohmann::json out{{"operator", operator_id(k.op, k.variant)},
                     {"op", k.op},
                     {"variant", k.variant},
                     {"version", v.version},
                     {"current", v.current},
                     {"device_kind", v.device_kind},
                     {"accepted_at_ms", v.accepted_at_ms},
                     {"hash", k.hash},
                     {"wrapper", k.wrapper},
                     {"dtypes", contract::to_strings(k.dtypes)},
                     {"aten_overloads", k.aten_overloads},
                     {"provenance", k.provenance},
                     {"proofs", proofs},
                     {"timings", to_json(k.timings)}};
  if (!k.source.empty())
    out["source"] = k.source;
  return out;
}

// The fields of a `run` request (messages/PROTOCOL.md); each wrong one is named.
caf::expected<campaign_request> run_request(const wire::map_reader& fields) {
  auto bad = [](const std::string& key, const char* expected) {
    return caf::make_error(errc::request_invalid,
                           "run: '" + key + "' must be " + std::string{expected});
  };
  campaign_request out;
  auto strings = [&](const char* key, std::vector<std::string>& into) -> caf::error {
    auto* value = fields.find(key);
    if (!value || value->type == msgpack::type::NIL)
      return {};
    if (value->type != msgpack::type::ARRAY)
      return bad(key, "a list of strings");
    for (uint32_t i = 0; i < value->via.array.size; ++i) {
      auto& item = value->via.array.ptr[i];
      if (item.type != msgpack::type::STR)
        return bad(key, "a list of strings");
      into.emplace_back(item.via.str.ptr, item.via.str.size);
    }
    return {};
  };
  auto flag = [&](const char* key, bool& into) -> caf::error {
    if (!fields.find(key))
      return {};
    auto value = fields.boolean(key);
    if (!value)
      return bad(key, "true or false");
    into = *value;
    return {};
  };
  auto count = [&](const char* key, uint32_t& into) -> caf::error {
    auto value = fields.integer_or(key, 0);
    if (!value || *value < 0 || *value > 100000)
      return bad(key, "a count from 0 (the daemon's default) to 100000");
    into = static_cast<uint32_t>(*value);
    return {};
  };
  auto tokens = [&](const char* key, uint64_t& into) -> caf::error {
    auto value = fields.integer_or(key, 0);
    if (!value || *value < 0)
      return bad(key, "a token count, 0 for the daemon's default");
    into = static_cast<uint64_t>(*value);
    return {};
  };
  auto text = [&](const char* key, std::string& into) -> caf::error {
    auto value = fields.string_or(key, "");
    if (!value)
      return bad(key, "a string");
    into = *value;
    return {};
  };
  for (auto err : {strings("names", out.names), strings("categories", out.categories),
                   flag("all", out.all), flag("failed", out.failed), strings("dtypes", out.dtypes),
                   text("endpoint", out.endpoint), text("device_kind", out.device_kind),
                   count("concurrency", out.concurrency), count("max_dialogs", out.max_dialogs),
                   count("max_calls_per_dialog", out.max_calls_per_dialog),
                   tokens("max_tokens", out.max_tokens), strings("sample_sets", out.sample_sets)})
    if (err)
      return err;
  return out;
}

// Stores the model sets a `run` request carries (`model_sets`: set -> operator id -> base64
// file, from modelcheck reports), each replacing the set of its name, before the campaign that
// requires them resolves.
caf::error import_model_sets(caf::actor_system& sys, const store_actor& db,
                             const wire::map_reader& fields) {
  auto* value = fields.find("model_sets");
  if (!value || value->type == msgpack::type::NIL)
    return {};
  auto bad = caf::make_error(errc::request_invalid,
                             "run: 'model_sets' must map set names to maps of strings");
  auto sets = wire::map_reader::of(*value);
  if (!sets)
    return bad;
  for (uint32_t i = 0; i < value->via.map.size; ++i) {
    auto& set = value->via.map.ptr[i];
    std::string name{set.key.via.str.ptr, set.key.via.str.size};
    if (set.val.type != msgpack::type::MAP)
      return bad;
    model_set_files files;
    for (uint32_t j = 0; j < set.val.via.map.size; ++j) {
      auto& file = set.val.via.map.ptr[j];
      if (file.key.type != msgpack::type::STR || file.val.type != msgpack::type::STR)
        return bad;
      files.emplace(std::string{file.key.via.str.ptr, file.key.via.str.size},
                    std::string{file.val.via.str.ptr, file.val.via.str.size});
    }
    auto stored =
        ask<std::vector<key_value>>(sys, library_query_bound, db, atom::scan_v, family::meta,
                                    model_set_prefix(name), uint64_t{100000});
    if (!stored)
      return stored.error();
    auto batch = replace_model_set(name, files, *stored);
    if (!batch)
      return batch.error();
    auto written = ask<atom::ok>(sys, library_query_bound, db, atom::write_v, std::move(*batch));
    if (!written)
      return written.error();
    spdlog::info("model set {} imported: {} operators", name, files.size());
  }
  return {};
}

std::string encode(const nlohmann::json& reply) {
  auto bytes = nlohmann::json::to_msgpack(reply);
  return {bytes.begin(), bytes.end()};
}

nlohmann::json failure(const std::string& what) {
  return {{"ok", false}, {"error", what}};
}

// Every request type, as the error for an unknown one lists them: "status, workers, ...".
std::string request_types() {
  std::string out;
  for (auto name : contract::enum_traits<request_type>::names)
    out += (out.empty() ? "" : ", ") + std::string{name};
  return out;
}

} // namespace

caf::expected<std::unique_ptr<control_server>> control_server::start(zmq::context_t& zmq,
                                                                     control_context context) {
  auto endpoint = context.cfg.control.listen;
  std::unique_ptr<control_server> server{new control_server{std::move(context)}};
  server->wakeup_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->wakeup_fd_ < 0)
    return caf::make_error(errc::unspecified, "eventfd for the control thread failed");
  // The thread creates, binds and owns the socket; the bind's outcome comes back through `bound`.
  std::promise<caf::error> bound;
  auto outcome = bound.get_future();
  server->thread_ =
      std::thread{[&zmq, endpoint, srv = server.get(), bound = std::move(bound)]() mutable {
        zmq::socket_t socket{zmq, zmq::socket_type::rep};
        try {
          socket.set(zmq::sockopt::linger, 500);
          // The transport drops the connection of a peer whose request is larger, before
          // allocating it: the unpack limit below would only see it once it was read whole.
          socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(control_max_request_bytes));
          socket.bind(endpoint);
        } catch (const zmq::error_t& e) {
          bound.set_value(address_unusable("control.listen", endpoint, e.what()));
          return;
        }
        // Only the daemon's user may ask it to run or stop anything.
        std::error_code ec;
        if (endpoint.rfind("ipc://", 0) == 0)
          std::filesystem::permissions(
              endpoint.substr(6),
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write, ec);
        if (ec) {
          bound.set_value(address_unusable("control.listen", endpoint,
                                           "cannot restrict it to its owner: " + ec.message()));
          return;
        }
        bound.set_value({});
        srv->serve(socket);
      }};
  if (auto err = outcome.get()) {
    server->thread_.join();
    return err;
  }
  return server;
}

control_server::control_server(control_context context) : context_{std::move(context)} {}

control_server::~control_server() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wakeup_fd_, &one, sizeof one);
    thread_.join();
  }
  if (wakeup_fd_ >= 0)
    ::close(wakeup_fd_);
}

void control_server::serve(zmq::socket_t& socket) {
  zmq_pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                            {nullptr, wakeup_fd_, ZMQ_POLLIN, 0}};
  for (;;) {
    try {
      zmq::poll(items, 2, std::chrono::milliseconds{-1});
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR)
        continue;
      spdlog::error("control socket: poll failed: {}", e.what());
      return;
    }
    if (items[1].revents & ZMQ_POLLIN)
      return;
    if (!(items[0].revents & ZMQ_POLLIN))
      continue;
    // A REP socket must answer every request exactly once, whatever it held.
    zmq::message_t request;
    if (!socket.recv(request, zmq::recv_flags::dontwait))
      continue;
    answer_type out;
    if (request.more()) {
      zmq::message_t extra;
      while (socket.get(zmq::sockopt::rcvmore) && socket.recv(extra))
        ;
      out.reply = encode(failure("malformed request: a request is exactly one frame"));
    } else {
      out = answer(request.to_string_view());
    }
    try {
      socket.send(zmq::buffer(out.reply), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      spdlog::warn("control socket: reply not sent: {}", e.what());
    }
    if (out.shutdown)
      context_.request_shutdown();
  }
}

control_server::answer_type control_server::answer(std::string_view request) {
  auto malformed = [](const caf::error& err) {
    return answer_type{encode(failure("malformed request: " + render(err)))};
  };
  auto handle = wire::unpack(request, request_limits);
  if (!handle)
    return malformed(handle.error());
  auto fields = wire::map_reader::of(handle->get());
  if (!fields)
    return malformed(fields.error());
  auto version = fields->integer("v");
  if (!version)
    return malformed(version.error());
  if (*version != wire::protocol_version)
    return {encode(failure("protocol version " + std::to_string(*version) +
                           " is not supported; this daemon speaks " +
                           std::to_string(wire::protocol_version)))};
  auto type = fields->string("type");
  if (!type)
    return malformed(type.error());
  // No default: -Wswitch names a type added to request_type and not handled here.
  auto known = from_string<request_type>(*type);
  if (known)
    switch (*known) {
    case request_type::status:
      return {encode(status())};
    case request_type::workers:
      return {encode(workers())};
    case request_type::run:
    case request_type::campaign:
    case request_type::campaigns:
    case request_type::cancel:
      return {encode(campaigns(*known, *fields))};
    case request_type::sessions: {
      auto campaign = fields->string_or("campaign", "");
      auto state = fields->string_or("state", "");
      auto after = fields->string_or("after", "");
      if (!campaign || !state || !after)
        return malformed(!campaign ? campaign.error() : !state ? state.error() : after.error());
      return {encode(list_sessions(*context_.system, context_.store, {*campaign, *state, *after}))};
    }
    case request_type::show: {
      auto op = fields->string("op");
      auto campaign = fields->string_or("campaign", "");
      if (!op || !campaign)
        return malformed(op ? campaign.error() : op.error());
      return {encode(show_session(*context_.system, context_.store, *op, *campaign))};
    }
    case request_type::kernels:
      return {encode(kernels(*fields))};
    case request_type::regressions:
      return {encode(regressions())};
    case request_type::revalidate:
      return {encode(revalidate(*fields))};
    case request_type::repair:
      return {encode(repair(*fields))};
    case request_type::export_:
      return {encode(bundle(*fields))};
    case request_type::import:
    case request_type::import_status:
    case request_type::imports:
      return {encode(import_reply(*context_.system, context_.importer, *known, *fields))};
    case request_type::report:
      return {encode(report(*fields))};
    case request_type::shutdown:
      spdlog::info("shutdown requested over the control socket");
      return {encode({{"ok", true}}), true};
    }
  return {encode(failure("unknown request type '" + *type +
                         "' (this daemon knows: " + request_types() + ")"))};
}

nlohmann::json control_server::status() const {
  using namespace std::chrono;
  auto uptime = duration<double>{steady_clock::now() - context_.started}.count();
  nlohmann::json out{
      {"ok", true},
      {"version", context_.version},
      {"pid", ::getpid()},
      {"uptime_s", uptime},
      {"data_dir", context_.cfg.data_dir.string()},
      {"control", context_.cfg.control.listen},
      {"metrics", context_.metrics_address},
      {"store", part(ask<store_status>(*context_.system, actor_query_bound, context_.store,
                                       atom::status_v))},
      {"workers", part(ask<device_manager_status>(*context_.system, actor_query_bound,
                                                  context_.devices, atom::status_v))}};
  // Per device kind and fingerprint, what the toolchain's conformance probes found.
  out["toolchains"] = part(ask<std::vector<contract::conformance_report>>(
      *context_.system, library_query_bound, context_.library, atom::conformance_v));
  auto campaign_concurrency = context_.cfg.campaigns.concurrency;
  auto endpoints = nlohmann::json::array();
  for (const auto& [name, actor] : context_.llm_endpoints) {
    auto s = ask<endpoint_status>(*context_.system, actor_query_bound, actor, atom::status_v);
    endpoints.push_back(s ? to_json(*s, campaign_concurrency)
                          : nlohmann::json{{"name", name}, {"error", render(s.error())}});
  }
  out["llm"] = {{"campaign_concurrency", campaign_concurrency}, {"endpoints", endpoints}};
  if (context_.maintenance)
    out["maintenance"] = part(ask<maintenance_status>(*context_.system, actor_query_bound,
                                                      context_.maintenance, atom::status_v));
  return out;
}

nlohmann::json control_server::workers() const {
  auto list = ask<std::vector<worker_info>>(*context_.system, actor_query_bound, context_.devices,
                                            atom::workers_v);
  if (!list)
    return failure("the device manager did not answer: " + render(list.error()));
  auto out = nlohmann::json::array();
  for (auto& w : *list)
    out.push_back(to_json(w));
  return {{"ok", true}, {"workers", out}};
}

} // namespace opforge

namespace opforge {

nlohmann::json control_server::campaigns(request_type type, const wire::map_reader& fields) const {
  auto& sys = *context_.system;
  const auto& manager = context_.campaigns;
  // A campaign that goes on carries `unserved_jobs`: the jobs queued for its device kind while no
  // live worker of that kind is connected (the device manager's `unserved`). Without it, one
  // waiting for a worker that never comes would only look slow. Absent when the device manager
  // does not answer.
  auto shown = [&](std::vector<campaign_status> list) {
    std::optional<device_manager_status> devices;
    auto out = nlohmann::json::array();
    for (const auto& c : list) {
      auto json = to_json(c);
      if (c.state == contract::campaign_state::resolving ||
          c.state == contract::campaign_state::running) {
        if (!devices)
          if (auto asked = ask<device_manager_status>(sys, actor_query_bound, context_.devices,
                                                      atom::status_v))
            devices = std::move(*asked);
        if (devices) {
          auto unserved = devices->unserved.find(c.device_kind);
          json["unserved_jobs"] = unserved == devices->unserved.end() ? 0 : unserved->second;
        }
      }
      out.push_back(std::move(json));
    }
    return out;
  };
  auto reply = [&](const caf::expected<campaign_status>& status) {
    if (!status)
      return failure(message(status.error()));
    return nlohmann::json{{"ok", true}, {"campaign", shown({*status})[0]}};
  };
  if (type == request_type::run) {
    auto request = run_request(fields);
    if (!request)
      return failure(message(request.error()));
    if (auto err = import_model_sets(sys, context_.store, fields))
      return failure(message(err));
    return reply(
        ask<campaign_status>(sys, actor_query_bound, manager, atom::submit_v, std::move(*request)));
  }
  if (type == request_type::campaigns) {
    auto list = ask<std::vector<campaign_status>>(sys, actor_query_bound, manager, atom::list_v);
    if (!list)
      return failure(message(list.error()));
    return {{"ok", true}, {"campaigns", shown(std::move(*list))}};
  }
  auto id = fields.string_or("id", "");
  if (!id)
    return failure(message(id.error()));
  if (type == request_type::cancel) {
    if (id->empty())
      return failure("cancel: name the campaign ('id')");
    return reply(ask<campaign_status>(sys, actor_query_bound, manager, atom::cancel_v, *id));
  }
  return reply(ask<campaign_status>(sys, actor_query_bound, manager, atom::status_v, *id));
}

nlohmann::json control_server::kernels(const wire::map_reader& fields) const {
  auto op = fields.string_or("op", "");
  if (!op)
    return failure(message(op.error()));
  bool with_sources = false;
  if (fields.find("source")) {
    auto flag = fields.boolean("source");
    if (!flag)
      return failure(message(flag.error()));
    with_sources = *flag;
  }
  auto list = ask<std::vector<kernel_version>>(*context_.system, library_query_bound,
                                               context_.library, atom::list_v, *op, with_sources);
  if (!list)
    return failure(message(list.error()));
  auto out = nlohmann::json::array();
  for (const auto& v : *list)
    out.push_back(to_json(v));
  return {{"ok", true}, {"kernels", out}};
}

double control_server::speed_threshold() const {
  return static_cast<double>(context_.cfg.maintenance.speed_regression_percent) / 100;
}

nlohmann::json control_server::regressions() const {
  auto list = ask<std::vector<kernel_version>>(
      *context_.system, library_query_bound, context_.library, atom::list_v, std::string{}, false);
  if (!list)
    return failure(message(list.error()));
  auto out = nlohmann::json::array();
  for (const auto& r : find_regressions(*list))
    out.push_back({{"operator", operator_id(r.op, r.variant)},
                   {"hash", r.hash},
                   {"change", r.change},
                   {"before", to_json(r.before)},
                   {"after", to_json(r.after)},
                   {"served_by", r.served_by}});
  auto slower = nlohmann::json::array();
  for (const auto& r : find_speed_regressions(*list, speed_threshold()))
    slower.push_back(to_json(r));
  return {{"ok", true}, {"regressions", out}, {"speed_regressions", slower}};
}

nlohmann::json control_server::revalidate(const wire::map_reader& fields) const {
  auto device_kind = fields.string_or("device_kind", "");
  auto fingerprint = fields.string_or("fingerprint", "");
  if (!device_kind || !fingerprint)
    return failure(message(!device_kind ? device_kind.error() : fingerprint.error()));
  if (!context_.maintenance)
    return failure("this daemon runs no maintenance actor");
  // It asks the device manager, writes the request and lists the library before it answers.
  auto owed = ask<maintenance_status>(*context_.system, library_query_bound, context_.maintenance,
                                      atom::revalidate_v, *device_kind, *fingerprint);
  if (!owed)
    return failure(message(owed.error()));
  auto out = to_json(*owed);
  out["ok"] = true;
  return out;
}

nlohmann::json control_server::repair(const wire::map_reader& fields) const {
  auto fingerprint = fields.string_or("fingerprint", "");
  auto endpoint = fields.string_or("endpoint", "");
  if (!fingerprint || !endpoint)
    return failure(message(!fingerprint ? fingerprint.error() : endpoint.error()));
  // Sources too: each session starts from the regressed kernel.
  auto list = ask<std::vector<kernel_version>>(*context_.system, library_query_bound,
                                               context_.library, atom::list_v, std::string{}, true);
  if (!list)
    return failure(message(list.error()));
  auto regressions = find_regressions(*list);
  auto slower = find_speed_regressions(*list, speed_threshold());
  if (!fingerprint->empty()) {
    auto elsewhere = [&](const auto& r) { return r.after.fingerprint != *fingerprint; };
    std::erase_if(regressions, elsewhere);
    std::erase_if(slower, elsewhere);
  }
  auto out = nlohmann::json::array();
  for (auto& request : repair_campaigns(regressions, *list, slower)) {
    request.endpoint = *endpoint;
    auto seeded = nlohmann::json::array();
    for (const auto& seed : request.seeds)
      seeded.push_back(operator_id(seed.op, seed.variant));
    auto pinned = request.fingerprint;
    auto started = ask<campaign_status>(*context_.system, actor_query_bound, context_.campaigns,
                                        atom::submit_v, std::move(request));
    if (!started) {
      std::string submitted;
      for (const auto& c : out)
        submitted += " " + c.value("campaign_id", std::string{});
      return failure("the repair campaign for toolchain " + pinned +
                     " did not start: " + message(started.error()) +
                     (submitted.empty() ? "" : " (started before it:" + submitted + ")"));
    }
    auto c = to_json(*started);
    c["fingerprint"] = pinned;
    c["seeded"] = seeded;
    out.push_back(std::move(c));
  }
  return {{"ok", true},
          {"regressions", regressions.size()},
          {"speed_regressions", slower.size()},
          {"campaigns", out}};
}

nlohmann::json control_server::bundle(const wire::map_reader& fields) const {
  auto device_kind = fields.string_or("device_kind", "");
  auto fingerprint = fields.string_or("fingerprint", "");
  if (!device_kind || !fingerprint)
    return failure(message(!device_kind ? device_kind.error() : fingerprint.error()));
  auto kind = device_kind->empty() ? context_.cfg.campaigns.device_kind : *device_kind;
  auto chosen = ask<contract::library_bundle>(*context_.system, library_query_bound,
                                              context_.library, atom::bundle_v, kind, *fingerprint);
  if (!chosen)
    return failure(message(chosen.error()));
  // The bundle travels as the contract's own msgpack bytes, which the exporter reads as they are.
  auto bytes = contract::codec::to_bytes(*chosen);
  nlohmann::json::binary_t::container_type raw(bytes.begin(), bytes.end());
  return {{"ok", true},
          {"device_kind", kind},
          {"fingerprint", *fingerprint},
          {"kernels", chosen->kernels.size()},
          {"bundle", nlohmann::json::binary(std::move(raw))}};
}

namespace {

// A report reads every record of the campaigns it covers: pages keep each store reply small.
constexpr uint64_t report_page = 512;
constexpr auto report_read_bound = std::chrono::milliseconds{4000};

// Every value under `prefix` of a family, decoded by `decode`.
template <class Record, class Decode>
caf::expected<std::vector<Record>> read_all(caf::actor_system& sys, const store_actor& store,
                                            family f, const std::string& prefix, Decode decode) {
  std::vector<Record> out;
  std::string after;
  for (;;) {
    auto page = ask<std::vector<key_value>>(sys, report_read_bound, store, atom::scan_v, f, prefix,
                                            after, report_page);
    if (!page)
      return std::move(page.error());
    for (const auto& kv : *page) {
      auto record = decode(kv.value);
      if (!record)
        return std::move(record.error());
      out.push_back(std::move(*record));
    }
    if (page->size() < report_page)
      return out;
    after = page->back().key;
  }
}

nlohmann::json to_json(const std::vector<coverage_row>& rows) {
  auto out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"name", r.name}, {"operators", r.operators}, {"covered", r.covered}});
  return out;
}

nlohmann::json to_json(const campaign_report& r) {
  auto curves = nlohmann::json::array();
  for (const auto& c : r.curves) {
    auto points = nlohmann::json::array();
    for (const auto& p : c.points)
      points.push_back({{"calls", p.calls}, {"covered", p.covered}});
    curves.push_back({{"name", c.name}, {"operators", c.operators}, {"points", points}});
  }
  auto passed = nlohmann::json::array();
  for (const auto& p : r.passed)
    passed.push_back({{"campaign", p.campaign_id},
                      {"op", p.op},
                      {"calls", p.calls},
                      {"prompt_tokens", p.prompt_tokens},
                      {"completion_tokens", p.completion_tokens}});
  auto groups = [](const std::vector<toolchain_regressions>& list) {
    auto out = nlohmann::json::array();
    for (const auto& t : list)
      out.push_back({{"device_kind", t.device_kind},
                     {"fingerprint", t.fingerprint},
                     {"change", t.change},
                     {"kernels", t.kernels},
                     {"operators", t.operators}});
    return out;
  };
  auto speedups = nlohmann::json::array();
  for (const auto& s : r.speedups)
    speedups.push_back({{"device_kind", s.device_kind},
                        {"category", s.category},
                        {"kernels", s.kernels},
                        {"geomean_speedup", s.geomean_speedup},
                        {"slowest", s.slowest},
                        {"fastest", s.fastest},
                        {"slower_than_baseline", s.slower_than_baseline}});
  auto roofline = nlohmann::json::array();
  for (const auto& h : r.roofline)
    roofline.push_back({{"device_kind", h.device_kind},
                        {"edges", h.edges},
                        {"counts", h.counts},
                        {"launch_bound", h.launch_bound},
                        {"without_peak", h.without_peak}});
  auto campaigns = nlohmann::json::array();
  for (const auto& c : r.campaigns)
    campaigns.push_back({{"campaign", c.campaign_id},
                         {"state", c.state},
                         {"column", c.column},
                         {"device_kind", c.device_kind},
                         {"dtypes", c.dtypes},
                         {"operators", c.operators},
                         {"created_ms", c.created_ms},
                         {"error", c.error}});
  auto imports = nlohmann::json::array();
  for (const auto& i : r.imports)
    imports.push_back(import_json(i, false));
  auto failed = nlohmann::json::array();
  for (const auto& f : r.failed)
    failed.push_back({{"op", f.op},
                      {"campaign", f.campaign_id},
                      {"reason", f.reason},
                      {"end_reason", f.end_reason}});
  return {{"generated_ms", r.generated_ms},
          {"campaigns", campaigns},
          {"columns", r.columns},
          {"by_category", to_json(r.by_category)},
          {"by_dtype", to_json(r.by_dtype)},
          {"curves", curves},
          {"failures", r.failures},
          {"failed", failed},
          {"passed", passed},
          {"regressions", groups(r.regressions)},
          {"speed_regressions", groups(r.speed_regressions)},
          {"speedups", speedups},
          {"roofline", roofline},
          {"toolchain_defects", to_json(r.conformance)},
          {"imports", imports}};
}

} // namespace

nlohmann::json control_server::report(const wire::map_reader& fields) const {
  auto id = fields.string_or("campaign", "");
  if (!id)
    return failure(message(id.error()));
  auto& sys = *context_.system;
  auto campaigns =
      read_all<stored_campaign>(sys, context_.store, family::campaigns, "",
                                [](const std::string& v) { return decode_campaign(v); });
  if (!campaigns)
    return failure("report: campaigns unreadable: " + message(campaigns.error()));
  if (!id->empty()) {
    std::erase_if(*campaigns, [&](const stored_campaign& c) { return c.spec.campaign_id != *id; });
    if (campaigns->empty())
      return failure("report: no campaign '" + *id + "'");
  }
  std::vector<session_record> sessions;
  for (const auto& c : *campaigns) {
    auto more = read_all<session_record>(sys, context_.store, family::sessions,
                                         session_key(c.spec.campaign_id, ""),
                                         [](const std::string& v) { return decode_record(v); });
    if (!more)
      return failure("report: sessions of " + c.spec.campaign_id +
                     " unreadable: " + message(more.error()));
    std::move(more->begin(), more->end(), std::back_inserter(sessions));
  }
  auto kernels = ask<std::vector<kernel_version>>(sys, library_query_bound, context_.library,
                                                  atom::list_v, std::string{}, false);
  if (!kernels)
    return failure("report: the library did not list its kernels: " + message(kernels.error()));
  auto built = build_report(*campaigns, sessions);
  built.generated_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  built.regressions = per_toolchain(find_regressions(*kernels));
  built.speed_regressions = per_toolchain(find_speed_regressions(*kernels, speed_threshold()));
  add_speed(built, *kernels, *campaigns);
  auto conformance = ask<std::vector<contract::conformance_report>>(
      sys, library_query_bound, context_.library, atom::conformance_v);
  if (!conformance)
    return failure("report: the library did not list the toolchains' conformance: " +
                   message(conformance.error()));
  built.conformance = std::move(*conformance);
  auto imports =
      ask<std::vector<import_status>>(sys, library_query_bound, context_.importer, atom::list_v);
  if (!imports)
    return failure("report: the importer did not list the imports: " + message(imports.error()));
  built.imports = std::move(*imports);
  return {{"ok", true}, {"report", to_json(built)}, {"html", render_html(built)}};
}

} // namespace opforge
