#include "actors/store/store.hpp"

#include "messages/errors.hpp"
#include "persistence/rocksdb_store.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/make_message.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace opforge {

namespace {

using clock_type = std::chrono::steady_clock;

/// The database and the bookkeeping that `status` reports. Touched only on the store's thread;
/// each call returns the reply for the actor to deliver, a caf::error on failure.
class store_backend {
public:
  store_backend(std::shared_ptr<store> db, std::shared_ptr<metrics> telemetry)
      : db_{std::move(db)}, telemetry_{std::move(telemetry)} {}

  /// Applies `group`, the ops of as many batches as `taken` holds (when the actor took each), as
  /// one RocksDB write.
  caf::error write_group(const write_batch& group,
                         const std::vector<clock_type::time_point>& taken) {
    auto start = clock_type::now();
    auto err = db_->write(group);
    telemetry_->store_write_latency().Observe(seconds(clock_type::now() - start));
    if (err)
      return note(store_operation::write, std::move(err));
    // Only the write that applies a batch ends its wait: a failing disk retries a group often.
    for (auto at : taken)
      telemetry_->store_queue_wait().Observe(seconds(start - at));
    telemetry_->store_group_batches().Observe(static_cast<double>(taken.size()));
    batches_written_ += taken.size();
    return {};
  }

  /// Whether `batch` can share a group commit; the store refuses it alone otherwise.
  static bool is_valid(const write_batch& batch) {
    return std::all_of(batch.ops.begin(), batch.ops.end(),
                       [](const write_op& op) { return is_known(op.family); });
  }

  caf::message write_alone(const write_batch& batch) {
    if (auto err = db_->write(batch))
      return failed(store_operation::write, std::move(err));
    ++batches_written_;
    return caf::make_message(atom::ok_v);
  }

  caf::error resume() {
    if (auto err = db_->resume())
      return note(store_operation::resume, std::move(err));
    return {};
  }

  /// Records why writes are held back (nothing once they work again) and how many wait.
  void set_paused(std::string failure, size_t waiting) {
    write_failure_ = std::move(failure);
    paused_writes_ = waiting;
    telemetry_->store_paused_writes().Set(static_cast<double>(waiting));
  }

  caf::message get(family f, const std::string& key) {
    auto value = db_->get(f, key);
    if (!value)
      return failed(store_operation::get, std::move(value.error()));
    return caf::make_message(stored_value{std::move(*value)});
  }

  caf::message scan(family f, const std::string& prefix, const std::string& after, uint64_t limit) {
    std::vector<key_value> entries;
    if (limit > 0) {
      auto err = db_->scan(f, prefix, after, [&](std::string_view key, std::string_view value) {
        entries.push_back({std::string{key}, std::string{value}});
        return entries.size() < limit;
      });
      if (err)
        return failed(store_operation::scan, std::move(err));
    }
    return caf::make_message(std::move(entries));
  }

  caf::message status() {
    store_status result;
    result.path = db_->path().string();
    result.schema_version = db_->schema_version();
    result.batches_written = batches_written_;
    result.last_error = last_error_;
    result.write_failure = write_failure_;
    result.paused_writes = paused_writes_;
    for (auto f : all_families) {
      auto stats = db_->stats(f);
      if (!stats)
        return failed(store_operation::status, std::move(stats.error()));
      result.families.push_back(std::move(*stats));
    }
    return caf::make_message(std::move(result));
  }

  caf::message close() {
    if (auto err = db_->close())
      return failed(store_operation::close, std::move(err));
    return caf::make_message(atom::ok_v);
  }

  /// The hand-back of a write: from the end of its group commit to its answer.
  void handed_back(clock_type::time_point written) {
    telemetry_->store_handback().Observe(seconds(clock_type::now() - written));
  }

private:
  static double seconds(clock_type::duration elapsed) {
    return std::chrono::duration<double>(elapsed).count();
  }

  caf::error note(store_operation operation, caf::error err) {
    telemetry_->store_errors(operation).Increment();
    last_error_ = render(err);
    return err;
  }

  caf::message failed(store_operation operation, caf::error err) {
    return caf::make_message(note(operation, std::move(err)));
  }

  std::shared_ptr<store> db_;
  std::shared_ptr<metrics> telemetry_;
  uint64_t batches_written_ = 0;
  std::string last_error_;
  std::string write_failure_;
  uint64_t paused_writes_ = 0;
};

/// Whether `err` is the database refusing writes for now (a full disk, an I/O error) rather than
/// something wrong with the data, which no retry would fix.
bool stops_writes(const caf::error& err) {
  return err.category() == caf::atom("opforge") &&
         static_cast<errc>(err.code()) == errc::store_io_failed;
}

/// One request for the store's thread: a write, which joins the writes queued beside it in one
/// group commit, or any other call.
struct io_request {
  uint64_t id = 0;
  std::optional<write_batch> batch;
  std::function<caf::message(store_backend&)> call;
  /// Closes the database: the writes still held back are abandoned first.
  bool closes = false;
  /// When the actor took it: the start of a checkpoint's time in the store.
  clock_type::time_point taken = clock_type::now();
};

/// The plain thread that owns every database call. It serves requests in arrival order, except
/// that the writes that queued up while it was busy go to the database together, and that reads
/// go on while a failing database (a full disk) holds writes back: those wait, in order, and are
/// retried with backoff until the database takes them. So nothing is lost or applied twice, and a
/// writer (a session's checkpoint) pauses instead of failing.
class io_thread {
public:
  /// `written` is the end of the group commit that applied a write, and empty for the rest.
  using report = std::function<void(uint64_t id, caf::message outcome,
                                    std::optional<clock_type::time_point> written)>;

  io_thread(store_backend& backend, report done)
      : backend_{backend}, done_{std::move(done)}, thread_{[this] { run(); }} {}

  io_thread(const io_thread&) = delete;
  io_thread& operator=(const io_thread&) = delete;

  /// Serves every request still queued, then joins. Writes still held back are abandoned: their
  /// writers learn it from the actor.
  ~io_thread() {
    {
      std::lock_guard lock{mutex_};
      stopping_ = true;
    }
    wakeup_.notify_one();
    thread_.join();
  }

  void post(io_request request) {
    {
      std::lock_guard lock{mutex_};
      queue_.push_back(std::move(request));
    }
    wakeup_.notify_one();
  }

private:
  static constexpr auto first_retry = std::chrono::milliseconds{100};
  static constexpr auto last_retry = std::chrono::seconds{2};

  void run() {
    for (;;) {
      std::deque<io_request> requests;
      {
        std::unique_lock lock{mutex_};
        auto ready = [this] { return stopping_ || !queue_.empty(); };
        if (held_.ids.empty())
          wakeup_.wait(lock, ready);
        else
          wakeup_.wait_until(lock, next_retry_, ready);
        if (queue_.empty() && stopping_)
          return;
        requests.swap(queue_);
      }
      if (!held_.ids.empty() && std::chrono::steady_clock::now() >= next_retry_)
        retry();
      serve(requests);
    }
  }

  void serve(std::deque<io_request>& requests) {
    std::vector<io_request> group;
    for (auto& request : requests) {
      if (!request.batch) {
        commit(std::move(group));
        group.clear();
        if (request.closes)
          abandon_held();
        done_(request.id, request.call(backend_), std::nullopt);
      } else if (!store_backend::is_valid(*request.batch)) {
        // It writes nothing, so it need not wait for the writes before it.
        done_(request.id, backend_.write_alone(*request.batch), std::nullopt);
      } else {
        group.push_back(std::move(request));
      }
    }
    commit(std::move(group));
  }

  /// The requests of one group commit: their batches merged into one, in order, synced if any
  /// of them asks for it, so that concurrent checkpoints share one fsync. Every batch names
  /// known families (see `is_valid`), so the write fails only as a whole, for a reason none of
  /// the batches caused.
  struct group_commit {
    std::vector<uint64_t> ids;
    std::vector<clock_type::time_point> taken;
    write_batch batch;

    void add(io_request& request) {
      ids.push_back(request.id);
      taken.push_back(request.taken);
      auto& ops = request.batch->ops;
      batch.ops.insert(batch.ops.end(), std::make_move_iterator(ops.begin()),
                       std::make_move_iterator(ops.end()));
      batch.sync = batch.sync || request.batch->sync;
    }
  };

  void commit(std::vector<io_request> requests) {
    if (requests.empty())
      return;
    // While writes fail, later ones join the held group: they are applied after it, in order.
    if (!held_.ids.empty()) {
      for (auto& request : requests)
        held_.add(request);
      backend_.set_paused(failure_, held_.ids.size());
      return;
    }
    group_commit group;
    for (auto& request : requests)
      group.add(request);
    auto err = backend_.write_group(group.batch, group.taken);
    auto written = clock_type::now();
    if (!err) {
      for (auto id : group.ids)
        done_(id, caf::make_message(atom::ok_v), written);
      return;
    }
    if (!stops_writes(err)) {
      for (auto id : group.ids)
        done_(id, caf::make_message(err), std::nullopt);
      return;
    }
    held_ = std::move(group);
    failure_ = render(err);
    backend_.set_paused(failure_, held_.ids.size());
    delay_ = first_retry;
    next_retry_ = std::chrono::steady_clock::now() + delay_;
  }

  void retry() {
    auto err = backend_.resume();
    if (!err)
      err = backend_.write_group(held_.batch, held_.taken);
    if (err) {
      failure_ = render(err);
      backend_.set_paused(failure_, held_.ids.size());
      delay_ = std::min<std::chrono::milliseconds>(delay_ * 2, last_retry);
      next_retry_ = std::chrono::steady_clock::now() + delay_;
      return;
    }
    auto written = clock_type::now();
    for (auto id : std::exchange(held_, {}).ids)
      done_(id, caf::make_message(atom::ok_v), written);
    failure_.clear();
    backend_.set_paused({}, 0);
  }

  // A shutdown does not wait for the disk. A held write is at most a torn tail of the log, which
  // recovery drops, or whole, when only its sync failed: either way its writer (a session)
  // resumes from what the store has when the daemon starts again, and keys make a replay
  // idempotent.
  void abandon_held() {
    for (auto id : std::exchange(held_, {}).ids)
      done_(id,
            caf::make_message(caf::make_error(
                errc::store_io_failed, "the store closed while writes were failing (" + failure_ +
                                           "); this write may not have been applied")),
            std::nullopt);
    backend_.set_paused(failure_, 0);
  }

  store_backend& backend_;
  report done_;
  std::mutex mutex_;
  std::condition_variable wakeup_;
  std::deque<io_request> queue_;
  bool stopping_ = false;
  /// Touched only by the thread: writes held back while the database refuses writes, in order.
  group_commit held_;
  std::string failure_;
  std::chrono::milliseconds delay_ = first_retry;
  std::chrono::steady_clock::time_point next_retry_;
  std::thread thread_; // last: the thread starts once the members above exist
};

io_request closing_request(uint64_t id) {
  return {id, std::nullopt, [](store_backend& backend) { return backend.close(); }, true};
}

struct store_state {
  static inline const char* name = "store";

  store_state() = default;
  store_state(const store_state&) = delete;
  store_state& operator=(const store_state&) = delete;

  // Also reached when the actor ends without a shutdown request (an exit message, or no
  // references left): the thread still serves what is queued and closes the database before
  // `io` joins it (closing twice does nothing), and whoever waits for an answer learns that it
  // will not come, though the request may have been applied.
  ~store_state() {
    if (io)
      io->post(closing_request(next_request++));
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
  std::unique_ptr<io_thread> io; // last: destroyed first, joining the thread while `backend` exists
};

using store_pointer = store_actor::stateful_pointer<store_state>;

/// Queues `request` on the store's thread and returns the promise its outcome will fulfil.
template <class Reply>
caf::typed_response_promise<Reply> submit(store_pointer self, io_request request) {
  auto promise = self->make_response_promise<Reply>();
  auto& st = self->state;
  if (st.closing) {
    promise.deliver(caf::make_error(errc::store_io_failed, st.path, "the store is shutting down"));
    return promise;
  }
  request.id = st.next_request++;
  st.pending.emplace(request.id, promise);
  st.io->post(std::move(request));
  return promise;
}

template <class Reply, class Call>
caf::typed_response_promise<Reply> submit_call(store_pointer self, Call call) {
  return submit<Reply>(self, {0, std::nullopt, std::move(call)});
}

store_actor::behavior_type store_behavior(store_pointer self, std::shared_ptr<store> db,
                                          std::shared_ptr<metrics> telemetry,
                                          bool sync_every_batch) {
  auto& st = self->state;
  st.path = db->path().string();
  st.backend = std::make_unique<store_backend>(std::move(db), std::move(telemetry));
  // A weak reference: the thread must not keep the actor alive, or it would never terminate.
  st.io = std::make_unique<io_thread>(
      *st.backend, [owner = self->address()](uint64_t id, caf::message outcome,
                                             std::optional<clock_type::time_point> written) {
        // The steady clock's count, as the message crosses threads of this process only; 0 for
        // anything but an applied write.
        auto written_ticks = written ? written->time_since_epoch().count() : 0;
        if (auto actor = caf::actor_cast<store_actor>(owner))
          caf::anon_send(actor, atom::io_done_v, id, std::move(outcome),
                         static_cast<int64_t>(written_ticks));
      });
  return {
      [self, sync_every_batch](atom::write, write_batch& batch) {
        batch.sync = batch.sync || sync_every_batch;
        return submit<atom::ok>(self, {0, std::move(batch), nullptr});
      },
      [self](atom::get, family f, std::string& key) {
        return submit_call<stored_value>(self, [f, key = std::move(key)](store_backend& backend) {
          return backend.get(f, key);
        });
      },
      [self](atom::scan, family f, std::string& prefix, uint64_t limit) {
        return submit_call<std::vector<key_value>>(
            self, [f, prefix = std::move(prefix), limit](store_backend& backend) {
              return backend.scan(f, prefix, {}, limit);
            });
      },
      [self](atom::scan, family f, std::string& prefix, std::string& after, uint64_t limit) {
        return submit_call<std::vector<key_value>>(
            self, [f, prefix = std::move(prefix), after = std::move(after), limit](
                      store_backend& backend) { return backend.scan(f, prefix, after, limit); });
      },
      [self](atom::status) {
        return submit_call<store_status>(self,
                                         [](store_backend& backend) { return backend.status(); });
      },
      [self](atom::shutdown) {
        auto promise = submit<atom::ok>(self, closing_request(0));
        self->state.closing = true;
        return promise;
      },
      [self](atom::io_done, uint64_t id, caf::message& outcome, int64_t written_ticks) {
        auto& st = self->state;
        if (written_ticks != 0)
          st.backend->handed_back(clock_type::time_point{clock_type::duration{written_ticks}});
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
                                       std::shared_ptr<metrics> telemetry, bool sync_every_batch) {
  if (!telemetry)
    return caf::make_error(errc::request_invalid, dir.string(), "spawn_store needs metrics");
  auto db = open_rocksdb_store(dir);
  if (!db)
    return std::move(db.error());
  return sys.spawn(store_behavior, std::shared_ptr<store>{std::move(*db)}, std::move(telemetry),
                   sync_every_batch);
}

} // namespace opforge
