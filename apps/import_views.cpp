#include "apps/import_views.hpp"

#include "apps/actor_query.hpp"
#include "messages/errors.hpp"
#include "messages/import_messages.hpp"

namespace opforge {

namespace {

// The importer answers from memory; this only keeps a stuck actor from stalling the socket.
constexpr auto importer_bound = std::chrono::milliseconds{2000};

nlohmann::json failure(const std::string& what) {
  return {{"ok", false}, {"error", what}};
}

caf::error bad(const std::string& key, const std::string& expected) {
  return caf::make_error(errc::request_invalid, "import: '" + key + "' must be " + expected);
}

caf::expected<std::vector<std::string>> strings(const wire::map_reader& fields, const char* key) {
  std::vector<std::string> out;
  auto* value = fields.find(key);
  if (!value || value->type == msgpack::type::NIL)
    return out;
  if (value->type != msgpack::type::ARRAY)
    return bad(key, "a list of strings");
  for (uint32_t i = 0; i < value->via.array.size; ++i) {
    auto& item = value->via.array.ptr[i];
    if (item.type != msgpack::type::STR)
      return bad(key, "a list of strings");
    out.emplace_back(item.via.str.ptr, item.via.str.size);
  }
  return out;
}

caf::expected<std::vector<import_file>> files(const wire::map_reader& fields) {
  std::vector<import_file> out;
  auto* value = fields.find("files");
  if (!value || value->type == msgpack::type::NIL)
    return out;
  auto expected = "a list of {path, source} maps";
  if (value->type != msgpack::type::ARRAY)
    return bad("files", expected);
  if (value->via.array.size > max_import_files_per_request)
    return bad("files", "at most " + std::to_string(max_import_files_per_request) + " files");
  for (uint32_t i = 0; i < value->via.array.size; ++i) {
    auto file = wire::map_reader::of(value->via.array.ptr[i]);
    if (!file)
      return bad("files", expected);
    auto path = file->string("path");
    auto source = file->string("source");
    if (!path || !source || path->empty())
      return bad("files", expected);
    out.push_back({std::move(*path), std::move(*source)});
  }
  return out;
}

// The fields of an `import` request; each wrong one is named.
caf::expected<import_request> parse_request(const wire::map_reader& fields) {
  import_request out;
  std::string layout;
  for (auto [key, into] :
       {std::pair{"id", &out.import_id}, std::pair{"layout", &layout},
        std::pair{"source", &out.source}, std::pair{"device_kind", &out.device_kind},
        std::pair{"package", &out.package}, std::pair{"enable", &out.enable}}) {
    auto value = fields.string_or(key, "");
    if (!value)
      return bad(key, "a string");
    *into = std::move(*value);
  }
  // Only the first part opens the import, so only it says how the set is laid out.
  if (out.import_id.empty() || !layout.empty()) {
    auto parsed = from_string<import_layout>(layout);
    if (!parsed)
      return bad("layout", contract::one_of<import_layout>() + ", got '" + layout + "'");
    out.layout = *parsed;
  }
  for (auto [key, into] : {std::pair{"more", &out.more}, std::pair{"repair", &out.repair}}) {
    if (!fields.find(key))
      continue;
    auto value = fields.boolean(key);
    if (!value)
      return bad(key, "true or false");
    *into = *value;
  }
  for (auto [key, into] : {std::pair{"dtypes", &out.dtypes}, std::pair{"ops", &out.ops}}) {
    auto listed = strings(fields, key);
    if (!listed)
      return listed.error();
    *into = std::move(*listed);
  }
  auto listed = files(fields);
  if (!listed)
    return listed.error();
  out.files = std::move(*listed);
  return out;
}

} // namespace

nlohmann::json import_json(const import_status& s, bool with_verdicts) {
  auto verdicts = nlohmann::json::array();
  for (const auto& v : s.verdicts)
    verdicts.push_back({{"path", v.path},
                        {"op", v.op},
                        {"verdict", to_string(v.verdict)},
                        {"detail", v.detail},
                        {"hash", v.hash}});
  nlohmann::json out{{"import_id", s.import_id}, {"state", to_string(s.state)},
                     {"error", s.error},         {"layout", to_string(s.layout)},
                     {"source", s.source},       {"device_kind", s.device_kind},
                     {"dtypes", s.dtypes},       {"created_ms", s.created_ms},
                     {"ended_ms", s.ended_ms},   {"files", s.files},
                     {"tests", s.tests},         {"decided", s.decided},
                     {"accepted", s.accepted},   {"repair_campaign", s.repair_campaign}};
  if (with_verdicts)
    out["verdicts"] = std::move(verdicts);
  return out;
}

nlohmann::json import_reply(caf::actor_system& sys, const importer_actor& importer,
                            request_type type, const wire::map_reader& fields) {
  if (type == request_type::imports) {
    auto listed = ask<std::vector<import_status>>(sys, importer_bound, importer, atom::list_v);
    if (!listed)
      return failure(message(listed.error()));
    auto imports = nlohmann::json::array();
    for (const auto& status : *listed)
      imports.push_back(import_json(status, false));
    return {{"ok", true}, {"imports", std::move(imports)}};
  }
  auto status = [&]() -> caf::expected<import_status> {
    if (type != request_type::import) {
      auto id = fields.string("id");
      if (!id)
        return id.error();
      return ask<import_status>(sys, importer_bound, importer, atom::status_v, *id);
    }
    auto request = parse_request(fields);
    if (!request)
      return request.error();
    return ask<import_status>(sys, importer_bound, importer, atom::onboard_v, std::move(*request));
  }();
  if (!status)
    return failure(message(status.error()));
  return {{"ok", true}, {"import", import_json(*status, true)}};
}

} // namespace opforge
