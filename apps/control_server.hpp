#pragma once

// The control socket: a plain thread that owns a ZeroMQ REP socket (sockets never live in actors),
// decodes each request with the bounded msgpack codec, answers it, and never dies of bad input.
// The requests and replies are documented in messages/PROTOCOL.md, section "Control socket".

#include "apps/control_protocol.hpp"
#include "config/config.hpp"
#include "messages/actors.hpp"
#include "messages/msgpack_codec.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

namespace opforge {

/// What the daemon tells the control server at start: facts for `status`, the actors it asks, and
/// how to ask the daemon to stop.
struct control_context {
  caf::actor_system* system = nullptr;
  store_actor store;
  device_manager_actor devices;
  campaign_manager_actor campaigns;
  library_actor library;
  std::string version;
  config cfg;
  /// host:port the metrics endpoint actually listens on; empty when disabled.
  std::string metrics_address;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  /// Called once the reply to a `shutdown` request has been sent.
  std::function<void()> request_shutdown;
  importer_actor importer;
  maintenance_actor maintenance; // may be null: no `revalidate`, no maintenance in `status`
  /// The LLM endpoints by name, in configured order: `status` shows each.
  std::vector<std::pair<std::string, llm_endpoint_actor>> llm_endpoints;
};

class control_server {
public:
  /// Binds cfg.control.listen on a new thread and serves requests until destroyed. Fails with
  /// errc::config_address_unusable when the endpoint cannot be bound.
  static caf::expected<std::unique_ptr<control_server>> start(zmq::context_t& zmq,
                                                              control_context context);

  /// Stops taking requests and joins the thread.
  ~control_server();

  control_server(const control_server&) = delete;
  control_server& operator=(const control_server&) = delete;

  /// One encoded reply, and whether it accepted a shutdown.
  struct answer_type {
    std::string reply;
    bool shutdown = false;
  };

  /// Answers one encoded request; never throws.
  answer_type answer(std::string_view request);

private:
  explicit control_server(control_context context);

  void serve(zmq::socket_t& socket);

  nlohmann::json status() const;
  nlohmann::json workers() const;
  /// `run`, `campaign`, `campaigns` and `cancel`: what the campaign manager says.
  nlohmann::json campaigns(request_type type, const wire::map_reader& fields) const;
  /// `kernels`: the library's kernels, of one operator or all.
  nlohmann::json kernels(const wire::map_reader& fields) const;
  /// `regressions`: kernels that passed on one toolchain and fail on a later one, and kernels
  /// that run slower on a later one (speed regressions, with their times on both).
  nlohmann::json regressions() const;
  /// `revalidate`: re-validation asked by hand of a device kind and fingerprint ("" = each live
  /// one); what it owes.
  nlohmann::json revalidate(const wire::map_reader& fields) const;
  /// `repair`: starts the campaigns that repair the regressions and speed regressions (of one
  /// fingerprint, or all).
  nlohmann::json repair(const wire::map_reader& fields) const;
  /// `export`: the library_bundle for a device kind (default: the campaigns') and fingerprint.
  nlohmann::json bundle(const wire::map_reader& fields) const;
  /// `report`: coverage, curves, failures and costs of one campaign or all, as JSON and HTML.
  nlohmann::json report(const wire::map_reader& fields) const;

  /// The slowdown that makes a speed regression (maintenance.speed_regression_percent).
  double speed_threshold() const;

  control_context context_;
  int wakeup_fd_ = -1;
  std::thread thread_;
};

} // namespace opforge
