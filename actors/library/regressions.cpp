#include "actors/library/regressions.hpp"

#include "messages/contract.hpp"

#include <set>

namespace opforge {

std::string toolchain_change(const std::map<std::string, std::string>& before,
                             const std::map<std::string, std::string>& after) {
  std::set<std::string> keys;
  for (const auto& [key, _] : before)
    keys.insert(key);
  for (const auto& [key, _] : after)
    keys.insert(key);
  auto value = [](const std::map<std::string, std::string>& tools, const std::string& key) {
    auto found = tools.find(key);
    return found == tools.end() ? std::string{"none"} : found->second;
  };
  std::string words;
  for (const auto& key : keys) {
    auto old_value = value(before, key);
    auto new_value = value(after, key);
    if (old_value == new_value)
      continue;
    if (!words.empty())
      words += ", ";
    words += key + " " + old_value + " -> " + new_value;
  }
  return words;
}

namespace {

// Each fingerprint's verdict now: proofs are newest first, so the first one seen of it.
std::map<std::string, const contract::toolchain_proof*> newest_proofs(const kernel_version& v) {
  std::map<std::string, const contract::toolchain_proof*> newest;
  for (const auto& proof : v.kernel.proofs)
    newest.try_emplace(proof.fingerprint, &proof);
  return newest;
}

std::string passing_elsewhere(const std::vector<kernel_version>& kernels, const regression& r) {
  for (const auto& other : kernels) {
    if (other.kernel.hash == r.hash || other.kernel.op != r.op || other.kernel.variant != r.variant)
      continue;
    auto newest = newest_proofs(other);
    auto there = newest.find(r.after.fingerprint);
    if (there != newest.end() && there->second->outcome == contract::outcome::pass)
      return other.kernel.hash;
  }
  return {};
}

} // namespace

std::vector<regression> find_regressions(const std::vector<kernel_version>& kernels) {
  std::vector<regression> found;
  for (const auto& version : kernels) {
    auto newest = newest_proofs(version);
    for (const auto& [fingerprint, failed] : newest) {
      if (failed->outcome == contract::outcome::pass)
        continue;
      const contract::toolchain_proof* passed = nullptr;
      for (const auto& [other, proof] : newest)
        if (other != fingerprint && proof->outcome == contract::outcome::pass &&
            proof->device_kind == failed->device_kind &&
            proof->validated_at_ms <= failed->validated_at_ms &&
            (passed == nullptr || proof->validated_at_ms > passed->validated_at_ms))
          passed = proof;
      if (passed == nullptr)
        continue;
      found.push_back({version.kernel.op, version.kernel.variant, version.kernel.hash,
                       toolchain_change(passed->toolchain, failed->toolchain), *passed, *failed});
      found.back().served_by = passing_elsewhere(kernels, found.back());
    }
  }
  return found;
}

std::vector<std::string> pending_validations(const std::vector<kernel_version>& kernels,
                                             const std::string& device_kind,
                                             const std::string& fingerprint, int64_t since_ms) {
  std::vector<std::string> pending;
  std::set<std::string> seen;
  for (const auto& version : kernels) {
    if (version.device_kind != device_kind || !seen.insert(version.kernel.hash).second)
      continue;
    bool judged = false;
    for (const auto& proof : version.kernel.proofs)
      judged = judged || (proof.fingerprint == fingerprint && proof.validated_at_ms >= since_ms);
    if (!judged)
      pending.push_back(version.kernel.hash);
  }
  return pending;
}

} // namespace opforge
