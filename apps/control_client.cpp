#include "apps/control_client.hpp"

#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"
#include "messages/wire.hpp"

#include <cerrno>
#include <cstring>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.hpp>

namespace opforge {

namespace {

// Replies list whole libraries (`kernels`, an `export` bundle with every source): larger than any
// worker frame, still bounded.
const wire::unpack_limits reply_limits{size_t{256} << 20, size_t{1} << 22, 32};

caf::error unreachable(const std::string& endpoint) {
  return caf::make_error(errc::daemon_unreachable,
                         "no daemon answers at " + endpoint + " (start one with `opforge serve`)");
}

// ZeroMQ connects lazily and retries forever; for a local socket the kernel can say at once
// whether anybody listens, or whether the user may not talk to it, which spares the user the
// receive timeout and a misleading "no daemon answers".
caf::error check_ipc(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) != 0)
    return {};
  auto path = endpoint.substr(6);
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path)
    return {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return {};
  int failure = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ? errno : 0;
  ::close(fd);
  if (failure == EACCES || failure == EPERM)
    return caf::make_error(errc::permission_denied,
                           "permission denied on " + path + ": the daemon's data directory and " +
                               "control socket belong to the user who runs it (run as that "
                               "user, or choose another --data-dir)");
  if (failure != 0)
    return unreachable(endpoint);
  return {};
}

nlohmann::json to_json(const msgpack::object& obj) {
  switch (obj.type) {
  case msgpack::type::NIL:
    return nullptr;
  case msgpack::type::BOOLEAN:
    return obj.via.boolean;
  case msgpack::type::POSITIVE_INTEGER:
    return obj.via.u64;
  case msgpack::type::NEGATIVE_INTEGER:
    return obj.via.i64;
  case msgpack::type::FLOAT32:
  case msgpack::type::FLOAT64:
    return obj.via.f64;
  case msgpack::type::STR:
    return std::string{obj.via.str.ptr, obj.via.str.size};
  case msgpack::type::BIN: {
    auto bytes = reinterpret_cast<const uint8_t*>(obj.via.bin.ptr);
    nlohmann::json::binary_t::container_type raw(bytes, bytes + obj.via.bin.size);
    return nlohmann::json::binary(std::move(raw));
  }
  case msgpack::type::ARRAY: {
    auto out = nlohmann::json::array();
    for (uint32_t i = 0; i < obj.via.array.size; ++i)
      out.push_back(to_json(obj.via.array.ptr[i]));
    return out;
  }
  case msgpack::type::MAP: {
    auto out = nlohmann::json::object();
    for (uint32_t i = 0; i < obj.via.map.size; ++i) {
      auto& kv = obj.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR)
        out[std::string{kv.key.via.str.ptr, kv.key.via.str.size}] = to_json(kv.val);
    }
    return out;
  }
  default:
    return wire::type_name(obj);
  }
}

} // namespace

caf::expected<nlohmann::json> control_request(const std::string& endpoint, request_type type,
                                              nlohmann::json request,
                                              std::chrono::milliseconds timeout) {
  request["type"] = to_string(type);
  request["v"] = wire::protocol_version;
  auto bytes = nlohmann::json::to_msgpack(request);
  if (bytes.size() > control_max_request_bytes)
    return caf::make_error(errc::request_invalid,
                           "the request is " + std::to_string(bytes.size()) +
                               " bytes; the control socket takes at most " +
                               std::to_string(control_max_request_bytes) + " bytes (" +
                               std::to_string(control_max_request_bytes >> 20) + " MiB)");
  if (auto err = check_ipc(endpoint))
    return err;
  zmq::context_t zmq;
  zmq::socket_t socket{zmq, zmq::socket_type::req};
  zmq::message_t reply;
  try {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, static_cast<int>(timeout.count()));
    socket.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
    socket.connect(endpoint);
    if (!socket.send(zmq::buffer(bytes), zmq::send_flags::none) || !socket.recv(reply))
      return unreachable(endpoint);
  } catch (const zmq::error_t& e) {
    return caf::make_error(errc::daemon_unreachable,
                           "cannot reach a daemon at " + endpoint + ": " + e.what());
  }
  auto invalid = [](const caf::error& err) {
    return caf::make_error(errc::request_invalid,
                           "the daemon's reply is not valid: " + render(err));
  };
  auto handle = wire::unpack(reply.to_string_view(), reply_limits);
  if (!handle)
    return invalid(handle.error());
  auto fields = wire::map_reader::of(handle->get());
  if (!fields)
    return invalid(fields.error());
  auto ok = fields->boolean("ok");
  if (!ok)
    return invalid(ok.error());
  if (!*ok) {
    auto why = fields->string("error");
    if (!why)
      return invalid(why.error());
    return caf::make_error(errc::request_invalid, *why);
  }
  return to_json(handle->get());
}

} // namespace opforge
