#include "actors/library/regressions.hpp"

#include "actors/library/kernels.hpp"
#include "messages/contract.hpp"

#include <algorithm>
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

namespace {

// The toolchain a kernel passed on just before `after` on its device kind, among those it was
// timed on: the fingerprint whose newest verdict is the latest pass no later than `after`'s.
const contract::toolchain_proof*
previous_timed(const std::map<std::string, const contract::toolchain_proof*>& newest,
               const contract::library_kernel& kernel, const contract::toolchain_proof& after) {
  const contract::toolchain_proof* previous = nullptr;
  for (const auto& [fingerprint, proof] : newest) {
    if (fingerprint == after.fingerprint || proof->outcome != contract::outcome::pass ||
        proof->device_kind != after.device_kind || proof->validated_at_ms > after.validated_at_ms ||
        timings_on(kernel.timings, after.device_kind, fingerprint).empty())
      continue;
    if (previous == nullptr || proof->validated_at_ms > previous->validated_at_ms)
      previous = proof;
  }
  return previous;
}

std::vector<slowdown> slowdowns(const std::vector<contract::kernel_timing>& before,
                                const std::vector<contract::kernel_timing>& after,
                                double threshold) {
  std::vector<slowdown> out;
  for (const auto& a : after)
    for (const auto& b : before)
      if (a.dtype == b.dtype && a.shape_class == b.shape_class && !a.launch_bound &&
          !b.launch_bound && b.kernel_us > 0 &&
          a.kernel_us * (1 - a.noise) > b.kernel_us * (1 + b.noise) * (1 + threshold))
        out.push_back({b, a, a.kernel_us / b.kernel_us});
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.ratio > y.ratio; });
  return out;
}

// Another kernel of the regressed one's operator variant that passes on the slower toolchain and
// is faster there than the regressed kernel.
std::string faster_elsewhere(const std::vector<kernel_version>& kernels, const speed_regression& r,
                             const std::vector<contract::kernel_timing>& regressed) {
  for (const auto& other : kernels) {
    if (other.kernel.hash == r.hash || other.kernel.op != r.op || other.kernel.variant != r.variant)
      continue;
    auto newest = newest_proofs(other);
    auto there = newest.find(r.after.fingerprint);
    if (there == newest.end() || there->second->outcome != contract::outcome::pass)
      continue;
    auto relative = relative_time(
        timings_on(other.kernel.timings, r.after.device_kind, r.after.fingerprint), regressed);
    if (relative && *relative < 1)
      return other.kernel.hash;
  }
  return {};
}

} // namespace

std::vector<speed_regression> find_speed_regressions(const std::vector<kernel_version>& kernels,
                                                     double threshold) {
  std::vector<speed_regression> found;
  for (const auto& version : kernels) {
    const auto& k = version.kernel;
    auto newest = newest_proofs(version);
    for (const auto& [fingerprint, after] : newest) {
      if (after->outcome != contract::outcome::pass)
        continue;
      auto timed_after = timings_on(k.timings, after->device_kind, fingerprint);
      if (timed_after.empty())
        continue;
      const auto* before = previous_timed(newest, k, *after);
      if (before == nullptr)
        continue;
      auto slower = slowdowns(timings_on(k.timings, before->device_kind, before->fingerprint),
                              timed_after, threshold);
      if (slower.empty())
        continue;
      speed_regression r{k.op,
                         k.variant,
                         k.hash,
                         toolchain_change(before->toolchain, after->toolchain),
                         *before,
                         *after,
                         std::move(slower),
                         {}};
      r.served_by = faster_elsewhere(kernels, r, timed_after);
      found.push_back(std::move(r));
    }
  }
  return found;
}

namespace {

// The source hashes of `kernels` accepted on `device_kind`, each once, in the kernels' order, for
// which `owed` holds.
template <class Owed>
std::vector<std::string> owed_hashes(const std::vector<kernel_version>& kernels,
                                     const std::string& device_kind, Owed owed) {
  std::vector<std::string> pending;
  std::set<std::string> seen;
  for (const auto& version : kernels)
    if (version.device_kind == device_kind && seen.insert(version.kernel.hash).second &&
        owed(version))
      pending.push_back(version.kernel.hash);
  return pending;
}

} // namespace

std::vector<std::string> pending_timings(const std::vector<kernel_version>& kernels,
                                         const std::string& device_kind,
                                         const std::string& fingerprint, int64_t since_ms) {
  return owed_hashes(kernels, device_kind, [&](const kernel_version& version) {
    auto newest = newest_proofs(version);
    auto there = newest.find(fingerprint);
    if (there == newest.end() || there->second->outcome != contract::outcome::pass ||
        there->second->validated_at_ms < since_ms)
      return false;
    auto timed = timings_on(version.kernel.timings, device_kind, fingerprint);
    return std::none_of(timed.begin(), timed.end(),
                        [&](const auto& t) { return t.measured_at_ms >= since_ms; });
  });
}

std::vector<std::string> pending_validations(const std::vector<kernel_version>& kernels,
                                             const std::string& device_kind,
                                             const std::string& fingerprint, int64_t since_ms) {
  return owed_hashes(kernels, device_kind, [&](const kernel_version& version) {
    return std::none_of(
        version.kernel.proofs.begin(), version.kernel.proofs.end(), [&](const auto& proof) {
          return proof.fingerprint == fingerprint && proof.validated_at_ms >= since_ms;
        });
  });
}

} // namespace opforge
