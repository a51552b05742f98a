#include "actors/store/store.hpp"

#include "messages/errors.hpp"
#include "persistence/rocksdb_store.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/make_message.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace opforge {

namespace {

/// A plain thread that runs posted jobs one at a time, in the order they were posted.
class fifo_thread {
public:
  fifo_thread() : thread_{[this] { run(); }} {}

  fifo_thread(const fifo_thread&) = delete;
  fifo_thread& operator=(const fifo_thread&) = delete;

  /// Runs every job still queued, then joins.
  ~fifo_thread() {
    {
      std::lock_guard lock{mutex_};
      stopping_ = true;
    }
    wakeup_.notify_one();
    thread_.join();
  }

  void post(std::function<void()> job) {
    {
      std::lock_guard lock{mutex_};
      jobs_.push_back(std::move(job));
    }
    wakeup_.notify_one();
  }

private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock{mutex_};
        wakeup_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty())
          return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mutex_;
  std::condition_variable wakeup_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_; // last: the thread starts once the members above exist
};

/// The database and the bookkeeping that `status` reports. Touched only on the store's thread;
/// each call returns the reply for the actor to deliver, a caf::error on failure.
class store_backend {
public:
  store_backend(std::shared_ptr<store> db, std::shared_ptr<metrics> telemetry)
      : db_{std::move(db)}, telemetry_{std::move(telemetry)} {}

  caf::message write(const write_batch& batch) {
    auto start = std::chrono::steady_clock::now();
    auto err = db_->write(batch);
    telemetry_->store_write_latency().Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (err)
      return failed(std::move(err));
    ++batches_written_;
    return caf::make_message(atom::ok_v);
  }

  caf::message get(family f, const std::string& key) {
    auto value = db_->get(f, key);
    if (!value)
      return failed(std::move(value.error()));
    return caf::make_message(stored_value{std::move(*value)});
  }

  caf::message scan(family f, const std::string& prefix, uint64_t limit) {
    std::vector<key_value> entries;
    if (limit > 0) {
      auto err = db_->scan(f, prefix, [&](std::string_view key, std::string_view value) {
        entries.push_back({std::string{key}, std::string{value}});
        return entries.size() < limit;
      });
      if (err)
        return failed(std::move(err));
    }
    return caf::make_message(std::move(entries));
  }

  caf::message status() {
    store_status result{
        db_->path().string(), db_->schema_version(), {}, batches_written_, last_error_};
    for (auto f : all_families) {
      auto stats = db_->stats(f);
      if (!stats)
        return failed(std::move(stats.error()));
      result.families.push_back(std::move(*stats));
    }
    return caf::make_message(std::move(result));
  }

  caf::message close() {
    if (auto err = db_->close())
      return failed(std::move(err));
    return caf::make_message(atom::ok_v);
  }

private:
  caf::message failed(caf::error err) {
    last_error_ = render(err);
    return caf::make_message(std::move(err));
  }

  std::shared_ptr<store> db_;
  std::shared_ptr<metrics> telemetry_;
  uint64_t batches_written_ = 0;
  std::string last_error_;
};

struct store_state {
  static inline const char* name = "store";

  store_state() = default;
  store_state(const store_state&) = delete;
  store_state& operator=(const store_state&) = delete;

  // Also reached when the actor ends without a shutdown request (an exit message, or no
  // references left): the thread still applies what is queued and closes the database before
  // `io` joins it (closing twice does nothing), and whoever waits for an answer learns that it
  // will not come, though the request may have been applied.
  ~store_state() {
    if (backend)
      io.post([db = backend.get()] { db->close(); });
    for (auto& [id, promise] : pending)
      promise.deliver(caf::make_error(errc::store_io_failed, path,
                                      "the store terminated before answering; the request may "
                                      "have been applied"));
  }

  std::unique_ptr<store_backend> backend;
  /// The database directory, for errors the actor answers itself.
  std::string path;
  /// Requests handed to the thread, by id, until it reports their outcome.
  std::unordered_map<uint64_t, caf::response_promise> pending;
  uint64_t next_request = 0;
  /// Set by a shutdown request: later requests are refused, and the actor quits once every
  /// pending request, the closing of the database last, has been answered.
  bool closing = false;
  fifo_thread io; // last: destroyed first, joining the thread while `backend` still exists
};

using store_pointer = store_actor::stateful_pointer<store_state>;

/// Queues `work` on the store's thread and returns the promise its outcome will fulfil.
template <class Reply, class Work>
caf::typed_response_promise<Reply> submit(store_pointer self, Work work) {
  auto promise = self->make_response_promise<Reply>();
  auto& st = self->state;
  if (st.closing) {
    promise.deliver(caf::make_error(errc::store_io_failed, st.path, "the store is shutting down"));
    return promise;
  }
  auto id = st.next_request++;
  st.pending.emplace(id, promise);
  // A weak reference: the thread must not keep the actor alive, or it would never terminate.
  st.io.post([backend = st.backend.get(), owner = self->address(), id, work = std::move(work)] {
    auto outcome = work(*backend);
    if (auto actor = caf::actor_cast<store_actor>(owner))
      caf::anon_send(actor, atom::io_done_v, id, std::move(outcome));
  });
  return promise;
}

store_actor::behavior_type store_behavior(store_pointer self, std::shared_ptr<store> db,
                                          std::shared_ptr<metrics> telemetry) {
  self->state.path = db->path().string();
  self->state.backend = std::make_unique<store_backend>(std::move(db), std::move(telemetry));
  return {
      [self](atom::write, write_batch& batch) {
        return submit<atom::ok>(self, [batch = std::move(batch)](store_backend& backend) {
          return backend.write(batch);
        });
      },
      [self](atom::get, family f, std::string& key) {
        return submit<stored_value>(self, [f, key = std::move(key)](store_backend& backend) {
          return backend.get(f, key);
        });
      },
      [self](atom::scan, family f, std::string& prefix, uint64_t limit) {
        return submit<std::vector<key_value>>(
            self, [f, prefix = std::move(prefix), limit](store_backend& backend) {
              return backend.scan(f, prefix, limit);
            });
      },
      [self](atom::status) {
        return submit<store_status>(self, [](store_backend& backend) { return backend.status(); });
      },
      [self](atom::shutdown) {
        auto promise =
            submit<atom::ok>(self, [](store_backend& backend) { return backend.close(); });
        self->state.closing = true;
        return promise;
      },
      [self](atom::io_done, uint64_t id, caf::message& outcome) {
        auto& st = self->state;
        auto request = st.pending.find(id);
        if (request == st.pending.end())
          return;
        request->second.deliver(std::move(outcome));
        st.pending.erase(request);
        if (st.closing && st.pending.empty())
          self->quit();
      },
  };
}

} // namespace

caf::expected<store_actor> spawn_store(caf::actor_system& sys, const std::filesystem::path& dir,
                                       std::shared_ptr<metrics> telemetry) {
  if (!telemetry)
    return caf::make_error(errc::request_invalid, dir.string(), "spawn_store needs metrics");
  auto db = open_rocksdb_store(dir);
  if (!db)
    return std::move(db.error());
  return sys.spawn(store_behavior, std::shared_ptr<store>{std::move(*db)}, std::move(telemetry));
}

} // namespace opforge
