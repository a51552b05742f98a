#pragma once

// What actors exchange with the device manager: jobs for workers, their results, and the views of
// the worker registry that `opforge status` and `opforge workers` show.

#include "messages/contract.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace opforge {

/// A job for a device worker. It waits until a worker that serves `kind` (on `device_kind`, with
/// `fingerprint`, when those are set) has a free slot; jobs leave the queue in submission order,
/// background jobs after the others unless they waited too long (dispatch_order in
/// actors/fleet/device_manager.hpp).
struct device_job {
  std::string id{}; // unique among unfinished jobs; a retried job keeps it
  contract::job_kind kind = contract::job_kind::test;
  std::string payload{};     // one msgpack map, the request of PROTOCOL.md "Job payloads"
  std::string device_kind{}; // "" = any; lint workers serve lint jobs whatever this says
  std::string fingerprint{}; // "" = any toolchain
  int64_t deadline_ms = 0;   // the worker's wall-clock budget for the whole job
  std::vector<std::string> avoid_hosts{}; // hosts that must not run it (a confirmation's)
  bool background = false; // maintenance work: yields to campaigns and imports, never starves
};

/// The answer of the worker that ran a job. Errors (cancelled, lost, invalid) arrive as a
/// `caf::error` instead.
struct device_job_result {
  std::string job_id{};
  contract::job_status status{}; // failed: a harness fault, never a verdict on the candidate
  std::string payload{};         // one msgpack map, the result of PROTOCOL.md "Job payloads"
  std::string error{};           // what went wrong, when failed
  std::string worker_id{};
  std::string fingerprint{}; // the toolchain the job ran on
  int64_t elapsed_ms = 0;    // as the worker measured it
  int64_t attempt = 1;
  std::string host{};                             // the worker's host
  std::map<std::string, std::string> toolchain{}; // python, torch, triton...: from its hello
};

/// One registered (or recently dead) worker.
struct worker_info {
  std::string worker_id{};
  contract::worker_role role = contract::worker_role::device;
  std::string device_kind{}; // cuda, interpreter, none
  std::string device_name{};
  std::map<std::string, std::string> toolchain{};
  std::string fingerprint{};
  int64_t slots = 0;
  int64_t busy = 0; // jobs the daemon has running there
  int64_t ms_since_heartbeat = 0;
  std::string host{};
  int64_t pid = 0;
  contract::worker_state state = contract::worker_state::idle;
  std::string dead_reason{}; // e.g. "missed 3 heartbeats", when dead
};

/// The device manager at a glance.
struct device_manager_status {
  std::string endpoint{};                                          // where workers connect
  std::map<std::string, std::map<std::string, int64_t>> workers{}; // device kind -> state -> count
  int64_t queued = 0;
  // Device kind -> jobs queued for it (lint jobs aside) while no live worker announces it: they
  // wait for a worker of that kind to connect. "" counts jobs that name no kind while no device
  // worker is live.
  std::map<std::string, int64_t> unserved{};
  int64_t running = 0;
  // Totals since the daemon started.
  int64_t submitted = 0;
  int64_t done = 0;
  int64_t failed = 0;
  int64_t cancelled = 0;
  int64_t refused = 0; // hellos refused (bad role, device kind, job kinds, slots or names)
  int64_t lost = 0;
  int64_t requeued = 0;
  int64_t late_results = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_job& x) {
  return f(caf::meta::type_name("device_job"), x.id, x.kind, x.payload, x.device_kind,
           x.fingerprint, x.deadline_ms, x.avoid_hosts, x.background);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_job_result& x) {
  return f(caf::meta::type_name("device_job_result"), x.job_id, x.status, x.payload, x.error,
           x.worker_id, x.fingerprint, x.elapsed_ms, x.attempt, x.host, x.toolchain);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_info& x) {
  return f(caf::meta::type_name("worker_info"), x.worker_id, x.role, x.device_kind, x.device_name,
           x.toolchain, x.fingerprint, x.slots, x.busy, x.ms_since_heartbeat, x.host, x.pid,
           x.state, x.dead_reason);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_manager_status& x) {
  return f(caf::meta::type_name("device_manager_status"), x.endpoint, x.workers, x.queued,
           x.unserved, x.running, x.submitted, x.done, x.failed, x.cancelled, x.refused, x.lost,
           x.requeued, x.late_results);
}

} // namespace opforge
