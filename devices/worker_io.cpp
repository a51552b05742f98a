#include "devices/worker_io.hpp"

#include "messages/device_messages.hpp"
#include "messages/errors.hpp"
#include "messages/wire.hpp"

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>

#include <caf/send.hpp>

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq_addon.hpp>

namespace opforge {

namespace {

// Frames a sender can flood in before the thread turns to its outbound queue again.
constexpr int receive_batch = 256;

// Once this many (sender, reason) pairs have been logged, new ones are only counted: random
// identities must not grow memory without bound.
constexpr size_t logged_senders_max = 4096;

// The daemon's goodbyes are the last frames out; they get this long to leave before the socket
// closes (linger is 0 otherwise, so that nothing else can hold up a shutdown).
constexpr int goodbye_linger_ms = 250;

// The address libzmq sends ZAP requests to (RFC 27), and where the socket's monitor publishes.
constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";
constexpr const char* monitor_endpoint = "inproc://opforge-workers-monitor";

// Handshakes that fail before ZAP is asked: a peer without CURVE, or with another server key.
constexpr int handshake_failures =
    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;

std::string bind_hint(int err) {
  switch (err) {
  case EADDRINUSE:
    return "another process holds it (an opforge serve already running?): stop it or set "
           "workers.listen to a free address";
  case EADDRNOTAVAIL:
  case ENODEV:
    return "no local interface has that address: use 0.0.0.0, 127.0.0.1 or one of this host's "
           "addresses";
  default:
    return "expected an endpoint like tcp://0.0.0.0:5555 or ipc:///run/opforge/workers.sock";
  }
}

} // namespace

worker_io::worker_io(std::shared_ptr<metrics> metrics, size_t max_frame_bytes, int wake_fd,
                     worker_auth auth)
    : metrics_{std::move(metrics)}, max_frame_bytes_{max_frame_bytes}, context_{1},
      socket_{context_, zmq::socket_type::router}, auth_{std::move(auth)}, wake_fd_{wake_fd} {
  socket_.set(zmq::sockopt::linger, 0);
  // An unreachable worker is an error to report, not a frame to drop silently.
  socket_.set(zmq::sockopt::router_mandatory, 1);
  // A reconnecting worker keeps its identity (its worker_id) and takes over the old connection.
  socket_.set(zmq::sockopt::router_handover, 1);
  // libzmq buffers a whole message before we see it: frames beyond twice our limit are cut off
  // (the peer is disconnected) before they use the memory; smaller oversized ones are counted.
  socket_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(2 * max_frame_bytes));
}

// Makes the socket a CURVE server whose handshakes ask our ZAP handler; before it binds, so that
// no peer ever connects unauthenticated.
void worker_io::secure() {
  zap_ = zmq::socket_t{context_, zmq::socket_type::rep};
  zap_.set(zmq::sockopt::linger, 0);
  zap_.bind(zap_endpoint);
  socket_.set(zmq::sockopt::curve_server, 1);
  socket_.set(zmq::sockopt::curve_secretkey, auth_.server->secret_key);
  socket_.set(zmq::sockopt::zap_domain, "opforge-workers");
  if (zmq_socket_monitor(socket_.handle(), monitor_endpoint, handshake_failures) != 0)
    throw zmq::error_t{};
  monitor_ = zmq::socket_t{context_, zmq::socket_type::pair};
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(monitor_endpoint);
}

worker_io::~worker_io() {
  close();
  ::close(wake_fd_);
}

caf::expected<std::shared_ptr<worker_io>> worker_io::bind(std::shared_ptr<metrics> metrics,
                                                          size_t max_frame_bytes,
                                                          const std::string& endpoint,
                                                          worker_auth auth) {
  auto context = "workers.listen '" + endpoint + "'";
  auto wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0)
    return caf::make_error(errc::unspecified,
                           context + ": cannot create an eventfd: " + std::strerror(errno));
  std::shared_ptr<worker_io> io;
  try {
    io.reset(new worker_io{std::move(metrics), max_frame_bytes, wake_fd, std::move(auth)});
    if (io->auth_.server) {
      try {
        io->secure();
      } catch (const zmq::error_t& e) {
        return caf::make_error(errc::config_invalid,
                               context + ": cannot set up CURVE (" + e.what() +
                                   "): is libzmq built with CURVE (zmq_has(\"curve\"))?");
      }
    }
    io->socket_.bind(endpoint);
  } catch (const zmq::error_t& e) {
    if (!io)
      ::close(wake_fd);
    return caf::make_error(errc::config_invalid,
                           context + ": cannot bind (" + e.what() + "): " + bind_hint(e.num()));
  }
  io->endpoint_ = io->socket_.get(zmq::sockopt::last_endpoint);
  spdlog::info("workers socket bound to {} ({})", io->endpoint_,
               io->auth_.server ? "CURVE: workers on the allow-list only"
                                : "unauthenticated: any local peer may register");
  return io;
}

void worker_io::start(device_manager_actor receiver) {
  // From here on the socket belongs to the thread (thread creation is the memory barrier ZeroMQ
  // asks for when a socket changes threads).
  thread_ = std::thread{[this, receiver] { run(receiver); }};
}

void worker_io::send(const std::string& identity, std::string frame) {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    if (closing_)
      return;
    outbound_.emplace_back(identity, std::move(frame));
  }
  wake();
}

void worker_io::close() {
  {
    std::lock_guard<std::mutex> guard{mutex_};
    closing_ = true;
  }
  wake();
  std::call_once(joined_, [this] {
    if (thread_.joinable())
      thread_.join();
  });
}

std::string worker_io::endpoint() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return endpoint_;
}

void worker_io::wake() {
  uint64_t one = 1;
  // A full counter (2^64 - 2 pending wakes) still wakes the thread, so a failed write loses
  // nothing.
  [[maybe_unused]] auto written = ::write(wake_fd_, &one, sizeof one);
}

void worker_io::run(device_manager_actor receiver) {
  std::vector<zmq_pollitem_t> items{{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                    {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
  if (auth_.server) {
    items.push_back({zap_.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({monitor_.handle(), 0, ZMQ_POLLIN, 0});
  }
  for (;;) {
    try {
      zmq::poll(items, std::chrono::milliseconds{-1});
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR)
        continue;
      spdlog::critical("workers socket: poll failed ({}); the I/O thread stops", e.what());
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t wakes = 0;
      [[maybe_unused]] auto read = ::read(wake_fd_, &wakes, sizeof wakes);
    }
    try {
      if (auth_.server && items[2].revents & ZMQ_POLLIN)
        authenticate();
      if (auth_.server && items[3].revents & ZMQ_POLLIN)
        count_failed_handshakes();
    } catch (const zmq::error_t& e) {
      spdlog::error("workers socket: authenticating failed: {}", e.what());
    }
    if (items[0].revents & ZMQ_POLLIN) {
      try {
        receive(receiver);
      } catch (const zmq::error_t& e) {
        spdlog::error("workers socket: receiving failed: {}", e.what());
      }
    }
    if (!flush(receiver))
      break;
  }
  if (auth_.server) {
    zmq_socket_monitor(socket_.handle(), nullptr, 0);
    monitor_.close();
  }
  socket_.set(zmq::sockopt::linger, goodbye_linger_ms);
  socket_.close();
  // The ZAP handler outlives the socket's last handshake.
  if (auth_.server)
    zap_.close();
}

// Answers libzmq's ZAP requests (RFC 27): a CURVE peer is admitted when the allow-list has its
// public key. Frames: version, request id, domain, address, routing id, mechanism, credentials.
void worker_io::authenticate() {
  for (;;) {
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(zap_, std::back_inserter(request), zmq::recv_flags::dontwait))
      return;
    std::string status = "400";
    std::string text = "CURVE required";
    std::string user;
    if (request.size() >= 7 && request[5].to_string_view() == "CURVE" && request[6].size() == 32) {
      std::array<char, 41> key{};
      zmq_z85_encode(key.data(), request[6].data<uint8_t>(), 32);
      if (auto name = auth_.allowed ? auth_.allowed->admits(key.data()) : std::nullopt) {
        status = "200";
        text = "OK";
        user = *name;
      } else {
        text = "key not on the allow-list";
        refuse(auth_refusal::unknown_key, std::string{"key "} + key.data() + " from " +
                                              std::string{request[3].to_string_view()});
      }
    }
    auto request_id = request.size() > 1 ? std::string{request[1].to_string_view()} : "";
    std::array<zmq::const_buffer, 6> reply{zmq::str_buffer("1.0"), zmq::buffer(request_id),
                                           zmq::buffer(status),    zmq::buffer(text),
                                           zmq::buffer(user),      zmq::const_buffer{}};
    zmq::send_multipart(zap_, reply);
  }
}

// The monitor sends two frames per event: 16-bit event id and 32-bit value, then the endpoint.
void worker_io::count_failed_handshakes() {
  for (;;) {
    std::vector<zmq::message_t> event;
    if (!zmq::recv_multipart(monitor_, std::back_inserter(event), zmq::recv_flags::dontwait))
      return;
    refuse(auth_refusal::handshake, "a peer (no CURVE, or not this daemon's server key) on " +
                                        (event.size() > 1 ? event[1].to_string() : endpoint()));
  }
}

// Counts a refused connection and logs it once per `who` (a public key and an address; no secret
// ever gets here): a peer that keeps retrying must not flood the log.
void worker_io::refuse(auth_refusal why, const std::string& who) {
  metrics_->worker_auth_refused(why).Increment();
  auto reason = to_string(why);
  if (logged_.size() >= logged_senders_max || !logged_.emplace(who, reason).second)
    return;
  spdlog::warn(
      "workers socket refused {}: {} (further refusals are counted in "
      "opforge_worker_auth_refused_total{{reason=\"{}\"}}, not logged)",
      who, why == auth_refusal::unknown_key ? "not on the allow-list" : "CURVE handshake failed",
      reason);
}

void worker_io::receive(const device_manager_actor& receiver) {
  for (int i = 0; i < receive_batch; ++i) {
    zmq::message_t identity;
    if (!socket_.recv(identity, zmq::recv_flags::dontwait))
      return;
    // The parts of one message arrive together: after the identity, none of these can block.
    zmq::message_t body;
    size_t parts = 0;
    while (socket_.get(zmq::sockopt::rcvmore)) {
      zmq::message_t part;
      if (!socket_.recv(part, zmq::recv_flags::dontwait))
        break;
      if (parts++ == 0)
        body = std::move(part);
    }
    deliver(identity.to_string(), body, parts, receiver);
  }
}

void worker_io::deliver(const std::string& identity, const zmq::message_t& body, size_t parts,
                        const device_manager_actor& receiver) {
  if (parts != 1) {
    reject(identity,
           wire::malformed_frame("multipart", "expected one frame, got " + std::to_string(parts)));
    return;
  }
  auto message = wire::decode_worker_message(body.to_string_view(), max_frame_bytes_);
  if (!message) {
    reject(identity, message.error());
    return;
  }
  if (auto* hello = std::get_if<wire::hello>(&*message); hello && hello->worker_id != identity) {
    // Reconnects are recognised by identity, so a worker must connect with its worker_id.
    reject(identity,
           wire::malformed_frame("identity_mismatch", "hello: worker_id '" + hello->worker_id +
                                                          "' is not the routing identity (set "
                                                          "ZMQ_ROUTING_ID to the worker_id)"));
    return;
  }
  std::visit([&](auto& msg) { caf::anon_send(receiver, identity, std::move(msg)); }, *message);
}

void worker_io::reject(const std::string& identity, const caf::error& err) {
  auto reason = wire::malformed_reason(err);
  metrics_->malformed_frames(reason).Increment();
  if (logged_.size() >= logged_senders_max || !logged_.emplace(identity, reason).second)
    return;
  spdlog::warn("dropped a frame from {}: {} (further {} frames from it are counted in "
               "opforge_malformed_frames_total, not logged)",
               wire::printable_identity(identity), render(err), reason);
}

// Sends what actors queued; false once the queue is closed and drained.
bool worker_io::flush(const device_manager_actor& receiver) {
  std::vector<std::pair<std::string, std::string>> batch;
  bool closing = false;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    batch.swap(outbound_);
    closing = closing_;
  }
  std::set<std::string> reported;
  auto unreachable = [&](const std::string& identity, const char* reason) {
    if (reported.insert(identity).second)
      caf::anon_send(receiver, atom::disconnected_v, identity, std::string{reason});
  };
  for (auto& [identity, frame] : batch) {
    try {
      if (!socket_.send(zmq::buffer(identity),
                        zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        unreachable(identity, "not reading (send queue full)");
        continue;
      }
      socket_.send(zmq::buffer(frame), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH)
        unreachable(identity, "connection lost");
      else
        spdlog::error("workers socket: sending to {} failed: {}",
                      wire::printable_identity(identity), e.what());
    }
  }
  return !closing;
}

} // namespace opforge
