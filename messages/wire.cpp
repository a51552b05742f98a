#include "messages/wire.hpp"

#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace opforge::wire {

namespace {

// -- encoding ------------------------------------------------------------------------------------

// Writes one frame: a map whose first entries are `v` and `type`. The caller states how many more
// fields follow because msgpack puts the map size first; the round-trip tests hold it to that.
class frame_writer {
public:
  frame_writer(std::string_view type, uint32_t fields) : packer_{buffer_} {
    packer_.pack_map(fields + 2);
    integer("v", protocol_version);
    text("type", type);
  }

  frame_writer& text(std::string_view key, std::string_view value) {
    string(key);
    string(value);
    return *this;
  }

  frame_writer& integer(std::string_view key, int64_t value) {
    string(key);
    packer_.pack_int64(value);
    return *this;
  }

  frame_writer& texts(std::string_view key, const std::vector<std::string>& values) {
    string(key);
    packer_.pack_array(static_cast<uint32_t>(values.size()));
    for (auto& value : values)
      string(value);
    return *this;
  }

  frame_writer& text_map(std::string_view key, const std::map<std::string, std::string>& values) {
    string(key);
    packer_.pack_map(static_cast<uint32_t>(values.size()));
    for (auto& [name, value] : values) {
      string(name);
      string(value);
    }
    return *this;
  }

  // `bytes` already is one msgpack map (checked where it entered the daemon), so it is copied in
  // as it is; msgpack concatenates.
  frame_writer& msgpack_map(std::string_view key, std::string_view bytes) {
    string(key);
    if (bytes.empty())
      packer_.pack_map(0);
    else
      buffer_.write(bytes.data(), bytes.size());
    return *this;
  }

  std::string finish() const { return {buffer_.data(), buffer_.size()}; }

private:
  void string(std::string_view value) {
    packer_.pack_str(static_cast<uint32_t>(value.size()));
    packer_.pack_str_body(value.data(), static_cast<uint32_t>(value.size()));
  }

  msgpack::sbuffer buffer_;
  msgpack::packer<msgpack::sbuffer> packer_;
};

// -- decoding ------------------------------------------------------------------------------------

// The one-line text of an error from the msgpack codec (its context is a single string).
std::string context_text(const caf::error& err) {
  auto& context = err.context();
  if (!context.empty() && context.match_element<std::string>(context.size() - 1))
    return context.get_as<std::string>(context.size() - 1);
  return render(err);
}

// Reads the fields of one message and keeps the first failure, so that each decoder reads like
// the struct it fills and checks the error once at the end.
class field_reader {
public:
  field_reader(const map_reader& map, std::string_view type) : map_{map}, type_{type} {}

  std::string text(std::string_view key) {
    return present(key) ? take(map_.string(key)) : std::string{};
  }

  std::string optional_text(std::string_view key) { return take(map_.string_or(key, "")); }

  int64_t integer(std::string_view key) { return present(key) ? take(map_.integer(key)) : 0; }

  std::vector<std::string> texts(std::string_view key) {
    std::vector<std::string> out;
    auto* value = present(key);
    if (!value)
      return out;
    if (value->type != msgpack::type::ARRAY) {
      wrong_type(key, "an array", *value);
      return out;
    }
    for (uint32_t i = 0; i < value->via.array.size; ++i) {
      auto& item = value->via.array.ptr[i];
      if (item.type != msgpack::type::STR) {
        wrong_type(key, "an array of strings", item);
        return {};
      }
      out.emplace_back(item.via.str.ptr, item.via.str.size);
    }
    return out;
  }

  std::map<std::string, std::string> text_map(std::string_view key) {
    std::map<std::string, std::string> out;
    auto* value = present(key);
    if (!value)
      return out;
    if (value->type != msgpack::type::MAP) {
      wrong_type(key, "a map", *value);
      return out;
    }
    for (uint32_t i = 0; i < value->via.map.size; ++i) {
      auto& [name, item] = value->via.map.ptr[i];
      if (name.type != msgpack::type::STR || item.type != msgpack::type::STR) {
        wrong_type(key, "a map of strings to strings",
                   item.type == msgpack::type::STR ? name : item);
        return {};
      }
      out.emplace(std::string{name.via.str.ptr, name.via.str.size},
                  std::string{item.via.str.ptr, item.via.str.size});
    }
    return out;
  }

  // Kept as msgpack bytes: payloads belong to the job kinds, not to the device layer.
  std::string msgpack_map(std::string_view key) {
    auto* value = present(key);
    if (!value)
      return {};
    if (value->type != msgpack::type::MAP) {
      wrong_type(key, "a map", *value);
      return {};
    }
    msgpack::sbuffer buffer;
    msgpack::pack(buffer, *value);
    return {buffer.data(), buffer.size()};
  }

  // A value of the right type that the protocol still rules out, e.g. `slots: 0`.
  void check(bool ok, std::string_view key, std::string_view what) {
    if (!ok)
      fail("bad_key", "key '" + std::string{key} + "': " + std::string{what});
  }

  caf::error error() const { return error_; }

private:
  const msgpack::object* present(std::string_view key) {
    auto* value = map_.find(key);
    if (!value)
      fail("missing_key", "missing key '" + std::string{key} + "'");
    return value;
  }

  template <class T>
  T take(caf::expected<T> value) {
    if (!value) {
      fail("bad_key", context_text(value.error()));
      return T{};
    }
    return std::move(*value);
  }

  void wrong_type(std::string_view key, std::string_view expected, const msgpack::object& got) {
    fail("bad_key", "key '" + std::string{key} + "': expected " + std::string{expected} + ", got " +
                        type_name(got));
  }

  void fail(std::string reason, std::string what) {
    if (!error_)
      error_ = malformed_frame(std::move(reason), std::string{type_} + ": " + what);
  }

  const map_reader& map_;
  std::string_view type_;
  caf::error error_;
};

hello read_hello(field_reader& f) {
  hello msg;
  msg.worker_id = f.text("worker_id");
  msg.role = f.text("role");
  msg.device_kind = f.text("device_kind");
  msg.device_name = f.text("device_name");
  msg.slots = f.integer("slots");
  msg.jobs = f.texts("jobs");
  msg.toolchain = f.text_map("toolchain");
  msg.fingerprint = f.text("fingerprint");
  msg.host = f.text("host");
  msg.pid = f.integer("pid");
  f.check(msg.role == "device" || msg.role == "lint", "role",
          "expected device or lint, got '" + msg.role + "'");
  f.check(msg.slots >= 1, "slots", "must be at least 1");
  f.check(!msg.worker_id.empty(), "worker_id", "must not be empty");
  return msg;
}

worker_heartbeat read_worker_heartbeat(field_reader& f) {
  worker_heartbeat msg;
  msg.busy = f.integer("busy");
  f.check(msg.busy >= 0, "busy", "must not be negative");
  return msg;
}

result read_result(field_reader& f) {
  result msg;
  msg.job_id = f.text("job_id");
  msg.status = f.text("status");
  msg.payload = f.msgpack_map("payload");
  msg.error = f.optional_text("error");
  msg.elapsed_ms = f.integer("elapsed_ms");
  f.check(msg.status == "done" || msg.status == "failed" || msg.status == "cancelled", "status",
          "expected done, failed or cancelled, got '" + msg.status + "'");
  return msg;
}

goodbye read_goodbye(field_reader& f) {
  return {f.text("reason")};
}

welcome read_welcome(field_reader& f) {
  welcome msg;
  msg.heartbeat_ms = f.integer("heartbeat_ms");
  msg.liveness = f.integer("liveness");
  f.check(msg.heartbeat_ms >= 1, "heartbeat_ms", "must be at least 1");
  f.check(msg.liveness >= 1, "liveness", "must be at least 1");
  return msg;
}

job read_job(field_reader& f) {
  job msg;
  msg.job_id = f.text("job_id");
  msg.kind = f.text("kind");
  msg.attempt = f.integer("attempt");
  msg.deadline_ms = f.integer("deadline_ms");
  msg.payload = f.msgpack_map("payload");
  f.check(msg.attempt >= 1, "attempt", "must be at least 1");
  return msg;
}

cancel read_cancel(field_reader& f) {
  return {f.text("job_id")};
}

template <class Message>
using decoder = Message (*)(field_reader&);

template <class Message, size_t N>
using decoder_table = std::array<std::pair<std::string_view, decoder<Message>>, N>;

const decoder_table<worker_message, 4> worker_decoders{{
    {"hello", [](field_reader& f) -> worker_message { return read_hello(f); }},
    {"heartbeat", [](field_reader& f) -> worker_message { return read_worker_heartbeat(f); }},
    {"result", [](field_reader& f) -> worker_message { return read_result(f); }},
    {"goodbye", [](field_reader& f) -> worker_message { return read_goodbye(f); }},
}};

const decoder_table<daemon_message, 6> daemon_decoders{{
    {"welcome", [](field_reader& f) -> daemon_message { return read_welcome(f); }},
    {"heartbeat", [](field_reader&) -> daemon_message { return daemon_heartbeat{}; }},
    {"job", [](field_reader& f) -> daemon_message { return read_job(f); }},
    {"cancel", [](field_reader& f) -> daemon_message { return read_cancel(f); }},
    {"hello_required", [](field_reader&) -> daemon_message { return hello_required{}; }},
    {"goodbye", [](field_reader& f) -> daemon_message { return read_goodbye(f); }},
}};

// Checks size, msgpack, map, `v` and `type` in that order, then hands the fields to the decoder
// of the type.
template <class Message, size_t N>
caf::expected<Message> decode_frame(std::string_view frame, size_t max_frame_bytes,
                                    const decoder_table<Message, N>& decoders) {
  auto handle = unpack(frame, unpack_limits{.max_bytes = max_frame_bytes});
  if (!handle)
    return malformed_frame(handle.error() == errc::frame_oversized ? "oversized" : "not_msgpack",
                           context_text(handle.error()));
  auto map = map_reader::of(handle->get());
  if (!map)
    return malformed_frame("not_map", context_text(map.error()));
  field_reader header{*map, "frame"};
  auto version = header.integer("v");
  auto type = header.text("type");
  if (auto err = header.error())
    return err;
  if (version != protocol_version)
    return malformed_frame("version_mismatch", "protocol version " + std::to_string(version) +
                                                   ", expected " +
                                                   std::to_string(protocol_version));
  for (auto& [name, decode] : decoders) {
    if (name != type)
      continue;
    field_reader fields{*map, type};
    auto msg = decode(fields);
    if (auto err = fields.error())
      return err;
    return msg;
  }
  return malformed_frame("unknown_type", "unknown message type '" + type + "'");
}

} // namespace

// -- encoding ------------------------------------------------------------------------------------

std::string encode(const hello& msg) {
  return frame_writer{"hello", 10}
      .text("worker_id", msg.worker_id)
      .text("role", msg.role)
      .text("device_kind", msg.device_kind)
      .text("device_name", msg.device_name)
      .integer("slots", msg.slots)
      .texts("jobs", msg.jobs)
      .text_map("toolchain", msg.toolchain)
      .text("fingerprint", msg.fingerprint)
      .text("host", msg.host)
      .integer("pid", msg.pid)
      .finish();
}

std::string encode(const worker_heartbeat& msg) {
  return frame_writer{"heartbeat", 1}.integer("busy", msg.busy).finish();
}

std::string encode(const result& msg) {
  return frame_writer{"result", 5}
      .text("job_id", msg.job_id)
      .text("status", msg.status)
      .msgpack_map("payload", msg.payload)
      .text("error", msg.error)
      .integer("elapsed_ms", msg.elapsed_ms)
      .finish();
}

std::string encode(const goodbye& msg) {
  return frame_writer{"goodbye", 1}.text("reason", msg.reason).finish();
}

std::string encode(const welcome& msg) {
  return frame_writer{"welcome", 2}
      .integer("heartbeat_ms", msg.heartbeat_ms)
      .integer("liveness", msg.liveness)
      .finish();
}

std::string encode(const daemon_heartbeat&) {
  return frame_writer{"heartbeat", 0}.finish();
}

std::string encode(const job& msg) {
  return frame_writer{"job", 5}
      .text("job_id", msg.job_id)
      .text("kind", msg.kind)
      .integer("attempt", msg.attempt)
      .integer("deadline_ms", msg.deadline_ms)
      .msgpack_map("payload", msg.payload)
      .finish();
}

std::string encode(const cancel& msg) {
  return frame_writer{"cancel", 1}.text("job_id", msg.job_id).finish();
}

std::string encode(const hello_required&) {
  return frame_writer{"hello_required", 0}.finish();
}

// -- decoding ------------------------------------------------------------------------------------

caf::expected<worker_message> decode_worker_message(std::string_view frame,
                                                    size_t max_frame_bytes) {
  return decode_frame(frame, max_frame_bytes, worker_decoders);
}

caf::expected<daemon_message> decode_daemon_message(std::string_view frame,
                                                    size_t max_frame_bytes) {
  return decode_frame(frame, max_frame_bytes, daemon_decoders);
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
