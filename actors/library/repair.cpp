#include "actors/library/repair.hpp"

#include "messages/contract.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <spdlog/fmt/fmt.h>

namespace opforge {

namespace {

// The verdict a kernel has now on `fingerprint`: proofs are newest first.
const contract::toolchain_proof* newest_on(const contract::library_kernel& kernel,
                                           const std::string& fingerprint) {
  for (const auto& proof : kernel.proofs)
    if (proof.fingerprint == fingerprint)
      return &proof;
  return nullptr;
}

// An operator variant that some kernel of the library passes on `fingerprint` lost nothing there:
// the old kernel was repaired already, or a newer one works.
bool served_on(const std::vector<kernel_version>& kernels, const regression& r) {
  return std::any_of(kernels.begin(), kernels.end(), [&](const kernel_version& v) {
    const auto* proof = newest_on(v.kernel, r.after.fingerprint);
    return v.kernel.op == r.op && v.kernel.variant == r.variant &&
           v.device_kind == r.after.device_kind && proof != nullptr &&
           proof->outcome == contract::outcome::pass;
  });
}

// What the session is told first: that the kernel worked, what changed under it, and how it fails
// now, in the words the importer's failure_feedback uses for a test that did not pass.
std::string regression_feedback(const regression& r) {
  std::string out = "This kernel passed every test on the toolchain it was accepted on";
  out += r.change.empty() ? std::string{"."}
                          : " and fails since the toolchain changed (" + r.change + ").";
  out += "\nIts test ended " + std::string{to_string(r.after.outcome)} + " (" +
         std::to_string(r.after.tests_passed) + " of " + std::to_string(r.after.tests_run) +
         " samples passed).\n";
  if (!r.after.detail.empty())
    out += r.after.detail + "\n";
  out += "Change it so that it works on the new toolchain.\n";
  return out;
}

std::string speed_feedback(const speed_regression& r) {
  std::string out = "This kernel passes every test on the new toolchain";
  out += r.change.empty() ? std::string{} : " (" + r.change + ")";
  out += " but runs slower there than on the previous one:\n";
  for (const auto& s : r.slower)
    out += fmt::format("- {} {}: {:.1f} us, was {:.1f} us ({:.2f}x the time; noise {:.0f}% and "
                       "{:.0f}%)\n",
                       to_string(s.after.dtype), s.after.shape_class, s.after.kernel_us,
                       s.before.kernel_us, s.ratio, 100 * s.after.noise, 100 * s.before.noise);
  out += "Make it faster on the new toolchain and keep it correct: a repair is kept only when it "
         "is timed faster there than this kernel.\n";
  return out;
}

// One kernel to repair on the toolchain it regressed on, and what its session is told first.
struct repair_target {
  std::string op;
  std::string variant;
  std::string hash;
  const contract::toolchain_proof* after;
  std::string feedback;
};

} // namespace

std::vector<campaign_request> repair_campaigns(const std::vector<regression>& regressions,
                                               const std::vector<kernel_version>& kernels,
                                               const std::vector<speed_regression>& slower) {
  std::vector<repair_target> targets;
  for (const auto& r : regressions)
    if (!served_on(kernels, r))
      targets.push_back({r.op, r.variant, r.hash, &r.after, regression_feedback(r)});
  for (const auto& r : slower)
    if (r.served_by.empty())
      targets.push_back({r.op, r.variant, r.hash, &r.after, speed_feedback(r)});

  // The same source may serve several operator variants: a kernel is its operator id and hash.
  std::map<std::string, const kernel_version*> listed;
  for (const auto& v : kernels)
    if (!v.kernel.source.empty())
      listed.try_emplace(operator_id(v.kernel.op, v.kernel.variant) + " " + v.kernel.hash, &v);

  // Per fingerprint, in the order its first regression came, one seed per operator variant: of
  // several regressed versions, the newest.
  std::vector<std::string> order;
  std::map<std::string,
           std::map<std::string, std::pair<const kernel_version*, const repair_target*>>>
      seeds;
  for (const auto& r : targets) {
    auto id = operator_id(r.op, r.variant);
    auto found = listed.find(id + " " + r.hash);
    if (found == listed.end())
      continue;
    const auto& fingerprint = r.after->fingerprint;
    if (!seeds.count(fingerprint))
      order.push_back(fingerprint);
    auto& seed = seeds[fingerprint][id];
    if (seed.first == nullptr || found->second->version > seed.first->version)
      seed = {found->second, &r};
  }

  // The seeds alone select the operators: a name would select every variant of it, and start fresh
  // sessions for variants that never had a kernel.
  std::vector<campaign_request> campaigns;
  for (const auto& fingerprint : order) {
    campaign_request request;
    request.fingerprint = fingerprint;
    std::set<std::string> dtypes;
    for (const auto& [id, seed] : seeds[fingerprint]) {
      const auto& [version, r] = seed;
      request.device_kind = r->after->device_kind;
      for (const auto& dtype : contract::to_strings(version->kernel.dtypes))
        dtypes.insert(dtype);
      request.seeds.push_back({r->op, r->variant, version->kernel.source, r->feedback});
    }
    // The dtypes the regressed kernels were proved for: a repair restores what they covered.
    request.dtypes.assign(dtypes.begin(), dtypes.end());
    campaigns.push_back(std::move(request));
  }
  return campaigns;
}

} // namespace opforge
