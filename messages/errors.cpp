#include "messages/errors.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/message.hpp>

namespace opforge {

const char* to_string(errc code) {
  switch (code) {
  case errc::unspecified:
    return "unspecified";
  case errc::config_unreadable:
    return "config_unreadable";
  case errc::config_invalid:
    return "config_invalid";
  case errc::config_unknown_key:
    return "config_unknown_key";
  case errc::config_path_unusable:
    return "config_path_unusable";
  case errc::config_address_unusable:
    return "config_address_unusable";
  case errc::store_open_failed:
    return "store_open_failed";
  case errc::store_io_failed:
    return "store_io_failed";
  case errc::store_corrupt:
    return "store_corrupt";
  case errc::store_schema_mismatch:
    return "store_schema_mismatch";
  case errc::frame_malformed:
    return "frame_malformed";
  case errc::frame_oversized:
    return "frame_oversized";
  case errc::frame_unknown_type:
    return "frame_unknown_type";
  case errc::frame_version_mismatch:
    return "frame_version_mismatch";
  case errc::worker_lost:
    return "worker_lost";
  case errc::no_such_worker:
    return "no_such_worker";
  case errc::no_such_job:
    return "no_such_job";
  case errc::daemon_unreachable:
    return "daemon_unreachable";
  case errc::permission_denied:
    return "permission_denied";
  case errc::request_invalid:
    return "request_invalid";
  case errc::endpoint_fault:
    return "endpoint_fault";
  case errc::context_exhausted:
    return "context_exhausted";
  case errc::budget_exhausted:
    return "budget_exhausted";
  case errc::cancelled:
    return "cancelled";
  }
  return "unknown";
}

namespace {

// The context of an opforge error is a list of strings; joined, they say what was wrong.
std::string render_context(const caf::message& context) {
  std::string out;
  for (size_t i = 0; i < context.size(); ++i) {
    if (!out.empty())
      out += ": ";
    if (context.match_element<std::string>(i))
      out += context.get_as<std::string>(i);
    else
      out += caf::to_string(context.slice(i, 1));
  }
  return out;
}

std::string render_opforge(uint8_t code, const caf::message& context) {
  std::string out = to_string(static_cast<errc>(code));
  if (!context.empty()) {
    out += ": ";
    out += render_context(context);
  }
  return out;
}

} // namespace

void register_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(caf::atom("opforge"),
                         [](uint8_t code, caf::atom_value, const caf::message& context) {
                           return render_opforge(code, context);
                         });
}

std::string render(const caf::error& err) {
  if (!err)
    return "no error";
  if (err.category() == caf::atom("opforge"))
    return render_opforge(err.code(), err.context());
  return caf::to_string(err);
}

std::string message(const caf::error& err) {
  if (err && err.category() == caf::atom("opforge") && !err.context().empty())
    return render_context(err.context());
  return render(err);
}

} // namespace opforge
