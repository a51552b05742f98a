#include "messages/wire.hpp"

#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <variant>

namespace opforge::wire {

namespace {

// The one-line text of an error from the msgpack codec (its context is a single string).
std::string context_text(const caf::error& err) {
  auto& context = err.context();
  if (!context.empty() && context.match_element<std::string>(context.size() - 1))
    return context.get_as<std::string>(context.size() - 1);
  return render(err);
}

// The alternative of `Message` whose frame type is `type`, read from `map` (unknown keys are
// ignored: forward compatibility).
template <class Message, size_t N, size_t... I>
caf::expected<Message> decode_fields(const std::array<std::string_view, N>& types,
                                     std::string_view type, const msgpack::object& map,
                                     std::index_sequence<I...>) {
  caf::expected<Message> out =
      malformed_frame("unknown_type", "unknown message type '" + std::string{type} + "'");
  auto try_one = [&]<size_t Index>() {
    if (types[Index] != type)
      return false;
    std::variant_alternative_t<Index, Message> msg;
    if (auto bad = read_value(map, msg))
      out = malformed_frame(bad->reason, std::string{type} + ": " + bad->message());
    else
      out = Message{std::move(msg)};
    return true;
  };
  (try_one.template operator()<I>() || ...);
  return out;
}

// Checks size, msgpack, map, `v` and `type` in that order, then reads the fields of the type.
template <class Message, size_t N>
caf::expected<Message> decode_frame(std::string_view frame, size_t max_frame_bytes,
                                    const std::array<std::string_view, N>& types) {
  auto handle = unpack(frame, unpack_limits{.max_bytes = max_frame_bytes});
  if (!handle)
    return malformed_frame(handle.error() == errc::frame_oversized ? "oversized" : "not_msgpack",
                           context_text(handle.error()));
  auto map = map_reader::of(handle->get());
  if (!map)
    return malformed_frame("not_map", context_text(map.error()));
  auto version = map->integer("v");
  if (!version)
    return malformed_frame(map->find("v") ? "bad_key" : "missing_key",
                           "frame: " + context_text(version.error()));
  auto type = map->string("type");
  if (!type)
    return malformed_frame(map->find("type") ? "bad_key" : "missing_key",
                           "frame: " + context_text(type.error()));
  if (*version != protocol_version)
    return malformed_frame("version_mismatch", "protocol version " + std::to_string(*version) +
                                                   ", expected " +
                                                   std::to_string(protocol_version));
  return decode_fields<Message>(types, *type, handle->get(),
                                std::make_index_sequence<std::variant_size_v<Message>>{});
}

} // namespace

// -- decoding ------------------------------------------------------------------------------------

caf::expected<worker_message> decode_worker_message(std::string_view frame,
                                                    size_t max_frame_bytes) {
  return decode_frame<worker_message>(frame, max_frame_bytes, worker_frame_types);
}

caf::expected<daemon_message> decode_daemon_message(std::string_view frame,
                                                    size_t max_frame_bytes) {
  return decode_frame<daemon_message>(frame, max_frame_bytes, daemon_frame_types);
}

caf::error malformed_frame(std::string reason, std::string what) {
  auto code = reason == "oversized"          ? errc::frame_oversized
              : reason == "version_mismatch" ? errc::frame_version_mismatch
              : reason == "unknown_type"     ? errc::frame_unknown_type
                                             : errc::frame_malformed;
  return caf::make_error(code, std::move(reason), std::move(what));
}

std::string malformed_reason(const caf::error& err) {
  auto& context = err.context();
  if (context.size() == 2 && context.match_element<std::string>(0))
    return context.get_as<std::string>(0);
  return err == errc::frame_oversized ? "oversized" : "not_msgpack";
}

std::string printable_identity(std::string_view identity) {
  auto printable =
      std::all_of(identity.begin(), identity.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (printable && !identity.empty())
    return std::string{identity};
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex = "0x";
  for (unsigned char c : identity) {
    hex += digits[c >> 4];
    hex += digits[c & 0xf];
  }
  return hex;
}

caf::error check_payload(std::string_view payload, size_t max_bytes) {
  if (payload.empty())
    return {};
  auto handle = unpack(payload, unpack_limits{.max_bytes = max_bytes});
  if (!handle)
    return caf::make_error(errc::request_invalid, "payload: " + context_text(handle.error()));
  if (handle->get().type != msgpack::type::MAP)
    return caf::make_error(errc::request_invalid,
                           std::string{"payload: expected a msgpack map, got "} +
                               type_name(handle->get()));
  return {};
}

} // namespace opforge::wire
