#include "actors/library/kernels.hpp"

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "persistence/field_codec.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

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
  f("timings", x.timings);
};

auto timing_cell(const contract::kernel_timing& t) {
  return std::tie(t.fingerprint, t.device_kind, t.dtype, t.shape_class);
}

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
                               .proofs = std::move(proofs),
                               .timings = kernel.timings};
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
  out.timings = merge_timings({}, kernel.timings);
  return out;
}

std::vector<contract::kernel_timing>
merge_timings(std::vector<contract::kernel_timing> kept,
              const std::vector<contract::kernel_timing>& fresh) {
  for (const auto& timing : fresh) {
    auto same = std::find_if(kept.begin(), kept.end(),
                             [&](const auto& k) { return timing_cell(k) == timing_cell(timing); });
    if (same == kept.end())
      kept.push_back(timing);
    else
      *same = timing;
  }
  std::sort(kept.begin(), kept.end(),
            [](const auto& a, const auto& b) { return timing_cell(a) < timing_cell(b); });
  return kept;
}

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  auto n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double relative_iqr(double iqr, double median) {
  return median > 0 ? iqr / median : 0;
}

} // namespace

std::vector<contract::kernel_timing> class_timings(const contract::benchmark_result& result,
                                                   const std::string& fingerprint,
                                                   const std::string& device_kind,
                                                   int64_t measured_at_ms) {
  if (result.outcome != contract::outcome::pass)
    return {};
  std::map<std::pair<contract::dtype, std::string>, std::vector<const contract::shape_timing*>>
      classes;
  for (const auto& t : result.timings)
    classes[{t.dtype, t.shape_class}].push_back(&t);
  std::vector<contract::kernel_timing> out;
  for (auto& [cell, inputs] : classes) {
    bool launch_bound =
        std::all_of(inputs.begin(), inputs.end(), [](const auto* t) { return t->launch_bound; });
    if (!launch_bound)
      std::erase_if(inputs, [](const auto* t) { return t->launch_bound; });
    std::vector<double> kernel_us, baseline_us, peak_share;
    double noise = 0;
    for (const auto* t : inputs) {
      kernel_us.push_back(t->candidate_us);
      baseline_us.push_back(t->baseline_us);
      if (t->peak_share)
        peak_share.push_back(*t->peak_share);
      noise = std::max({noise, relative_iqr(t->candidate_iqr_us, t->candidate_us),
                        relative_iqr(t->baseline_iqr_us, t->baseline_us)});
    }
    contract::kernel_timing timing{.fingerprint = fingerprint,
                                   .device_kind = device_kind,
                                   .dtype = cell.first,
                                   .shape_class = cell.second,
                                   .baseline = result.baseline,
                                   .kernel_us = median(kernel_us),
                                   .baseline_us = median(baseline_us),
                                   .noise = noise,
                                   .launch_bound = launch_bound,
                                   .measured_at_ms = measured_at_ms};
    timing.speedup = timing.kernel_us > 0 ? timing.baseline_us / timing.kernel_us : 0;
    if (!peak_share.empty())
      timing.peak_share = median(peak_share);
    out.push_back(std::move(timing));
  }
  return out;
}

std::vector<contract::kernel_timing> timings_on(const std::vector<contract::kernel_timing>& timings,
                                                const std::string& device_kind,
                                                const std::string& fingerprint) {
  std::vector<contract::kernel_timing> out;
  for (const auto& t : timings)
    if (t.device_kind == device_kind && (fingerprint.empty() || t.fingerprint == fingerprint))
      out.push_back(t);
  return out;
}

std::optional<double> relative_time(const std::vector<contract::kernel_timing>& a,
                                    const std::vector<contract::kernel_timing>& b) {
  double log_sum[2] = {0, 0}; // [launch-bound] over the shared classes
  int shared[2] = {0, 0};
  for (const auto& x : a)
    for (const auto& y : b)
      if (timing_cell(x) == timing_cell(y) && x.kernel_us > 0 && y.kernel_us > 0) {
        int bound = x.launch_bound || y.launch_bound;
        log_sum[bound] += std::log(x.kernel_us / y.kernel_us);
        ++shared[bound];
      }
  int use = shared[0] > 0 ? 0 : 1;
  if (shared[use] == 0)
    return std::nullopt;
  return std::exp(log_sum[use] / shared[use]);
}

std::set<std::string> covered_operators(const std::vector<key_value>& kernels) {
  std::set<std::string> out;
  for (const auto& kv : kernels)
    out.insert(kv.key.substr(0, kv.key.find('\0')));
  return out;
}

} // namespace opforge
