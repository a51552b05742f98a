#include "persistence/keys.hpp"

namespace opforge {

namespace {

constexpr char separator = '\0';
constexpr size_t seq_width = sizeof(uint64_t);

} // namespace

std::string prefix_of(std::string_view id) {
  std::string prefix{id};
  prefix += separator;
  return prefix;
}

std::string operator_id(std::string_view op, std::string_view variant) {
  return variant.empty() ? std::string{op} : std::string{op} + "/" + std::string{variant};
}

std::string session_key(std::string_view campaign_id, std::string_view operator_id) {
  return prefix_of(campaign_id) + std::string{operator_id};
}

std::string model_set_prefix(std::string_view set) {
  return prefix_of("model_set") + prefix_of(set);
}

std::string model_set_key(std::string_view set, std::string_view operator_id) {
  return model_set_prefix(set) + std::string{operator_id};
}

std::string event_key(std::string_view session_id, uint64_t seq) {
  auto key = prefix_of(session_id);
  for (int shift = 8 * (seq_width - 1); shift >= 0; shift -= 8)
    key += static_cast<char>((seq >> shift) & 0xff);
  return key;
}

std::optional<uint64_t> event_seq(std::string_view key) {
  if (key.size() <= seq_width || key[key.size() - seq_width - 1] != separator)
    return std::nullopt;
  uint64_t seq = 0;
  for (auto byte : key.substr(key.size() - seq_width))
    seq = (seq << 8) | static_cast<uint8_t>(byte);
  return seq;
}

std::string conformance_prefix() {
  return prefix_of("conformance");
}

std::string conformance_key(std::string_view device_kind, std::string_view fingerprint) {
  return conformance_prefix() + prefix_of(device_kind) + std::string{fingerprint};
}

std::string imports_prefix() {
  return prefix_of("import");
}

std::string import_key(std::string_view import_id) {
  return imports_prefix() + std::string{import_id};
}

std::string maintenance_prefix() {
  return prefix_of("maintenance");
}

std::string revalidation_request_key(std::string_view device_kind, std::string_view fingerprint) {
  return maintenance_prefix() + prefix_of("revalidate") + prefix_of(device_kind) +
         std::string{fingerprint};
}

std::string repair_started_key(std::string_view kernel_hash, std::string_view fingerprint) {
  return maintenance_prefix() + prefix_of("repaired") + prefix_of(kernel_hash) +
         std::string{fingerprint};
}

std::string validation_key(std::string_view kernel_hash, std::string_view toolchain) {
  auto key = prefix_of(kernel_hash);
  key += toolchain;
  return key;
}

std::string printable(std::string_view key) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (auto c : key) {
    auto byte = static_cast<uint8_t>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    }
  }
  return out;
}

} // namespace opforge
