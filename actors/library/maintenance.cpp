#include "actors/library/maintenance.hpp"

// CAF 0.17 deserializes a vector's items into a default-initialized local, which GCC takes for
// uninitialized when the item is an enum (library_kernel's dtypes, in the library's replies).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "actors/library/importer.hpp"
#include "actors/library/kernels.hpp"
#include "actors/library/regressions.hpp"
#include "actors/library/repair.hpp"
#include "messages/errors.hpp"
#include "messages/family.hpp"
#include "messages/jobs.hpp"
#include "messages/msgpack_codec.hpp"
#include "messages/store_messages.hpp"
#include "messages/wire.hpp"
#include "messages/write_batch.hpp"
#include "persistence/keys.hpp"

#include <algorithm>

#include <msgpack.hpp>
#include <spdlog/spdlog.h>

namespace opforge {

namespace {

using self_pointer = maintenance_actor::stateful_pointer<maintenance_state>;

// Stored lists are small (one entry per toolchain asked for by hand, or per repaired kernel).
constexpr uint64_t stored_limit = 1 << 20;

// A harness fault (a lost worker, a harness_error verdict) is nobody's verdict: the kernel stays
// owed, but after this many in one daemon's life it waits for a restart, and the pending gauge
// stays flat, which the "re-validation stuck" alert sees.
constexpr int max_faults = 3;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string encode_fields(const std::vector<std::pair<std::string, std::string>>& text,
                          const std::vector<std::pair<std::string, int64_t>>& numbers) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pack{buffer};
  pack.pack_map(static_cast<uint32_t>(text.size() + numbers.size()));
  for (const auto& [key, value] : text) {
    pack.pack(key);
    pack.pack(value);
  }
  for (const auto& [key, value] : numbers) {
    pack.pack(key);
    pack.pack(value);
  }
  return {buffer.data(), buffer.size()};
}

bool is_current_on(const kernel_version& version, const std::string& device_kind) {
  return version.current && version.device_kind == device_kind;
}

// The newest verdict of `version` on `fingerprint`, or null.
const contract::toolchain_proof* newest_on(const kernel_version& version,
                                           const std::string& fingerprint) {
  for (const auto& proof : version.kernel.proofs)
    if (proof.fingerprint == fingerprint)
      return &proof;
  return nullptr;
}

maintenance_status snapshot(const maintenance_state& state, const std::set<toolchain_id>& only) {
  maintenance_status out;
  for (const auto& [id, work] : state.toolchains)
    if (only.empty() || only.count(id)) {
      auto status = work.status;
      status.running = work.running.size();
      out.toolchains.push_back(std::move(status));
    }
  out.regressions = state.regressions;
  out.speed_regressions = state.speed_regressions;
  out.repair_campaigns = state.repair_campaigns;
  return out;
}

// Marks the toolchains of connected device workers live, and the others not.
void take_workers(self_pointer self, const std::vector<worker_info>& workers) {
  auto& toolchains = self->state.toolchains;
  for (auto& [id, work] : toolchains)
    work.status.live = false;
  for (const auto& worker : workers) {
    if (worker.role != contract::worker_role::device ||
        worker.state == contract::worker_state::dead || worker.fingerprint.empty())
      continue;
    auto& status = toolchains[{worker.device_kind, worker.fingerprint}].status;
    status.device_kind = worker.device_kind;
    status.fingerprint = worker.fingerprint;
    status.toolchain = worker.toolchain;
    status.live = true;
  }
}

void record_fault(self_pointer self, const toolchain_id& id, const std::string& hash,
                  const std::string& what) {
  auto faults = ++self->state.faults[{hash, id.second}];
  spdlog::warn("re-validation of kernel {} on {} {}: {} (fault {} of {})", hash, id.first,
               id.second, what, faults, max_faults);
}

void judged(self_pointer self, const toolchain_id& id, const std::string& hash) {
  self->state.toolchains[id].running.erase(hash);
}

// Tests one owed kernel on the toolchain and records the verdict.
void revalidate_kernel(self_pointer self, const toolchain_id& id, const kernel_version& owed) {
  const auto& [device_kind, fingerprint] = id;
  auto hash = owed.kernel.hash;
  auto job_id = "revalidate:" + fingerprint + ":" + hash;
  self->state.toolchains[id].running[hash] = job_id;
  auto fault = [self, id, hash](const std::string& what) {
    judged(self, id, hash);
    record_fault(self, id, hash, what);
  };
  // The poll lists kernels without sources; the job needs this one's.
  self->request(self->state.setup.library, caf::infinite, atom::list_v,
                operator_id(owed.kernel.op, owed.kernel.variant), true)
      .then(
          [self, id, hash, job_id, fault](std::vector<kernel_version>& versions) {
            const auto& setup = self->state.setup;
            const kernel_version* found = nullptr;
            for (const auto& version : versions)
              if (version.kernel.hash == hash)
                found = &version;
            if (found == nullptr)
              return fault("the library no longer lists it");
            const auto& k = found->kernel;
            auto job = test_job(job_id, k.op, k.variant, k.source, k.wrapper,
                                contract::to_strings(k.dtypes),
                                {id.first, setup.sample_timeout_s, setup.job_deadline_ms});
            job.fingerprint = id.second;
            job.background = true;
            ++self->state.jobs_submitted;
            self->request(setup.fleet, caf::infinite, atom::submit_v, std::move(job))
                .then(
                    [self, id, hash, fault](device_job_result& tested) {
                      if (tested.status != contract::job_status::done)
                        return fault("test job " + to_string(tested.status) + ": " + tested.error);
                      auto result =
                          wire::decode_as<contract::test_result>(tested.payload, "test_result");
                      if (!result)
                        return fault(render(result.error()));
                      if (result->outcome == contract::outcome::harness_error)
                        return fault("harness error: " + verdict_line(*result));
                      contract::toolchain_proof proof{.fingerprint = tested.fingerprint,
                                                      .device_kind = id.first,
                                                      .toolchain = tested.toolchain,
                                                      .outcome = result->outcome,
                                                      .tests_run = result->tests_run,
                                                      .tests_passed = result->tests_passed,
                                                      .validated_at_ms = now_ms(),
                                                      .detail =
                                                          result->outcome == contract::outcome::pass
                                                              ? std::string{}
                                                              : verdict_line(*result)};
                      self->request(self->state.setup.library, caf::infinite, atom::validate_v,
                                    hash, std::move(proof))
                          .then([self, id, hash](atom::ok) { judged(self, id, hash); },
                                [fault](const caf::error& err) {
                                  fault("the library did not record the verdict: " + render(err));
                                });
                    },
                    [self, id, hash, fault](const caf::error& err) {
                      if (err.category() == caf::atom("opforge") &&
                          static_cast<errc>(err.code()) == errc::cancelled)
                        return judged(self, id, hash);
                      fault(render(err));
                    });
          },
          [fault](const caf::error& err) { fault(render(err)); });
}

void timing_fault(self_pointer self, const toolchain_id& id, const std::string& hash,
                  const std::string& what) {
  self->state.toolchains[id].timing.erase(hash);
  auto faults = ++self->state.timing_faults[{hash, id.second}];
  spdlog::warn("timing of kernel {} on {} {}: {} (fault {} of {})", hash, id.first, id.second, what,
               faults, max_faults);
}

// Times one kernel that passes on the toolchain and records its timings there.
void retime_kernel(self_pointer self, const toolchain_id& id, const kernel_version& owed) {
  const auto& [device_kind, fingerprint] = id;
  auto hash = owed.kernel.hash;
  auto op_id = operator_id(owed.kernel.op, owed.kernel.variant);
  auto job_id = "retime:" + fingerprint + ":" + hash;
  self->state.toolchains[id].timing[hash] = job_id;
  auto fault = [self, id, hash](const std::string& what) { timing_fault(self, id, hash, what); };
  self->request(self->state.setup.library, caf::infinite, atom::list_v, op_id, true)
      .then(
          [self, id, hash, op_id, job_id, fault](std::vector<kernel_version>& versions) {
            const auto& setup = self->state.setup;
            auto found = std::find_if(versions.begin(), versions.end(),
                                      [&](const auto& v) { return v.kernel.hash == hash; });
            if (found == versions.end())
              return fault("the library no longer lists it");
            const auto& k = found->kernel;
            auto job = benchmark_job(job_id, k.op, k.variant, k.source, k.wrapper,
                                     contract::to_strings(k.dtypes),
                                     {.device_kind = id.first,
                                      .sample_timeout_s = setup.sample_timeout_s,
                                      .deadline_ms = setup.job_deadline_ms,
                                      .fingerprint = id.second});
            job.background = true;
            ++self->state.jobs_submitted;
            self->request(setup.fleet, caf::infinite, atom::submit_v, std::move(job))
                .then(
                    [self, id, hash, op_id, fault](device_job_result& timed) {
                      if (timed.status != contract::job_status::done)
                        return fault("benchmark job " + to_string(timed.status) + ": " +
                                     timed.error);
                      auto result = wire::decode_as<contract::benchmark_result>(timed.payload,
                                                                                "benchmark_result");
                      if (!result)
                        return fault(render(result.error()));
                      if (result->timer == logic_only_timer) {
                        spdlog::info("{} workers time with {}, which measures no kernel: their "
                                     "kernels are not timed further",
                                     id.first, result->timer);
                        self->state.untimed_kinds.insert(id.first);
                        self->state.toolchains[id].timing.erase(hash);
                        return;
                      }
                      if (result->outcome != contract::outcome::pass)
                        return fault(std::string{"benchmark "} + to_string(result->outcome) +
                                     (result->failure ? ": " + result->failure->message : ""));
                      auto timings = class_timings(*result, timed.fingerprint, id.first, now_ms());
                      if (timings.empty())
                        return fault("the benchmark timed no input");
                      self->request(self->state.setup.library, caf::infinite, atom::timed_v, op_id,
                                    hash, std::move(timings))
                          .then([self, id,
                                 hash](atom::ok) { self->state.toolchains[id].timing.erase(hash); },
                                [fault](const caf::error& err) {
                                  fault("the library did not record the timings: " + render(err));
                                });
                    },
                    [self, id, hash, fault](const caf::error& err) {
                      if (err.category() == caf::atom("opforge") &&
                          static_cast<errc>(err.code()) == errc::cancelled) {
                        self->state.toolchains[id].timing.erase(hash);
                        return;
                      }
                      fault(render(err));
                    });
          },
          [fault](const caf::error& err) { fault(render(err)); });
}

void update_metrics(self_pointer self, const std::vector<regression>& found,
                    const std::vector<speed_regression>& slower) {
  auto& state = self->state;
  auto& telemetry = state.setup.telemetry;
  if (!telemetry)
    return;
  std::set<toolchain_id> live;
  for (const auto& [id, work] : state.toolchains) {
    if (!work.status.live)
      continue;
    live.insert(id);
    telemetry->validations_pending(id.first, id.second).Set(static_cast<double>(work.status.owed));
  }
  for (const auto& id : state.metered)
    if (!live.count(id))
      telemetry->remove_toolchain(id.first, id.second);
  state.metered = std::move(live);
  std::map<std::string, std::pair<double, double>> per_kind; // correctness, speed
  for (const auto& kind : state.regression_kinds)
    per_kind[kind] = {0, 0};
  // A regression another kernel serves is history: the gauges' alerts are for what needs work.
  for (const auto& r : found)
    if (r.served_by.empty())
      per_kind[r.after.device_kind].first += 1;
  for (const auto& r : slower)
    if (r.served_by.empty())
      per_kind[r.after.device_kind].second += 1;
  for (const auto& [kind, counts] : per_kind) {
    telemetry->regressions(kind).Set(counts.first);
    telemetry->speed_regressions(kind).Set(counts.second);
    state.regression_kinds.insert(kind);
  }
}

// A regressed kernel on the toolchain it regressed on: what a repair is started for, once.
struct repair_key {
  std::string op;
  std::string variant;
  std::string hash;
  std::string fingerprint;
};

// Starts the repair of regressions and speed regressions no repair was started for
// (`maintenance.repair: auto`).
void repair_new(self_pointer self, const std::vector<regression>& found,
                const std::vector<speed_regression>& slower) {
  auto& state = self->state;
  auto fresh_one = [&](const auto& r) {
    return !state.repaired.count({r.hash, r.after.fingerprint});
  };
  std::vector<regression> fresh;
  std::copy_if(found.begin(), found.end(), std::back_inserter(fresh), fresh_one);
  std::vector<speed_regression> fresh_slower;
  std::copy_if(slower.begin(), slower.end(), std::back_inserter(fresh_slower),
               [&](const auto& r) { return r.served_by.empty() && fresh_one(r); });
  std::vector<repair_key> keys;
  for (const auto& r : fresh)
    keys.push_back({r.op, r.variant, r.hash, r.after.fingerprint});
  for (const auto& r : fresh_slower)
    keys.push_back({r.op, r.variant, r.hash, r.after.fingerprint});
  if (keys.empty())
    return;
  // Marked now so the next poll does not start them again while this one is under way.
  for (const auto& k : keys)
    state.repaired.insert({k.hash, k.fingerprint});
  self->request(state.setup.library, caf::infinite, atom::list_v, std::string{}, true)
      .then(
          [self, fresh, fresh_slower, keys](std::vector<kernel_version>& kernels) {
            for (auto& request : repair_campaigns(fresh, kernels, fresh_slower)) {
              std::vector<repair_key> covered;
              for (const auto& k : keys)
                for (const auto& seed : request.seeds)
                  if (k.fingerprint == request.fingerprint && seed.op == k.op &&
                      seed.variant == k.variant) {
                    covered.push_back(k);
                    break;
                  }
              self->request(self->state.setup.campaigns, caf::infinite, atom::submit_v,
                            std::move(request))
                  .then(
                      [self, covered](campaign_status& campaign) {
                        spdlog::info("repair campaign {} started for {} regression(s)",
                                     campaign.campaign_id, covered.size());
                        self->state.repair_campaigns.push_back(campaign.campaign_id);
                        // Stored once started: a crash in between starts it again rather
                        // than never.
                        write_batch batch{{}, true};
                        for (const auto& k : covered)
                          batch.ops.push_back({family::meta,
                                               repair_started_key(k.hash, k.fingerprint),
                                               encode_fields({{"hash", k.hash},
                                                              {"fingerprint", k.fingerprint},
                                                              {"campaign", campaign.campaign_id}},
                                                             {})});
                        self->request(self->state.setup.store, caf::infinite, atom::write_v,
                                      std::move(batch))
                            .then([](atom::ok) {},
                                  [](const caf::error& err) {
                                    spdlog::error("repair campaign not recorded: {}", render(err));
                                  });
                      },
                      [self, covered](const caf::error& err) {
                        spdlog::error("repair campaign did not start: {}", render(err));
                        for (const auto& k : covered)
                          self->state.repaired.erase({k.hash, k.fingerprint});
                      });
            }
          },
          [self, keys](const caf::error& err) {
            spdlog::error("repair: the library did not list its kernels: {}", render(err));
            for (const auto& k : keys)
              self->state.repaired.erase({k.hash, k.fingerprint});
          });
}

// Counts what each toolchain owes and has, and submits the owed kernels not under way.
void refresh(self_pointer self, const std::vector<kernel_version>& kernels) {
  auto& state = self->state;
  for (auto& [id, work] : state.toolchains) {
    count_revalidation(work.status, kernels);
    if (!work.status.live) {
      // Its jobs would wait for a worker that may never come back.
      for (const auto& [hash, job_id] : work.running)
        self->send(state.setup.fleet, atom::cancel_v, job_id);
      for (const auto& [hash, job_id] : work.timing)
        self->send(state.setup.fleet, atom::cancel_v, job_id);
      continue;
    }
    if (!state.setup.enabled && work.status.requested_at_ms == 0)
      continue;
    std::vector<kernel_version> current;
    for (const auto& version : kernels)
      if (is_current_on(version, id.first))
        current.push_back(version);
    // Each owed kernel once, unless it is under way or has failed too often here.
    auto start = [&](const std::vector<std::string>& owed,
                     const std::map<std::string, std::string>& running,
                     const std::map<std::pair<std::string, std::string>, int>& faults,
                     void (*begin)(self_pointer, const toolchain_id&, const kernel_version&)) {
      for (const auto& hash : owed) {
        if (running.count(hash))
          continue;
        auto failed = faults.find({hash, id.second});
        if (failed != faults.end() && failed->second >= max_faults)
          continue;
        for (const auto& version : current)
          if (version.kernel.hash == hash) {
            begin(self, id, version);
            break;
          }
      }
    };
    auto since = work.status.requested_at_ms;
    start(pending_validations(current, id.first, id.second, since), work.running, state.faults,
          revalidate_kernel);
    // Every kernel proved on a live toolchain is timed there, not only where a second toolchain
    // could show a slowdown: the export routes each shape class by these timings.
    if (state.setup.retime && !state.untimed_kinds.count(id.first))
      start(pending_timings(current, id.first, id.second, since), work.timing, state.timing_faults,
            retime_kernel);
  }
  auto unserved = [](const auto& list) {
    return static_cast<uint64_t>(
        std::count_if(list.begin(), list.end(), [](const auto& r) { return r.served_by.empty(); }));
  };
  auto found = find_regressions(kernels);
  auto slower = find_speed_regressions(kernels, state.setup.speed_regression);
  state.regressions = unserved(found);
  state.speed_regressions = unserved(slower);
  update_metrics(self, found, slower);
  if (state.setup.repair && state.setup.campaigns)
    repair_new(self, found, slower);
}

// Passing counts per live toolchain for opforge_library_passing.
void meter_passing(self_pointer self, const std::vector<kernel_version>& kernels) {
  auto& telemetry = self->state.setup.telemetry;
  if (!telemetry)
    return;
  for (const auto& [id, work] : self->state.toolchains) {
    if (!work.status.live)
      continue;
    double passing = 0;
    for (const auto& version : kernels)
      if (is_current_on(version, id.first))
        if (auto proof = newest_on(version, id.second);
            proof && proof->outcome == contract::outcome::pass)
          ++passing;
    telemetry->library_passing(id.first, id.second).Set(passing);
  }
}

// Asks for the workers and the library, then refreshes; `then` gets the outcome.
template <class Then>
void poll(self_pointer self, Then then) {
  self->request(self->state.setup.fleet, caf::infinite, atom::workers_v)
      .then(
          [self, then](std::vector<worker_info>& workers) mutable {
            take_workers(self, workers);
            self->request(self->state.setup.library, caf::infinite, atom::list_v, std::string{},
                          false)
                .then(
                    [self, then](std::vector<kernel_version>& kernels) mutable {
                      refresh(self, kernels);
                      meter_passing(self, kernels);
                      then(caf::error{});
                    },
                    [then](const caf::error& err) mutable { then(err); });
          },
          [then](const caf::error& err) mutable { then(err); });
}

void tick(self_pointer self) {
  if (!self->state.polling) {
    self->state.polling = true;
    poll(self, [self](const caf::error& err) {
      self->state.polling = false;
      if (err)
        spdlog::warn("maintenance poll failed: {}", render(err));
    });
  }
  self->delayed_send(self, self->state.setup.poll, atom::tick_v);
}

// Reads what a previous run of the daemon asked for and started, then starts polling.
void load(self_pointer self) {
  self->request(self->state.setup.store, caf::infinite, atom::scan_v, family::meta,
                maintenance_prefix(), stored_limit)
      .then(
          [self](std::vector<key_value>& entries) {
            auto& state = self->state;
            for (const auto& entry : entries) {
              auto handle = wire::unpack(entry.value);
              auto fields = handle ? wire::map_reader::of(handle->get())
                                   : caf::expected<wire::map_reader>{handle.error()};
              if (!fields) {
                spdlog::error("maintenance record {} unreadable: {}", printable(entry.key),
                              render(fields.error()));
                continue;
              }
              auto fingerprint = fields->string_or("fingerprint", "");
              auto device_kind = fields->string_or("device_kind", "");
              auto requested = fields->integer_or("requested_at_ms", 0);
              auto hash = fields->string_or("hash", "");
              auto campaign = fields->string_or("campaign", "");
              if (!fingerprint || !device_kind || !requested || !hash || !campaign)
                continue;
              if (!hash->empty()) {
                state.repaired.insert({*hash, *fingerprint});
                if (std::find(state.repair_campaigns.begin(), state.repair_campaigns.end(),
                              *campaign) == state.repair_campaigns.end())
                  state.repair_campaigns.push_back(*campaign);
                continue;
              }
              auto& status = state.toolchains[{*device_kind, *fingerprint}].status;
              status.device_kind = *device_kind;
              status.fingerprint = *fingerprint;
              status.requested_at_ms = *requested;
            }
            tick(self);
          },
          [self](const caf::error& err) {
            spdlog::error("maintenance: stored requests unreadable ({}); polling without them",
                          render(err));
            tick(self);
          });
}

caf::error no_worker(const std::string& device_kind, const std::string& fingerprint) {
  std::string what = "no connected device worker";
  if (!device_kind.empty())
    what += " of device kind '" + device_kind + "'";
  if (!fingerprint.empty())
    what += " has toolchain fingerprint '" + fingerprint +
            "' (`opforge workers` lists the live fingerprints)";
  return caf::make_error(errc::request_invalid, "revalidate: " + what);
}

} // namespace

void count_revalidation(revalidation_status& status, const std::vector<kernel_version>& kernels) {
  status.owed = status.passed = status.failed = 0;
  std::set<std::string> seen;
  for (const auto& version : kernels) {
    if (!is_current_on(version, status.device_kind) || !seen.insert(version.kernel.hash).second)
      continue;
    auto proof = newest_on(version, status.fingerprint);
    if (proof == nullptr || proof->validated_at_ms < status.requested_at_ms)
      ++status.owed;
    else if (proof->outcome == contract::outcome::pass)
      ++status.passed;
    else
      ++status.failed;
  }
}

maintenance_actor::behavior_type
maintenance(maintenance_actor::stateful_pointer<maintenance_state> self, maintenance_setup setup) {
  self->state.setup = std::move(setup);
  load(self);
  return {
      [self](atom::revalidate, const std::string& device_kind,
             const std::string& fingerprint) -> caf::result<maintenance_status> {
        auto promise = self->make_response_promise<maintenance_status>();
        self->request(self->state.setup.fleet, caf::infinite, atom::workers_v)
            .then(
                [self, promise, device_kind,
                 fingerprint](std::vector<worker_info>& workers) mutable {
                  take_workers(self, workers);
                  std::set<toolchain_id> targets;
                  for (const auto& [id, work] : self->state.toolchains)
                    if (work.status.live && (device_kind.empty() || id.first == device_kind) &&
                        (fingerprint.empty() || id.second == fingerprint))
                      targets.insert(id);
                  if (targets.empty()) {
                    promise.deliver(no_worker(device_kind, fingerprint));
                    return;
                  }
                  auto at = now_ms();
                  write_batch batch{{}, true};
                  for (const auto& [kind, print] : targets)
                    batch.ops.push_back(
                        {family::meta, revalidation_request_key(kind, print),
                         encode_fields({{"device_kind", kind}, {"fingerprint", print}},
                                       {{"requested_at_ms", at}})});
                  self->request(self->state.setup.store, caf::infinite, atom::write_v,
                                std::move(batch))
                      .then(
                          [self, promise, targets, at](atom::ok) mutable {
                            for (const auto& id : targets)
                              self->state.toolchains[id].status.requested_at_ms = at;
                            spdlog::info("re-validation asked by hand on {} toolchain(s)",
                                         targets.size());
                            poll(self, [self, promise, targets](const caf::error& err) mutable {
                              if (err)
                                promise.deliver(err);
                              else
                                promise.deliver(snapshot(self->state, targets));
                            });
                          },
                          [promise](const caf::error& err) mutable { promise.deliver(err); });
                },
                [promise](const caf::error& err) mutable { promise.deliver(err); });
        return promise;
      },
      [self](atom::status) -> maintenance_status { return snapshot(self->state, {}); },
      [self](atom::tick) { tick(self); },
  };
}

} // namespace opforge
