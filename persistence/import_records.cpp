#include "persistence/import_records.hpp"

#include "persistence/field_codec.hpp"

namespace opforge {

namespace codec = contract::codec;
using field_codec::pack_fields;
using field_codec::read_fields;

// Declared here, in the records' namespace, where the containers' templates look for them.
void pack_value(codec::packer& p, const import_verdict& x);
codec::read_result read_value(const msgpack::object& o, import_verdict& x);

namespace {

constexpr auto verdict_fields = [](auto& x, auto&& f) {
  f("path", x.path);
  f("op", x.op);
  f("verdict", x.verdict);
  f("detail", x.detail);
  f("hash", x.hash);
};

constexpr auto status_fields = [](auto& x, auto&& f) {
  f("import_id", x.import_id, field_codec::presence::required);
  f("state", x.state, field_codec::presence::required);
  f("error", x.error);
  f("layout", x.layout);
  f("source", x.source);
  f("device_kind", x.device_kind);
  f("dtypes", x.dtypes);
  f("created_ms", x.created_ms);
  f("ended_ms", x.ended_ms);
  f("files", x.files);
  f("tests", x.tests);
  f("decided", x.decided);
  f("accepted", x.accepted);
  f("verdicts", x.verdicts);
  f("repair_campaign", x.repair_campaign);
};

} // namespace

void pack_value(codec::packer& p, const import_verdict& x) {
  pack_fields(p, x, verdict_fields);
}

codec::read_result read_value(const msgpack::object& o, import_verdict& x) {
  return read_fields(o, x, verdict_fields);
}

std::string encode_import(const import_status& status) {
  return field_codec::encode_fields(status, status_fields);
}

caf::expected<import_status> decode_import(std::string_view bytes) {
  return field_codec::decode_fields<import_status>(bytes, "import record", status_fields);
}

} // namespace opforge
