#pragma once

#include "devices/curve.hpp"
#include "devices/worker_outbox.hpp"
#include "messages/actors.hpp"
#include "messages/metrics.hpp"

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <caf/error.hpp>

#include <zmq.hpp>

namespace opforge {

/// How the workers socket admits workers. With `server` set, by CURVE: a worker must know the
/// server's public key and hold a key pair whose public key `allowed` admits; the ZAP handler
/// that asks `allowed` runs on the I/O thread. Without, any peer (the configuration allows that
/// only on ipc or loopback).
struct worker_auth {
  std::optional<curve::key_pair> server;
  std::shared_ptr<const curve::allow_list> allowed;
};

/// The one thread that owns the workers' ZeroMQ ROUTER socket. It decodes every frame (bounded,
/// see wire::decode_worker_message), hands good ones to the device manager as typed messages,
/// and counts, logs once per sender and reason, and drops bad ones. Actors queue outbound frames
/// through `send`, which wakes the thread through an eventfd.
class worker_io final : public worker_outbox {
public:
  /// Creates the socket and binds it to `endpoint` (`tcp://127.0.0.1:*` picks a free port).
  /// Errors (errc::config_invalid) name the address and what to do about it.
  static caf::expected<std::shared_ptr<worker_io>> bind(std::shared_ptr<metrics> metrics,
                                                        size_t max_frame_bytes,
                                                        const std::string& endpoint,
                                                        worker_auth auth = {});

  ~worker_io() override;

  worker_io(const worker_io&) = delete;
  worker_io& operator=(const worker_io&) = delete;

  /// Starts the thread, which delivers what workers send to `receiver`.
  void start(device_manager_actor receiver);

  void send(const std::string& identity, std::string frame) override;
  void close() override;
  std::string endpoint() const override;

private:
  worker_io(std::shared_ptr<metrics> metrics, size_t max_frame_bytes, int wake_fd,
            worker_auth auth);

  void secure();

  void run(device_manager_actor receiver);
  void receive(const device_manager_actor& receiver);
  void deliver(const std::string& identity, const zmq::message_t& body, size_t parts,
               const device_manager_actor& receiver);
  void reject(const std::string& identity, const caf::error& err);
  void authenticate();
  void count_failed_handshakes();
  void refuse(auth_refusal why, const std::string& who);
  bool flush(const device_manager_actor& receiver);
  void wake();

  std::shared_ptr<metrics> metrics_;
  size_t max_frame_bytes_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  worker_auth auth_;
  zmq::socket_t zap_;     // ZAP requests from libzmq's CURVE handshakes, with auth_.server
  zmq::socket_t monitor_; // socket_'s handshake failures, with auth_.server
  int wake_fd_ = -1;
  std::set<std::pair<std::string, std::string>> logged_; // (identity, reason), I/O thread only

  mutable std::mutex mutex_; // guards what follows
  std::vector<std::pair<std::string, std::string>> outbound_;
  bool closing_ = false;
  std::string endpoint_;

  std::once_flag joined_;
  std::thread thread_;
};

} // namespace opforge
