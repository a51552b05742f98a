#include "actors/library/kernels.hpp"

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "persistence/field_codec.hpp"
#include "persistence/keys.hpp"

#include <cstdio>

namespace opforge {

namespace {

// Every field is written, so the stored map has every key that the nlohmann codec of earlier
// builds wrote (tests/fixtures/records/kernel.msgpack); a key it lacks keeps its default.
constexpr auto kernel_fields = [](auto& x, auto&& f) {
  f("op", x.op);
  f("variant", x.variant);
  f("wrapper", x.wrapper);
  f("source", x.source);
  f("hash", x.hash);
  f("dtypes", x.dtypes);
  f("skipped_dtypes", x.skipped_dtypes);
  f("aten_overloads", x.aten_overloads);
  f("origin", x.origin);
  f("campaign_id", x.campaign_id);
  f("session_id", x.session_id);
  f("endpoint", x.endpoint);
  f("model", x.model);
  f("dialogs", x.dialogs);
  f("llm_calls", x.llm_calls);
  f("calls_in_last_dialog", x.calls_in_last_dialog);
  f("tests_run", x.tests_run);
  f("tests_passed", x.tests_passed);
  f("toolchain", x.toolchain);
  f("toolchain_versions", x.toolchain_versions);
  f("device_kind", x.device_kind);
  f("accepted_at_ms", x.accepted_at_ms);
};

} // namespace

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
  return field_codec::encode_fields(kernel, kernel_fields);
}

caf::expected<kernel_record> decode_kernel(std::string_view bytes) {
  return field_codec::decode_fields<kernel_record>(bytes, "kernel record", kernel_fields);
}

write_op add_kernel(kernel_record kernel) {
  kernel.hash = content_hash(kernel.source);
  auto key = kernel_key(operator_id(kernel.op, kernel.variant), kernel.source);
  return {family::kernels, std::move(key), encode_kernel(kernel)};
}

contract::toolchain_proof acceptance_proof(const kernel_record& kernel) {
  return {.fingerprint = kernel.toolchain,
          .device_kind = kernel.device_kind,
          .toolchain = kernel.toolchain_versions,
          .outcome = contract::outcome::pass,
          .tests_run = kernel.tests_run,
          .tests_passed = kernel.tests_passed,
          .validated_at_ms = kernel.accepted_at_ms};
}

std::string encode_proof(const contract::toolchain_proof& proof) {
  return contract::codec::to_bytes(proof);
}

caf::expected<contract::toolchain_proof> decode_proof(std::string_view bytes) {
  auto proof = wire::decode_as<contract::toolchain_proof>(bytes, "validation");
  if (!proof)
    return caf::make_error(errc::store_corrupt, render(proof.error()));
  return proof;
}

write_op add_validation(std::string_view kernel_hash, const contract::toolchain_proof& proof) {
  return {family::validations, validation_key(kernel_hash, proof.fingerprint), encode_proof(proof)};
}

std::vector<write_op> accept_kernel(const kernel_record& kernel) {
  auto op = add_kernel(kernel);
  return {std::move(op), add_validation(content_hash(kernel.source), acceptance_proof(kernel))};
}

contract::library_kernel to_library_kernel(const kernel_record& kernel,
                                           std::vector<contract::toolchain_proof> proofs) {
  contract::library_kernel out{.op = kernel.op,
                               .variant = kernel.variant,
                               .wrapper = kernel.wrapper,
                               .source = kernel.source,
                               .hash =
                                   kernel.hash.empty() ? content_hash(kernel.source) : kernel.hash,
                               .aten_overloads = kernel.aten_overloads,
                               .proofs = std::move(proofs)};
  for (const auto& name : kernel.dtypes)
    if (auto dtype = contract::from_string<contract::dtype>(name))
      out.dtypes.push_back(*dtype);
  auto& p = out.provenance;
  p["origin"] = kernel.origin.empty() ? "campaign" : kernel.origin;
  auto known = [&p](const char* key, const std::string& value) {
    if (!value.empty())
      p[key] = value;
  };
  known("campaign_id", kernel.campaign_id);
  known("session_id", kernel.session_id);
  known("endpoint", kernel.endpoint);
  known("model", kernel.model);
  known("device_kind", kernel.device_kind);
  if (kernel.llm_calls > 0) {
    p["dialogs"] = std::to_string(kernel.dialogs);
    p["llm_calls"] = std::to_string(kernel.llm_calls);
  }
  p["accepted_at_ms"] = std::to_string(kernel.accepted_at_ms);
  return out;
}

kernel_record from_library_kernel(const contract::library_kernel& kernel,
                                  const contract::toolchain_proof& proof) {
  auto text = [&](const char* key) {
    auto it = kernel.provenance.find(key);
    return it == kernel.provenance.end() ? std::string{} : it->second;
  };
  auto count = [&](const char* key) -> uint32_t {
    try {
      return static_cast<uint32_t>(std::stoul(text(key)));
    } catch (const std::exception&) {
      return 0;
    }
  };
  kernel_record out;
  out.op = kernel.op;
  out.variant = kernel.variant;
  out.wrapper = kernel.wrapper;
  out.source = kernel.source;
  out.hash = content_hash(kernel.source);
  out.dtypes = contract::to_strings(kernel.dtypes);
  out.aten_overloads = kernel.aten_overloads;
  out.origin = text("origin");
  out.campaign_id = text("campaign_id");
  out.session_id = text("session_id");
  out.endpoint = text("endpoint");
  out.model = text("model");
  out.dialogs = count("dialogs");
  out.llm_calls = count("llm_calls");
  out.tests_run = proof.tests_run;
  out.tests_passed = proof.tests_passed;
  out.toolchain = proof.fingerprint;
  out.toolchain_versions = proof.toolchain;
  out.device_kind = proof.device_kind;
  out.accepted_at_ms = proof.validated_at_ms;
  return out;
}

std::set<std::string> covered_operators(const std::vector<key_value>& kernels) {
  std::set<std::string> out;
  for (const auto& kv : kernels)
    out.insert(kv.key.substr(0, kv.key.find('\0')));
  return out;
}

} // namespace opforge
