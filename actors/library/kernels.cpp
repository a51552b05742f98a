#include "actors/library/kernels.hpp"

#include "messages/errors.hpp"
#include "persistence/keys.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace opforge {

// Every field is written, so the stored map is what the JSON literal of earlier builds wrote.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(kernel_record, op, variant, wrapper, source, hash,
                                                dtypes, skipped_dtypes, campaign_id, session_id,
                                                endpoint, model, dialogs, llm_calls,
                                                calls_in_last_dialog, tests_run, tests_passed,
                                                toolchain, device_kind, accepted_at_ms)

// 64-bit FNV-1a: stored in keys, so it must not change with the build, unlike std::hash.
std::string content_hash(std::string_view source) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : source) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

std::string kernel_key(std::string_view operator_id, std::string_view source) {
  return prefix_of(operator_id) + content_hash(source);
}

std::string encode_kernel(const kernel_record& kernel) {
  auto bytes = nlohmann::json::to_msgpack(nlohmann::json(kernel));
  return {bytes.begin(), bytes.end()};
}

caf::expected<kernel_record> decode_kernel(std::string_view bytes) {
  try {
    return nlohmann::json::from_msgpack(bytes.begin(), bytes.end()).get<kernel_record>();
  } catch (const nlohmann::json::exception& e) {
    return caf::make_error(errc::store_corrupt, std::string{"kernel record: "} + e.what());
  }
}

write_op add_kernel(kernel_record kernel) {
  kernel.hash = content_hash(kernel.source);
  auto key = kernel_key(operator_id(kernel.op, kernel.variant), kernel.source);
  return {family::kernels, std::move(key), encode_kernel(kernel)};
}

std::set<std::string> covered_operators(const std::vector<key_value>& kernels) {
  std::set<std::string> out;
  for (const auto& kv : kernels)
    out.insert(kv.key.substr(0, kv.key.find('\0')));
  return out;
}

} // namespace opforge
