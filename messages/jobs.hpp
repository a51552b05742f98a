#pragma once

// The device jobs the daemon submits, built in one place so that every submitter (sessions,
// campaigns, `opforge import`) asks a worker the same thing for the same candidate.

#include "messages/device_messages.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace opforge {

/// What a test job checks a candidate against and how long it may take.
struct test_limits {
  std::string device_kind;      // where it runs
  double sample_timeout_s = 60; // per-sample limit in the candidate process
  int64_t deadline_ms = 0;      // wall-clock budget of the whole job
  // Sets the candidate must pass beyond every generated one (`model:<name>`); empty: the
  // generated sets only.
  std::vector<std::string> extra_sets{};
  // model:<name> -> the operator's file in that set, as the daemon holds it (test_request's
  // model_samples): the worker runs the daemon's copy, wherever the set was captured.
  std::map<std::string, std::string> model_samples{};
  std::string fingerprint{}; // the toolchain it must run on ("" = any)
};

/// A lint job for `source` as a candidate for `op` with wrapper `wrapper`, with the linter
/// profile of `device_kind`.
device_job lint_job(std::string id, const std::string& source, const std::string& op,
                    const std::string& wrapper, const std::string& device_kind,
                    int64_t deadline_ms);

/// A test job of `source` as `op`/`variant` over every generated sample set and
/// `limits.extra_sets`, for each of `dtypes` that is a contract dtype (others are dropped: callers
/// check dtypes when a request arrives).
device_job test_job(std::string id, const std::string& op, const std::string& variant,
                    const std::string& source, const std::string& wrapper,
                    const std::vector<std::string>& dtypes, const test_limits& limits);

/// A benchmark job (worker/opforge_worker/TIMING.md) of the proved `source` as `op`/`variant`
/// against ATen on the device, for each of `dtypes` that is a contract dtype, on the device kind
/// and toolchain of `limits` (its sample timeout bounds one shape class).
device_job benchmark_job(std::string id, const std::string& op, const std::string& variant,
                         const std::string& source, const std::string& wrapper,
                         const std::vector<std::string>& dtypes, const test_limits& limits);

/// What a backend job judges: an installed package, enabled by `enable` ("" = package.enable),
/// on the OpInfos of `ops` (empty: the catalog's) that dispatch to what it registers.
struct backend_spec {
  std::string package;
  std::string enable;
  std::vector<std::string> ops;
};

/// A backend job (contract::backend_request) of `backend` on `limits.device_kind`, in each of
/// `dtypes` that is a contract dtype.
device_job backend_job(std::string id, const backend_spec& backend,
                       const std::vector<std::string>& dtypes, const test_limits& limits);

/// Surveying every OpInfo operator takes about a minute on a cold worker cache.
inline constexpr int64_t catalog_deadline_ms = 10 * 60 * 1000;

/// A catalog job on `device_kind` for the operators named `names` (every operator when empty).
device_job catalog_job(std::string id, const std::string& device_kind,
                       const std::vector<std::string>& names, int64_t deadline_ms);

} // namespace opforge
