#pragma once

// Typed messages of the workers socket (messages/PROTOCOL.md, version 1): one struct per message
// type, `encode` to one msgpack frame, and bounded decoders that check the version, the type and
// every required key. Kind-specific job payloads stay msgpack bytes: the device layer moves them
// and never interprets them.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/meta/type_name.hpp>

namespace opforge::wire {

inline constexpr int64_t protocol_version = 1;
inline constexpr size_t default_max_frame_bytes = size_t{16} << 20;

// -- worker -> daemon ----------------------------------------------------------------------------

struct hello {
  std::string worker_id{};   // also the worker's ZeroMQ routing identity
  std::string role{};        // device or lint
  std::string device_kind{}; // cuda, interpreter, none
  std::string device_name{};
  int64_t slots = 1;
  std::vector<std::string> jobs{}; // job kinds served: test, lint, catalog, benchmark
  std::map<std::string, std::string> toolchain{};
  std::string fingerprint{};
  std::string host{};
  int64_t pid = 0;

  bool operator==(const hello&) const = default;
};

struct worker_heartbeat {
  int64_t busy = 0;

  bool operator==(const worker_heartbeat&) const = default;
};

struct result {
  std::string job_id{};
  std::string status{};  // done, failed, cancelled
  std::string payload{}; // one msgpack map
  std::string error{};
  int64_t elapsed_ms = 0;

  bool operator==(const result&) const = default;
};

// Sent both ways: a worker that leaves, or a daemon that shuts down.
struct goodbye {
  std::string reason{};

  bool operator==(const goodbye&) const = default;
};

// -- daemon -> worker ----------------------------------------------------------------------------

struct welcome {
  int64_t heartbeat_ms = 1000;
  int64_t liveness = 3;

  bool operator==(const welcome&) const = default;
};

struct daemon_heartbeat {
  bool operator==(const daemon_heartbeat&) const = default;
};

struct job {
  std::string job_id{};
  std::string kind{};
  int64_t attempt = 1;
  int64_t deadline_ms = 0;
  std::string payload{}; // one msgpack map

  bool operator==(const job&) const = default;
};

struct cancel {
  std::string job_id{};

  bool operator==(const cancel&) const = default;
};

struct hello_required {
  bool operator==(const hello_required&) const = default;
};

using worker_message = std::variant<hello, worker_heartbeat, result, goodbye>;
using daemon_message =
    std::variant<welcome, daemon_heartbeat, job, cancel, hello_required, goodbye>;

// -- encoding ------------------------------------------------------------------------------------

std::string encode(const hello& msg);
std::string encode(const worker_heartbeat& msg);
std::string encode(const result& msg);
std::string encode(const goodbye& msg);
std::string encode(const welcome& msg);
std::string encode(const daemon_heartbeat& msg);
std::string encode(const job& msg);
std::string encode(const cancel& msg);
std::string encode(const hello_required& msg);

// -- decoding ------------------------------------------------------------------------------------

/// Decodes a frame a worker sent. Errors carry the malformed-frame reason (see `malformed_reason`)
/// and a message naming what was wrong, e.g. "hello: missing key 'slots'".
caf::expected<worker_message> decode_worker_message(std::string_view frame, size_t max_frame_bytes);

/// Decodes a frame the daemon sent (what a worker, or a test playing one, receives).
caf::expected<daemon_message> decode_daemon_message(std::string_view frame, size_t max_frame_bytes);

/// An error for a frame dropped for `reason`, with `what` saying why.
caf::error malformed_frame(std::string reason, std::string what);

/// The label of a decode error for opforge_malformed_frames_total{reason}: oversized, not_msgpack,
/// not_map, version_mismatch, unknown_type, missing_key, bad_key (and the I/O thread's multipart,
/// identity_mismatch).
std::string malformed_reason(const caf::error& err);

/// A routing identity for logs: as it is when printable, else hex (ZeroMQ identities are binary).
std::string printable_identity(std::string_view identity);

/// Checks that `payload` is one msgpack map within `max_bytes` (an empty string counts as `{}`).
caf::error check_payload(std::string_view payload, size_t max_bytes);

// -- CAF inspection of the messages the I/O thread hands to actors --------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hello& x) {
  return f(caf::meta::type_name("hello"), x.worker_id, x.role, x.device_kind, x.device_name,
           x.slots, x.jobs, x.toolchain, x.fingerprint, x.host, x.pid);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_heartbeat& x) {
  return f(caf::meta::type_name("worker_heartbeat"), x.busy);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, result& x) {
  return f(caf::meta::type_name("result"), x.job_id, x.status, x.payload, x.error, x.elapsed_ms);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, goodbye& x) {
  return f(caf::meta::type_name("goodbye"), x.reason);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job& x) {
  return f(caf::meta::type_name("job"), x.job_id, x.kind, x.attempt, x.deadline_ms, x.payload);
}

} // namespace opforge::wire
