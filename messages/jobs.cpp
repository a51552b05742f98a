#include "messages/jobs.hpp"

#include "messages/contract.hpp"
#include "messages/contract_codec.hpp"

namespace opforge {

device_job lint_job(std::string id, const std::string& source, const std::string& op,
                    const std::string& wrapper, const std::string& device_kind,
                    int64_t deadline_ms) {
  device_job job;
  job.id = std::move(id);
  job.kind = "lint";
  job.deadline_ms = deadline_ms;
  job.payload = contract::codec::to_bytes(contract::lint_request{
      .source = source, .op = op, .wrapper = wrapper, .profile = device_kind});
  return job;
}

device_job test_job(std::string id, const std::string& op, const std::string& variant,
                    const std::string& source, const std::string& wrapper,
                    const std::vector<std::string>& dtypes, const test_limits& limits) {
  device_job job;
  job.id = std::move(id);
  job.kind = "test";
  job.device_kind = limits.device_kind;
  job.fingerprint = limits.fingerprint;
  job.deadline_ms = limits.deadline_ms;
  contract::test_request request{.op = op,
                                 .variant = variant,
                                 .source = source,
                                 .wrapper = wrapper,
                                 .timeout_s = limits.sample_timeout_s};
  for (const auto& name : dtypes)
    if (auto dtype = contract::from_string<contract::dtype>(name))
      request.dtypes.push_back(*dtype);
  job.payload = contract::codec::to_bytes(request);
  return job;
}

device_job catalog_job(std::string id, const std::string& device_kind,
                       const std::vector<std::string>& names, int64_t deadline_ms) {
  device_job job;
  job.id = std::move(id);
  job.kind = "catalog";
  job.device_kind = device_kind;
  job.deadline_ms = deadline_ms;
  contract::catalog_request request;
  if (!names.empty())
    request.filters = contract::catalog_filters{.ops = names};
  job.payload = contract::codec::to_bytes(request);
  return job;
}

} // namespace opforge
