#include "messages/family.hpp"

namespace opforge {

const char* to_string(family f) {
  switch (f) {
  case family::meta:
    return "meta";
  case family::campaigns:
    return "campaigns";
  case family::sessions:
    return "sessions";
  case family::events:
    return "events";
  case family::kernels:
    return "kernels";
  case family::validations:
    return "validations";
  }
  return "unknown";
}

std::optional<family> family_from_string(std::string_view name) {
  for (auto f : all_families)
    if (name == to_string(f))
      return f;
  return std::nullopt;
}

} // namespace opforge
