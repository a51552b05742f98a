#include "messages/jobs.hpp"

#include "messages/contract.hpp"
#include "messages/contract_codec.hpp"

#include <algorithm>

namespace opforge {

device_job lint_job(std::string id, const std::string& source, const std::string& op,
                    const std::string& wrapper, const std::string& device_kind,
                    int64_t deadline_ms) {
  device_job job;
  job.id = std::move(id);
  job.kind = contract::job_kind::lint;
  job.deadline_ms = deadline_ms;
  job.payload = contract::codec::to_bytes(contract::lint_request{
      .source = source, .op = op, .wrapper = wrapper, .profile = device_kind});
  return job;
}

namespace {

// A device job of `kind` on the device kind and toolchain of `limits`, its payload still empty.
device_job device_job_for(std::string id, contract::job_kind kind, const test_limits& limits) {
  device_job job;
  job.id = std::move(id);
  job.kind = kind;
  job.device_kind = limits.device_kind;
  job.fingerprint = limits.fingerprint;
  job.deadline_ms = limits.deadline_ms;
  return job;
}

std::vector<contract::dtype> contract_dtypes(const std::vector<std::string>& names) {
  std::vector<contract::dtype> out;
  for (const auto& name : names)
    if (auto dtype = contract::from_string<contract::dtype>(name))
      out.push_back(*dtype);
  return out;
}

} // namespace

device_job test_job(std::string id, const std::string& op, const std::string& variant,
                    const std::string& source, const std::string& wrapper,
                    const std::vector<std::string>& dtypes, const test_limits& limits) {
  auto job = device_job_for(std::move(id), contract::job_kind::test, limits);
  contract::test_request request{.op = op,
                                 .variant = variant,
                                 .source = source,
                                 .wrapper = wrapper,
                                 .dtypes = contract_dtypes(dtypes),
                                 .timeout_s = limits.sample_timeout_s};
  // Naming any set replaces the worker's default of every generated one, so those are named too.
  if (!limits.extra_sets.empty()) {
    std::vector<std::string> sets;
    for (auto name : contract::enum_traits<contract::sample_set>::names)
      sets.emplace_back(name);
    for (const auto& name : limits.extra_sets)
      if (std::find(sets.begin(), sets.end(), name) == sets.end())
        sets.push_back(name);
    request.sample_sets = std::move(sets);
  }
  // Absent unless there is a file to carry, so that a job without model sets reads as it did.
  if (!limits.model_samples.empty())
    request.model_samples = limits.model_samples;
  job.payload = contract::codec::to_bytes(request);
  return job;
}

device_job benchmark_job(std::string id, const std::string& op, const std::string& variant,
                         const std::string& source, const std::string& wrapper,
                         const std::vector<std::string>& dtypes, const test_limits& limits) {
  auto job = device_job_for(std::move(id), contract::job_kind::benchmark, limits);
  contract::benchmark_request request{.op = op,
                                      .variant = variant,
                                      .source = source,
                                      .wrapper = wrapper,
                                      .dtypes = contract_dtypes(dtypes),
                                      .timeout_s = limits.sample_timeout_s};
  if (!limits.model_samples.empty())
    request.model_samples = limits.model_samples;
  job.payload = contract::codec::to_bytes(request);
  return job;
}

device_job backend_job(std::string id, const backend_spec& backend,
                       const std::vector<std::string>& dtypes, const test_limits& limits) {
  auto job = device_job_for(std::move(id), contract::job_kind::backend, limits);
  contract::backend_request request{.package = backend.package,
                                    .enable = backend.enable,
                                    .dtypes = contract_dtypes(dtypes),
                                    .timeout_s = limits.sample_timeout_s};
  if (!backend.ops.empty())
    request.ops = backend.ops;
  job.payload = contract::codec::to_bytes(request);
  return job;
}

device_job catalog_job(std::string id, const std::string& device_kind,
                       const std::vector<std::string>& names, int64_t deadline_ms) {
  device_job job;
  job.id = std::move(id);
  job.kind = contract::job_kind::catalog;
  job.device_kind = device_kind;
  job.deadline_ms = deadline_ms;
  contract::catalog_request request;
  if (!names.empty())
    request.filters = contract::catalog_filters{.ops = names};
  job.payload = contract::codec::to_bytes(request);
  return job;
}

} // namespace opforge
