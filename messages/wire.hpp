#pragma once

// The workers socket (messages/PROTOCOL.md): the frames are generated from messages/contract.yaml
// (messages/contract.hpp: one struct per frame type, `encode` to one msgpack frame); here are the
// bounded decoders, which check the size, the version, the type and every field of a frame.
// Kind-specific job payloads stay msgpack bytes: the device layer moves them and never
// interprets them.

#include "messages/contract.hpp"
#include "messages/msgpack_codec.hpp"

#include <cstddef>
#include <string>
#include <string_view>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace opforge::wire {

inline constexpr size_t default_max_frame_bytes = size_t{16} << 20;

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

/// A struct of the contract (a job payload or result) from msgpack bytes, within `max_bytes`.
/// Errors are as a frame's, e.g. "test_result: missing key 'outcome'" (`what` names the struct).
template <class T>
caf::expected<T> decode_as(std::string_view bytes, std::string_view what,
                           size_t max_bytes = default_max_frame_bytes) {
  auto handle = unpack(bytes, unpack_limits{.max_bytes = max_bytes});
  if (!handle)
    return handle.error();
  T out;
  if (auto bad = read_value(handle->get(), out))
    return malformed_frame(bad->reason, std::string{what} + ": " + bad->message());
  return out;
}

/// Checks that `payload` is one msgpack map within `max_bytes` (an empty string counts as `{}`).
caf::error check_payload(std::string_view payload, size_t max_bytes);

} // namespace opforge::wire
