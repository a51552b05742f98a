#include "messages/errors.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/message.hpp>

namespace opforge {

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
