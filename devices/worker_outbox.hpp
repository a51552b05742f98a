#pragma once

#include <string>

namespace opforge {

/// Where actors put frames for workers. Actors never touch sockets (CAF moves them between
/// threads): in the daemon this is the I/O thread's queue (`worker_io`), in tests a recorder.
class worker_outbox {
public:
  virtual ~worker_outbox() = default;

  /// Queues one encoded frame for the worker with this routing identity. Thread-safe; never
  /// blocks on the network.
  virtual void send(const std::string& identity, std::string frame) = 0;

  /// Sends what is queued, then stops; frames queued later are dropped. Idempotent.
  virtual void close() = 0;

  /// The endpoint workers connect to, as bound (a `*` port resolved).
  virtual std::string endpoint() const = 0;
};

} // namespace opforge
