#pragma once

#include "devices/worker_io.hpp"
#include "devices/worker_outbox.hpp"
#include "messages/actors.hpp"
#include "messages/device_messages.hpp"
#include "messages/metrics.hpp"
#include "messages/wire.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_clock.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

namespace opforge {

struct device_manager_config {
  /// Where the workers socket binds (`workers.listen`); `tcp://127.0.0.1:*` picks a free port.
  std::string listen = "tcp://127.0.0.1:5555";
  size_t max_frame_bytes = wire::default_max_frame_bytes;
  std::chrono::milliseconds heartbeat{1000};
  /// Heartbeat intervals of silence after which a worker is dead.
  int64_t liveness = 3;
  /// Dispatches a job may use when its workers die, leave, reconnect or overrun its deadline.
  int64_t max_attempts = 3;
  /// The most slots a worker is believed to have, whatever its hello claims.
  int64_t max_slots = 64;
  /// How the workers socket admits workers (none by default: tests on loopback and ipc).
  worker_auth auth;
  /// How long a background job waits behind other jobs before it goes ahead of them.
  std::chrono::milliseconds background_max_wait{30000};
  /// Keeps the conformance report a hello carries (the library); null keeps none.
  conformance_sink_actor conformance{};
};

/// A queued job as the dispatch rule sees it.
struct queued_job {
  uint64_t seq = 0; // submission order
  bool background = false;
  int64_t waited_ms = 0; // since it was queued (again)
};

/// The order in which queued jobs are offered free slots: background jobs that waited at least
/// `background_max_wait_ms`, then the other jobs, then the other background jobs, each group in
/// submission order. Campaigns thus go first, and a background job still gets the next slot its
/// worker frees once it has waited long enough, so maintenance always makes progress.
std::vector<uint64_t> dispatch_order(std::vector<queued_job> queue, int64_t background_max_wait_ms);

class device_manager_state {
public:
  static inline const char* name = "device-manager";
  using self_pointer = device_manager_actor::stateful_pointer<device_manager_state>;

  explicit device_manager_state(self_pointer self) : self_{self} {}
  ~device_manager_state();

  void init(device_manager_config config, std::shared_ptr<metrics> metrics,
            std::shared_ptr<worker_outbox> outbox);

  caf::result<device_job_result> submit(device_job job);
  void cancel(const std::string& job_id);
  device_manager_status status() const;
  std::vector<worker_info> workers() const;
  void shutdown();

  void on_hello(const std::string& identity, wire::hello hello);
  void on_heartbeat(const std::string& identity, const wire::worker_heartbeat& heartbeat);
  void on_result(const std::string& identity, wire::result result);
  void on_goodbye(const std::string& identity, const wire::goodbye& goodbye);
  void on_disconnected(const std::string& identity, const std::string& reason);
  void on_deadline(const std::string& job_id, uint64_t dispatch);
  void on_down(const caf::down_msg& msg);

private:
  // Why a worker left; each costs its jobs an attempt, none is held against a job's candidate.
  enum class departure { goodbye, reconnect, death };

  struct job_entry {
    device_job job{};
    std::string label{}; // "t-17 (test exp)"
    caf::typed_response_promise<device_job_result> promise{};
    uint64_t seq = 0;                  // submission order, which the queue keeps
    int64_t attempt = 1;               // of the current dispatch, or of the next while queued
    std::vector<std::string> losses{}; // one per lost attempt: "w1 (missed 3 heartbeats)"
    std::string worker{};              // routing identity while dispatched
    uint64_t dispatch = 0; // number of the current dispatch, which its deadline timer carries
    caf::actor_clock::time_point dispatched_at{};
    caf::actor_clock::time_point queued_at{}; // when it last entered the queue
    bool cancelled = false; // already answered; the worker still holds the slot until it lets go
  };

  struct worker_entry {
    wire::hello hello{};
    device_actor device{};
    std::set<std::string> jobs{};    // dispatched here, unanswered
    std::set<std::string> overdue{}; // taken back past their deadline; slots held until let go
    int64_t short_beats = 0; // heartbeats in a row that reported fewer jobs than it was given
    uint64_t registration = 0;
    caf::actor_clock::time_point last_seen{};

    int64_t held() const { return static_cast<int64_t>(jobs.size() + overdue.size()); }
  };

  struct departed_worker {
    worker_info info{};
    caf::actor_clock::time_point last_seen{};
  };

  using job_map = std::map<std::string, job_entry>;
  using worker_map = std::map<std::string, worker_entry>;

  caf::actor_clock::time_point now() const;
  worker_map::iterator known(const std::string& identity);
  void alive(worker_entry& worker);
  std::optional<std::string> invalid_hello(wire::hello& hello) const;
  void keep_conformance(const contract::conformance_report& report, const std::string& worker_id);
  void retire(const std::string& identity, departure why, const std::string& reason);
  void requeue(const std::string& job_id, requeue_reason why, const std::string& note);
  void finish(job_map::iterator job, caf::error err, std::string_view outcome);
  void dispatch();
  worker_map::iterator pick_worker(const job_entry& job);
  void start(job_entry& job, worker_map::iterator worker);
  worker_info describe(const worker_entry& worker) const;
  std::map<std::string, std::map<std::string, int64_t>> worker_counts() const; // kind -> state
  void update_gauges();

  self_pointer self_;
  device_manager_config config_;
  std::shared_ptr<metrics> metrics_;
  std::shared_ptr<worker_outbox> outbox_;
  job_map jobs_;
  std::map<uint64_t, std::string> queue_; // submission order -> job id
  worker_map workers_;
  std::deque<departed_worker> departed_; // recent deaths, newest last
  std::set<std::pair<std::string, std::string>> gauge_labels_;
  uint64_t submissions_ = 0;
  uint64_t dispatches_ = 0;
  uint64_t registrations_ = 0;
  device_manager_status totals_;
};

/// The device manager; frames to workers go to `outbox`. `spawn_device_manager`
/// (actors/fleet/spawn_device_manager.hpp) wires it to a real ZeroMQ socket; tests pass a recorder.
device_manager_actor::behavior_type
device_manager(device_manager_actor::stateful_pointer<device_manager_state> self,
               device_manager_config config, std::shared_ptr<metrics> metrics,
               std::shared_ptr<worker_outbox> outbox);

} // namespace opforge
