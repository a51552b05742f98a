#include "actors/fleet/device_manager.hpp"

#include "actors/fleet/device.hpp"
#include "messages/device_kind.hpp"
#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"

#include <algorithm>

#include <caf/send.hpp>

#include <spdlog/spdlog.h>

namespace opforge {

namespace {

constexpr size_t departed_kept = 32;

// "t-17 (test exp)": the job kind, and the operator when the payload names one.
std::string label_of(const device_job& job) {
  std::string label = job.id + " (" + to_string(job.kind);
  if (auto handle = wire::unpack(job.payload))
    if (auto map = wire::map_reader::of(handle->get()))
      if (auto op = map->string_or("op", ""); op && !op->empty())
        label += " " + *op;
  return label + ")";
}

// The text an actor put into its exit reason, e.g. "missed 3 heartbeats".
std::string reason_text(const caf::error& err) {
  auto& context = err.context();
  if (err.category() == caf::atom("opforge") && context.size() == 1 &&
      context.match_element<std::string>(0))
    return context.get_as<std::string>(0);
  return render(err);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (auto& item : items)
    out += (out.empty() ? "" : ", ") + item;
  return out;
}

// The job kinds each role may serve: a lint worker must not claim the tests of a device.
const std::map<contract::worker_role, std::set<contract::job_kind>> role_jobs{
    {contract::worker_role::device,
     {contract::job_kind::test, contract::job_kind::catalog, contract::job_kind::benchmark,
      contract::job_kind::backend}},
    {contract::worker_role::lint, {contract::job_kind::lint}}};

// Longest worker id, device name, host, fingerprint or toolchain entry a hello may carry: they are
// logged, listed and kept for every worker.
constexpr size_t max_text = 256;
constexpr size_t max_toolchain_entries = 32;

bool serves(const wire::hello& worker, const device_job& job) {
  return std::find(worker.jobs.begin(), worker.jobs.end(), job.kind) != worker.jobs.end() &&
         (worker.role == contract::worker_role::lint || job.device_kind.empty() ||
          job.device_kind == worker.device_kind) &&
         (job.fingerprint.empty() || job.fingerprint == worker.fingerprint) &&
         std::find(job.avoid_hosts.begin(), job.avoid_hosts.end(), worker.host) ==
             job.avoid_hosts.end();
}

// A live worker is busy while the daemon has jobs running there.
contract::worker_state live_state(int64_t held) {
  return held > 0 ? contract::worker_state::busy : contract::worker_state::idle;
}

} // namespace

device_manager_state::~device_manager_state() {
  // Devices are monitored, not linked (a dead worker must not take the manager down), so they
  // end here; a manager that quit without `shutdown` also stops its I/O thread here.
  for (auto& [identity, worker] : workers_)
    caf::anon_send_exit(worker.device, caf::exit_reason::user_shutdown);
  if (outbox_)
    outbox_->close();
}

void device_manager_state::init(device_manager_config config, std::shared_ptr<metrics> metrics,
                                std::shared_ptr<worker_outbox> outbox) {
  config_ = std::move(config);
  metrics_ = std::move(metrics);
  outbox_ = std::move(outbox);
}

std::vector<uint64_t> dispatch_order(std::vector<queued_job> queue,
                                     int64_t background_max_wait_ms) {
  auto rank = [background_max_wait_ms](const queued_job& job) {
    if (!job.background)
      return 1;
    return job.waited_ms >= background_max_wait_ms ? 0 : 2;
  };
  std::stable_sort(queue.begin(), queue.end(), [&](const queued_job& a, const queued_job& b) {
    return std::pair{rank(a), a.seq} < std::pair{rank(b), b.seq};
  });
  std::vector<uint64_t> order;
  order.reserve(queue.size());
  for (const auto& job : queue)
    order.push_back(job.seq);
  return order;
}

caf::actor_clock::time_point device_manager_state::now() const {
  return self_->clock().now();
}

// -- requests from actors -------------------------------------------------------------------------

caf::result<device_job_result> device_manager_state::submit(device_job job) {
  auto invalid = [&](const std::string& what) {
    return caf::make_error(errc::request_invalid, "device job '" + job.id + "': " + what);
  };
  if (job.id.empty())
    return invalid("the id is empty");
  if (job.deadline_ms <= 0)
    return invalid("deadline_ms must be positive, got " + std::to_string(job.deadline_ms));
  if (jobs_.count(job.id))
    return invalid("a job with this id is already queued or running");
  if (auto err = wire::check_payload(job.payload, config_.max_frame_bytes))
    return invalid(reason_text(err));
  auto seq = ++submissions_;
  auto label = label_of(job);
  auto promise = self_->make_response_promise<device_job_result>();
  auto id = job.id;
  jobs_.emplace(id, job_entry{.job = std::move(job),
                              .label = std::move(label),
                              .promise = promise,
                              .seq = seq,
                              .queued_at = now()});
  queue_.emplace(seq, id);
  ++totals_.submitted;
  dispatch();
  return promise;
}

void device_manager_state::cancel(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.cancelled)
    return;
  auto& job = it->second;
  job.promise.deliver(caf::make_error(errc::cancelled, "job " + job.label + " was cancelled"));
  metrics_->jobs(to_string(job.job.kind), to_string(contract::job_status::cancelled)).Increment();
  ++totals_.cancelled;
  spdlog::info("device job {} cancelled", job.label);
  if (job.worker.empty()) {
    queue_.erase(job.seq);
    jobs_.erase(it);
    update_gauges();
    return;
  }
  // The slot stays taken until the worker answers (or is declared dead): the candidate may
  // still be running there.
  job.cancelled = true;
  self_->send(workers_.at(job.worker).device, atom::cancel_v, job_id);
}

device_manager_status device_manager_state::status() const {
  auto status = totals_;
  status.endpoint = outbox_->endpoint();
  status.workers = worker_counts();
  status.queued = static_cast<int64_t>(queue_.size());
  // Lint jobs go to lint workers, which have no device kind; a job that names no kind takes any
  // device worker.
  for (const auto& [seq, id] : queue_) {
    const auto& job = jobs_.at(id).job;
    if (job.kind == contract::job_kind::lint)
      continue;
    auto of_its_kind = [&](const auto& entry) {
      const auto& hello = entry.second.hello;
      return hello.role != contract::worker_role::lint &&
             (job.device_kind.empty() || job.device_kind == hello.device_kind);
    };
    if (std::none_of(workers_.begin(), workers_.end(), of_its_kind))
      ++status.unserved[job.device_kind];
  }
  status.running = static_cast<int64_t>(jobs_.size() - queue_.size());
  return status;
}

std::vector<worker_info> device_manager_state::workers() const {
  std::vector<worker_info> out;
  for (auto& [identity, worker] : workers_)
    out.push_back(describe(worker));
  for (auto& dead : departed_) {
    out.push_back(dead.info);
    out.back().ms_since_heartbeat =
        std::chrono::duration_cast<std::chrono::milliseconds>(now() - dead.last_seen).count();
  }
  return out;
}

void device_manager_state::shutdown() {
  spdlog::info("device manager shutting down: {} workers, {} unfinished jobs", workers_.size(),
               jobs_.size());
  for (auto& [identity, worker] : workers_) {
    outbox_->send(identity, wire::encode(wire::goodbye{"daemon shutting down"}));
    self_->send_exit(worker.device, caf::exit_reason::user_shutdown);
  }
  for (auto& [id, job] : jobs_)
    if (!job.cancelled)
      job.promise.deliver(
          caf::make_error(errc::cancelled, "job " + job.label + ": the daemon shut down"));
  jobs_.clear();
  queue_.clear();
  workers_.clear();
  departed_.clear();
  update_gauges();
  outbox_->close();
}

// -- frames from workers --------------------------------------------------------------------------

device_manager_state::worker_map::iterator
device_manager_state::known(const std::string& identity) {
  auto it = workers_.find(identity);
  if (it == workers_.end()) {
    spdlog::debug("frame from unregistered worker {}: asking it to say hello",
                  wire::printable_identity(identity));
    outbox_->send(identity, wire::encode(wire::hello_required{}));
  }
  return it;
}

void device_manager_state::alive(worker_entry& worker) {
  worker.last_seen = now();
  self_->send(worker.device, atom::heartbeat_v);
}

// Why `hello` cannot be accepted, if it cannot; caps its slots at the configured maximum.
std::optional<std::string> device_manager_state::invalid_hello(wire::hello& hello) const {
  // The frame decoder took only roles and job kinds of the contract.
  auto lint = hello.role == contract::worker_role::lint;
  if (lint ? hello.device_kind != no_device_kind
           : hello.device_kind == no_device_kind || !is_device_kind(hello.device_kind))
    return "device kind '" + hello.device_kind.substr(0, max_text) + "' is not " +
           (lint ? std::string{no_device_kind}
                 : "a device kind (" + std::string{device_kind_rule} + ")");
  if (hello.jobs.empty())
    return std::string{"it serves no job kinds"};
  for (auto kind : hello.jobs)
    if (!role_jobs.at(hello.role).count(kind))
      return "a " + to_string(hello.role) + " worker cannot serve '" + to_string(kind) + "' jobs";
  if (hello.slots < 1)
    return "slots must be >= 1, got " + std::to_string(hello.slots);
  for (auto* text : {&hello.worker_id, &hello.device_name, &hello.host, &hello.fingerprint})
    if (text->size() > max_text)
      return "a name is longer than " + std::to_string(max_text) + " bytes";
  if (hello.toolchain.size() > max_toolchain_entries)
    return "the toolchain has more than " + std::to_string(max_toolchain_entries) + " entries";
  for (auto& [key, value] : hello.toolchain)
    if (key.size() > max_text || value.size() > max_text)
      return "a toolchain entry is longer than " + std::to_string(max_text) + " bytes";
  if (hello.slots > config_.max_slots) {
    spdlog::warn("worker {} claims {} slots; it gets {} (workers.max_slots)", hello.worker_id,
                 hello.slots, config_.max_slots);
    hello.slots = config_.max_slots;
  }
  return std::nullopt;
}

void device_manager_state::on_hello(const std::string& identity, wire::hello hello) {
  if (workers_.count(identity))
    retire(identity, departure::reconnect, "reconnected");
  if (auto why = invalid_hello(hello)) {
    spdlog::warn("hello of worker {} refused: {}", wire::printable_identity(identity), *why);
    ++totals_.refused;
    outbox_->send(identity, wire::encode(wire::goodbye{"hello refused: " + *why}));
    return;
  }
  std::erase_if(departed_, [&](const departed_worker& dead) {
    return dead.info.worker_id == hello.worker_id;
  });
  auto device =
      self_->spawn(opforge::device, identity, outbox_, config_.heartbeat, config_.liveness);
  self_->monitor(device);
  spdlog::info("worker {} registered: {} {} ({}), {} slots, jobs [{}], toolchain {}",
               hello.worker_id, to_string(hello.role), hello.device_kind, hello.device_name,
               hello.slots, join(contract::to_strings(hello.jobs)), hello.fingerprint);
  if (hello.conformance)
    keep_conformance(*hello.conformance, hello.worker_id);
  workers_.emplace(identity, worker_entry{.hello = std::move(hello),
                                          .device = device,
                                          .registration = ++registrations_,
                                          .last_seen = now()});
  dispatch();
}

void device_manager_state::keep_conformance(const contract::conformance_report& report,
                                            const std::string& worker_id) {
  if (!config_.conformance)
    return;
  // Every reconnect brings the report again; the store replaces it, so that is harmless.
  self_->request(config_.conformance, caf::infinite, atom::conformance_v, report)
      .then([](atom::ok) {},
            [worker_id](const caf::error& err) {
              spdlog::error("the conformance report of worker {} was not kept: {}", worker_id,
                            render(err));
            });
}

void device_manager_state::on_heartbeat(const std::string& identity,
                                        const wire::worker_heartbeat& heartbeat) {
  auto it = known(identity);
  if (it == workers_.end())
    return;
  auto& worker = it->second;
  alive(worker);
  // A heartbeat may cross a job or a result on the wire, so one short count means nothing; a
  // worker that keeps reporting fewer jobs than it holds has lost them, or never ran them, and
  // would otherwise keep them until their deadlines.
  auto given = static_cast<int64_t>(worker.jobs.size());
  worker.short_beats = heartbeat.busy < given ? worker.short_beats + 1 : 0;
  if (worker.short_beats >= config_.liveness)
    retire(identity, departure::death,
           "reported " + std::to_string(heartbeat.busy) + " of its " + std::to_string(given) +
               " jobs for " + std::to_string(worker.short_beats) + " heartbeats");
}

void device_manager_state::on_result(const std::string& identity, wire::result result) {
  auto worker = known(identity);
  if (worker != workers_.end())
    alive(worker->second);
  if (worker != workers_.end() && worker->second.overdue.erase(result.job_id))
    dispatch(); // the slot it held past the deadline is free again
  auto it = jobs_.find(result.job_id);
  if (worker == workers_.end() || it == jobs_.end() || it->second.worker != identity) {
    // The job was requeued when this worker was declared dead, or already answered: delivering
    // it now could answer a job twice.
    spdlog::warn("ignoring a late result for job {} from worker {}", result.job_id,
                 wire::printable_identity(identity));
    metrics_->late_results().Increment();
    ++totals_.late_results;
    return;
  }
  auto& job = it->second;
  worker->second.jobs.erase(result.job_id);
  if (!job.cancelled) {
    auto latency = std::chrono::duration<double>(now() - job.dispatched_at).count();
    metrics_->job_latency(to_string(job.job.kind)).Observe(latency);
    metrics_->jobs(to_string(job.job.kind), to_string(result.status)).Increment();
    ++(result.status == contract::job_status::done     ? totals_.done
       : result.status == contract::job_status::failed ? totals_.failed
                                                       : totals_.cancelled);
    if (result.status == contract::job_status::failed)
      spdlog::warn("device job {} failed on worker {}: {}", job.label,
                   worker->second.hello.worker_id, result.error);
    job.promise.deliver(device_job_result{.job_id = result.job_id,
                                          .status = result.status,
                                          .payload = std::move(result.payload),
                                          .error = std::move(result.error),
                                          .worker_id = worker->second.hello.worker_id,
                                          .fingerprint = worker->second.hello.fingerprint,
                                          .elapsed_ms = result.elapsed_ms,
                                          .attempt = job.attempt,
                                          .host = worker->second.hello.host,
                                          .toolchain = worker->second.hello.toolchain});
  }
  jobs_.erase(it);
  dispatch();
}

void device_manager_state::on_goodbye(const std::string& identity, const wire::goodbye& goodbye) {
  if (known(identity) != workers_.end())
    retire(identity, departure::goodbye, "said goodbye: " + goodbye.reason);
}

void device_manager_state::on_disconnected(const std::string& identity, const std::string& reason) {
  if (workers_.count(identity))
    retire(identity, departure::death, reason);
}

// The worker keeps heartbeating but holds the job past its deadline: the job goes to another
// worker, and the slot stays taken until this one lets go, so a worker that never answers ends up
// with no slots rather than with every job.
void device_manager_state::on_deadline(const std::string& job_id, uint64_t dispatch_number) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.dispatch != dispatch_number || it->second.worker.empty())
    return;
  auto& worker = workers_.at(it->second.worker);
  auto budget = it->second.job.deadline_ms + config_.liveness * config_.heartbeat.count();
  spdlog::warn("worker {} held job {} past its deadline ({} ms); taking it back",
               worker.hello.worker_id, it->second.label, budget);
  worker.jobs.erase(job_id);
  worker.overdue.insert(job_id);
  self_->send(worker.device, atom::cancel_v, job_id);
  requeue(job_id, requeue_reason::deadline,
          worker.hello.worker_id + " (held it past the deadline of " + std::to_string(budget) +
              " ms)");
  dispatch();
}

void device_manager_state::on_down(const caf::down_msg& msg) {
  // Devices the manager retired itself are no longer in the registry: their DOWN says nothing new.
  auto it = std::find_if(workers_.begin(), workers_.end(), [&](const auto& entry) {
    return entry.second.device.address() == msg.source;
  });
  if (it != workers_.end())
    retire(it->first, departure::death, reason_text(msg.reason));
}

// -- registry and queue ---------------------------------------------------------------------------

void device_manager_state::retire(const std::string& identity, departure why,
                                  const std::string& reason) {
  auto it = workers_.find(identity);
  if (it == workers_.end())
    return;
  auto worker = std::move(it->second);
  workers_.erase(it);
  self_->send_exit(worker.device, caf::exit_reason::user_shutdown);
  auto& id = worker.hello.worker_id;
  if (why == departure::goodbye)
    spdlog::info("worker {} left ({}); requeueing its {} jobs", id, reason, worker.jobs.size());
  else
    spdlog::warn("worker {} lost ({}); its {} jobs go back to the queue", id, reason,
                 worker.jobs.size());
  auto requeued_for = why == departure::goodbye     ? requeue_reason::goodbye
                      : why == departure::reconnect ? requeue_reason::reconnect
                                                    : requeue_reason::worker_lost;
  for (auto& job_id : worker.jobs)
    requeue(job_id, requeued_for, id + " (" + reason + ")");
  if (why == departure::death) {
    auto info = describe(worker);
    info.state = contract::worker_state::dead;
    info.busy = 0;
    info.dead_reason = reason;
    departed_.push_back({std::move(info), worker.last_seen});
    if (departed_.size() > departed_kept)
      departed_.pop_front();
  }
  dispatch();
}

// A job its worker let go of without an answer goes back to its place in the queue; the worker's
// fault is never the candidate's, so after its last attempt it fails as lost (a harness error to
// the session), never as a verdict on the candidate.
void device_manager_state::requeue(const std::string& job_id, requeue_reason why,
                                   const std::string& note) {
  auto it = jobs_.find(job_id);
  auto& job = it->second;
  job.worker.clear();
  if (job.cancelled) {
    jobs_.erase(it);
    return;
  }
  job.losses.push_back(note);
  if (job.attempt >= config_.max_attempts) {
    finish(it,
           caf::make_error(errc::worker_lost, "job " + job.label + " lost its worker on all " +
                                                  std::to_string(job.attempt) +
                                                  " attempts: " + join(job.losses)),
           job_lost);
    ++totals_.lost;
    return;
  }
  ++job.attempt;
  metrics_->job_requeues(why).Increment();
  ++totals_.requeued;
  job.queued_at = now();
  queue_.emplace(job.seq, job_id);
  spdlog::info("device job {} requeued for attempt {}", job.label, job.attempt);
}

void device_manager_state::finish(job_map::iterator job, caf::error err, std::string_view outcome) {
  spdlog::error("device job failed: {}", render(err));
  metrics_->jobs(to_string(job->second.job.kind), std::string{outcome}).Increment();
  job->second.promise.deliver(std::move(err));
  jobs_.erase(job);
}

void device_manager_state::dispatch() {
  // Nothing moves while every slot is taken, so the queue is only ordered when a slot is free,
  // and offering stops once none is left.
  int64_t free_slots = 0;
  for (auto& [identity, worker] : workers_)
    free_slots += std::max<int64_t>(0, worker.hello.slots - worker.held());
  if (free_slots > 0 && !queue_.empty()) {
    std::vector<queued_job> waiting;
    waiting.reserve(queue_.size());
    auto at = now();
    for (const auto& [seq, id] : queue_) {
      const auto& job = jobs_.at(id);
      waiting.push_back(
          {seq, job.job.background,
           std::chrono::duration_cast<std::chrono::milliseconds>(at - job.queued_at).count()});
    }
    for (auto seq : dispatch_order(std::move(waiting), config_.background_max_wait.count())) {
      if (free_slots == 0)
        break;
      auto& job = jobs_.at(queue_.at(seq));
      auto worker = pick_worker(job);
      if (worker == workers_.end())
        continue;
      start(job, worker);
      --free_slots;
      queue_.erase(seq);
    }
  }
  update_gauges();
}

// The least loaded worker that serves the job and has a free slot; the earliest registered wins
// a tie, which keeps dispatch deterministic.
device_manager_state::worker_map::iterator device_manager_state::pick_worker(const job_entry& job) {
  auto best = workers_.end();
  for (auto it = workers_.begin(); it != workers_.end(); ++it) {
    auto& worker = it->second;
    auto busy = worker.held();
    // A worker still holding this job past its deadline could not tell the two runs apart.
    if (busy >= worker.hello.slots || !serves(worker.hello, job.job) ||
        worker.overdue.count(job.job.id))
      continue;
    if (best == workers_.end()) {
      best = it;
      continue;
    }
    auto best_busy = best->second.held();
    auto lighter = busy * best->second.hello.slots < best_busy * worker.hello.slots;
    auto tied = busy * best->second.hello.slots == best_busy * worker.hello.slots;
    if (lighter || (tied && worker.registration < best->second.registration))
      best = it;
  }
  return best;
}

void device_manager_state::start(job_entry& job, worker_map::iterator worker) {
  job.worker = worker->first;
  job.dispatch = ++dispatches_;
  job.dispatched_at = now();
  worker->second.jobs.insert(job.job.id);
  self_->send(worker->second.device, atom::dispatch_v,
              wire::job{.job_id = job.job.id,
                        .kind = job.job.kind,
                        .attempt = job.attempt,
                        .deadline_ms = job.job.deadline_ms,
                        .payload = job.job.payload});
  auto silence =
      std::chrono::milliseconds{job.job.deadline_ms} + config_.liveness * config_.heartbeat;
  self_->delayed_send(self_, silence, atom::deadline_v, job.job.id, job.dispatch);
}

worker_info device_manager_state::describe(const worker_entry& worker) const {
  auto& hello = worker.hello;
  auto busy = worker.held();
  return {
      .worker_id = hello.worker_id,
      .role = hello.role,
      .device_kind = hello.device_kind,
      .device_name = hello.device_name,
      .toolchain = hello.toolchain,
      .fingerprint = hello.fingerprint,
      .slots = hello.slots,
      .busy = busy,
      .ms_since_heartbeat =
          std::chrono::duration_cast<std::chrono::milliseconds>(now() - worker.last_seen).count(),
      .host = hello.host,
      .pid = hello.pid,
      .state = live_state(busy)};
}

std::map<std::string, std::map<std::string, int64_t>> device_manager_state::worker_counts() const {
  std::map<std::string, std::map<std::string, int64_t>> counts;
  for (auto& [identity, worker] : workers_)
    ++counts[worker.hello.device_kind][to_string(live_state(worker.held()))];
  for (auto& dead : departed_)
    ++counts[dead.info.device_kind][to_string(dead.info.state)];
  return counts;
}

void device_manager_state::update_gauges() {
  auto current = worker_counts();
  for (auto& [kind, states] : current)
    for (auto& [state, count] : states)
      gauge_labels_.emplace(kind, state);
  // The series of a kind no worker has any more are removed, so that the label sets follow the
  // fleet instead of growing with every kind that ever said hello; a kind still present keeps
  // its states at 0, which keeps dashboards free of gaps.
  for (auto it = gauge_labels_.begin(); it != gauge_labels_.end();) {
    auto& [kind, state] = *it;
    auto kind_it = current.find(kind);
    if (kind_it == current.end()) {
      metrics_->remove_workers(kind, state);
      it = gauge_labels_.erase(it);
      continue;
    }
    auto state_it = kind_it->second.find(state);
    auto count = state_it == kind_it->second.end() ? 0 : state_it->second;
    metrics_->workers(kind, state).Set(static_cast<double>(count));
    ++it;
  }
  metrics_->queue_depth().Set(static_cast<double>(queue_.size()));
}

// -- behavior -------------------------------------------------------------------------------------

device_manager_actor::behavior_type
device_manager(device_manager_actor::stateful_pointer<device_manager_state> self,
               device_manager_config config, std::shared_ptr<metrics> metrics,
               std::shared_ptr<worker_outbox> outbox) {
  self->state.init(std::move(config), std::move(metrics), std::move(outbox));
  self->set_down_handler([=](const caf::down_msg& msg) { self->state.on_down(msg); });
  return {
      [=](atom::submit, device_job& job) -> caf::result<device_job_result> {
        return self->state.submit(std::move(job));
      },
      [=](atom::cancel, const std::string& job_id) { self->state.cancel(job_id); },
      [=](atom::status) { return self->state.status(); },
      [=](atom::workers) { return self->state.workers(); },
      [=](atom::shutdown) {
        self->state.shutdown();
        self->quit();
        return atom::ok_v;
      },
      [=](const std::string& identity, wire::hello& hello) {
        self->state.on_hello(identity, std::move(hello));
      },
      [=](const std::string& identity, const wire::worker_heartbeat& heartbeat) {
        self->state.on_heartbeat(identity, heartbeat);
      },
      [=](const std::string& identity, wire::result& result) {
        self->state.on_result(identity, std::move(result));
      },
      [=](const std::string& identity, const wire::goodbye& goodbye) {
        self->state.on_goodbye(identity, goodbye);
      },
      [=](atom::disconnected, const std::string& identity, const std::string& reason) {
        self->state.on_disconnected(identity, reason);
      },
      [=](atom::deadline, const std::string& job_id, uint64_t dispatch) {
        self->state.on_deadline(job_id, dispatch);
      },
  };
}

} // namespace opforge
