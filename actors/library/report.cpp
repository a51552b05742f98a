#include "actors/library/report.hpp"

#include "actors/library/kernels.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <tuple>

namespace opforge {

namespace {

std::string op_key(const std::string& op, const std::string& variant) {
  return variant.empty() ? op : op + "." + variant;
}

// Which operators exist per row name, and which of them passed per column.
struct tally {
  std::map<std::string, std::set<std::string>> operators;
  std::map<std::string, std::map<std::string, std::set<std::string>>> passed;
};

std::vector<coverage_row> rows_of(const tally& t, const std::vector<std::string>& columns) {
  std::vector<coverage_row> rows;
  for (const auto& [name, ops] : t.operators) {
    coverage_row row{name, static_cast<uint32_t>(ops.size()), {}};
    auto passed = t.passed.find(name);
    for (const auto& column : columns) {
      size_t n = 0;
      if (passed != t.passed.end())
        if (auto p = passed->second.find(column); p != passed->second.end())
          n = p->second.size();
      row.covered[column] = ops.empty() ? 0.0 : static_cast<double>(n) / ops.size();
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

coverage_curve curve_of(std::string name, uint32_t operators, std::vector<uint32_t> calls) {
  std::sort(calls.begin(), calls.end());
  coverage_curve curve{std::move(name), operators, {}};
  uint32_t covered = 0;
  for (auto c : calls) {
    ++covered;
    if (!curve.points.empty() && curve.points.back().calls == c)
      curve.points.back().covered = covered;
    else
      curve.points.push_back({c, covered});
  }
  return curve;
}

// The dtypes a campaign asked for: its request's (defaults filled in when it was submitted), else
// those of its operators, in order of first appearance.
std::vector<std::string> requested_dtypes(const stored_campaign& campaign) {
  if (!campaign.request.dtypes.empty())
    return campaign.request.dtypes;
  std::vector<std::string> out;
  for (const auto& op : campaign.spec.operators)
    for (const auto& dtype : op.dtypes)
      if (std::find(out.begin(), out.end(), dtype) == out.end())
        out.push_back(dtype);
  return out;
}

} // namespace

std::string failure_reason(const session_record& session) {
  // The session machine's words when a session runs out of dialogs and calls.
  if (session.end_reason.starts_with("budget spent") && !session.history.empty())
    return std::string{to_string(session.history.back().outcome)};
  auto reason = session.end_reason.substr(0, session.end_reason.find_first_of(":("));
  while (!reason.empty() && reason.back() == ' ')
    reason.pop_back();
  return reason.empty() ? "unknown" : reason;
}

std::string report_column(const campaign_spec& spec) {
  return spec.model.empty() ? spec.endpoint : spec.model;
}

campaign_report build_report(const std::vector<stored_campaign>& campaigns,
                             const std::vector<session_record>& sessions) {
  campaign_report report;
  std::map<std::string, const campaign_spec*> specs;
  std::map<std::string, size_t> order; // campaigns come oldest first
  tally categories;
  tally dtypes;
  // What each campaign's operator is filed under, by campaign and operator key.
  std::map<std::pair<std::string, std::string>, const operator_spec*> listed;
  std::set<std::string> all_operators;
  for (const auto& campaign : campaigns) {
    const auto& spec = campaign.spec;
    specs[spec.campaign_id] = &spec;
    order[spec.campaign_id] = order.size();
    auto column = report_column(spec);
    report.campaigns.push_back({spec.campaign_id, std::string{to_string(campaign.state)}, column,
                                spec.device_kind, requested_dtypes(campaign),
                                static_cast<uint32_t>(spec.operators.size()), spec.created_ms,
                                campaign.error});
    if (!spec.operators.empty() &&
        std::find(report.columns.begin(), report.columns.end(), column) == report.columns.end())
      report.columns.push_back(column);
    for (const auto& op : spec.operators) {
      auto key = op_key(op.op, op.variant);
      listed[{spec.campaign_id, key}] = &op;
      all_operators.insert(key);
      categories.operators[op.category.empty() ? "uncategorized" : op.category].insert(key);
      for (const auto& dtype : op.dtypes)
        dtypes.operators[dtype].insert(key);
    }
  }
  std::map<std::string, std::vector<uint32_t>> calls_to_pass;
  std::map<std::string, uint32_t> fewest_calls; // the union: an operator's cheapest pass
  // An operator's newest failure: the campaign's place in `order`, and its session.
  std::map<std::string, std::pair<size_t, const session_record*>> newest_failure;
  for (const auto& s : sessions) {
    auto spec = specs.find(s.campaign_id);
    if (spec == specs.end())
      continue;
    auto key = op_key(s.op, s.variant);
    auto op = listed.find({s.campaign_id, key});
    if (op == listed.end())
      continue;
    if (s.state == session_state::failed) {
      std::pair<size_t, const session_record*> failure{order[s.campaign_id], &s};
      auto [newest, added] = newest_failure.emplace(key, failure);
      if (!added && newest->second.first < failure.first)
        newest->second = failure;
      continue;
    }
    if (s.state != session_state::success)
      continue;
    auto column = report_column(*spec->second);
    const auto& category = op->second->category;
    categories.passed[category.empty() ? "uncategorized" : category][column].insert(key);
    for (const auto& dtype : op->second->dtypes)
      dtypes.passed[dtype][column].insert(key);
    calls_to_pass[s.campaign_id].push_back(s.total_calls);
    auto [cheapest, added] = fewest_calls.emplace(key, s.total_calls);
    if (!added)
      cheapest->second = std::min(cheapest->second, s.total_calls);
    report.passed.push_back(
        {s.campaign_id, key, s.total_calls, s.prompt_tokens, s.completion_tokens});
  }
  for (const auto& [key, failure] : newest_failure)
    if (!fewest_calls.count(key)) {
      const auto& session = *failure.second;
      auto reason = failure_reason(session);
      ++report.failures[reason];
      report.failed.push_back({key, session.campaign_id, reason, session.end_reason});
    }
  report.by_category = rows_of(categories, report.columns);
  report.by_dtype = rows_of(dtypes, report.columns);
  for (const auto& campaign : campaigns) {
    const auto& id = campaign.spec.campaign_id;
    report.curves.push_back(
        curve_of(id, static_cast<uint32_t>(campaign.spec.operators.size()), calls_to_pass[id]));
  }
  std::vector<uint32_t> union_calls;
  for (const auto& [key, calls] : fewest_calls)
    union_calls.push_back(calls);
  report.curves.push_back(curve_of("all campaigns", static_cast<uint32_t>(all_operators.size()),
                                   std::move(union_calls)));
  std::sort(report.passed.begin(), report.passed.end(), [](const auto& a, const auto& b) {
    return std::tie(a.campaign_id, a.op) < std::tie(b.campaign_id, b.op);
  });
  return report;
}

namespace {

template <class Regression>
std::vector<toolchain_regressions> grouped(const std::vector<Regression>& regressions) {
  std::map<std::tuple<std::string, std::string, std::string>, toolchain_regressions> groups;
  for (const auto& r : regressions) {
    const auto& kind = r.after.device_kind;
    auto& group = groups[{kind, r.after.fingerprint, r.change}];
    group.device_kind = kind;
    group.fingerprint = r.after.fingerprint;
    group.change = r.change;
    ++group.kernels;
    group.operators.push_back(operator_id(r.op, r.variant));
  }
  std::vector<toolchain_regressions> out;
  for (auto& [key, group] : groups) {
    std::sort(group.operators.begin(), group.operators.end());
    group.operators.erase(std::unique(group.operators.begin(), group.operators.end()),
                          group.operators.end());
    out.push_back(std::move(group));
  }
  return out;
}

// A kernel's timings on the toolchain it was last timed on, and its speedup there.
struct kernel_speed {
  std::vector<contract::kernel_timing> timings;
  double speedup = 0;
};

std::optional<kernel_speed> speed_of(const contract::library_kernel& kernel,
                                     const std::string& device_kind) {
  const contract::kernel_timing* newest = nullptr;
  for (const auto& t : kernel.timings)
    if (t.device_kind == device_kind && (!newest || t.measured_at_ms > newest->measured_at_ms))
      newest = &t;
  if (!newest)
    return std::nullopt;
  kernel_speed out{timings_on(kernel.timings, device_kind, newest->fingerprint), 0};
  bool all_bound = std::all_of(out.timings.begin(), out.timings.end(),
                               [](const auto& t) { return t.launch_bound; });
  double log_sum = 0;
  int n = 0;
  for (const auto& t : out.timings)
    if ((all_bound || !t.launch_bound) && t.speedup > 0) {
      log_sum += std::log(t.speedup);
      ++n;
    }
  if (n == 0)
    return std::nullopt;
  out.speedup = std::exp(log_sum / n);
  return out;
}

// Shares of the peak, binned by tenths.
constexpr int roofline_bins = 10;

} // namespace

std::vector<toolchain_regressions> per_toolchain(const std::vector<regression>& regressions) {
  return grouped(regressions);
}

std::vector<toolchain_regressions> per_toolchain(const std::vector<speed_regression>& slower) {
  return grouped(slower);
}

void add_speed(campaign_report& report, const std::vector<kernel_version>& kernels,
               const std::vector<stored_campaign>& campaigns) {
  std::map<std::string, std::string> category; // by operator id
  for (const auto& c : campaigns)
    for (const auto& op : c.spec.operators)
      if (!op.category.empty())
        category[operator_id(op.op, op.variant)] = op.category;
  // The fastest timed version of each operator variant per device kind.
  std::map<std::pair<std::string, std::string>, kernel_speed> fastest;
  for (const auto& v : kernels) {
    auto speed = speed_of(v.kernel, v.device_kind);
    if (!speed)
      continue;
    auto& best = fastest[{v.device_kind, operator_id(v.kernel.op, v.kernel.variant)}];
    if (best.timings.empty() || speed->speedup > best.speedup)
      best = std::move(*speed);
  }
  std::map<std::pair<std::string, std::string>, std::vector<double>> speedups;
  std::map<std::string, roofline_histogram> roofline;
  for (const auto& [key, speed] : fastest) {
    const auto& [kind, id] = key;
    auto filed = category.find(id);
    speedups[{kind, filed == category.end() ? "uncategorized" : filed->second}].push_back(
        speed.speedup);
    auto& histogram = roofline[kind];
    if (histogram.counts.empty()) {
      histogram.device_kind = kind;
      for (int i = 0; i <= roofline_bins; ++i)
        histogram.edges.push_back(static_cast<double>(i) / roofline_bins);
      histogram.counts.assign(roofline_bins, 0);
    }
    for (const auto& t : speed.timings) {
      if (t.launch_bound)
        ++histogram.launch_bound;
      else if (!t.peak_share)
        ++histogram.without_peak;
      else
        ++histogram.counts[std::clamp(static_cast<int>(*t.peak_share * roofline_bins), 0,
                                      roofline_bins - 1)];
    }
  }
  for (const auto& [key, values] : speedups) {
    category_speedup row;
    row.device_kind = key.first;
    row.category = key.second;
    row.kernels = static_cast<uint32_t>(values.size());
    double log_sum = 0;
    for (auto x : values)
      log_sum += std::log(x);
    row.geomean_speedup = std::exp(log_sum / values.size());
    row.slowest = *std::min_element(values.begin(), values.end());
    row.fastest = *std::max_element(values.begin(), values.end());
    row.slower_than_baseline = static_cast<uint32_t>(
        std::count_if(values.begin(), values.end(), [](double x) { return x < 1; }));
    report.speedups.push_back(std::move(row));
  }
  for (auto& [kind, histogram] : roofline)
    report.roofline.push_back(std::move(histogram));
}

std::string conformance_summary(const contract::conformance_report& report) {
  if (!report.error.empty())
    return "the probes did not run: " + report.error;
  if (report.defects.empty())
    return "no defects found (" + std::to_string(report.probes_run) + " probes)";
  auto unknown = std::count_if(report.defects.begin(), report.defects.end(),
                               [](const auto& d) { return !d.known; });
  return std::to_string(report.defects.size()) + " defects (" + std::to_string(unknown) +
         " unknown) in " + std::to_string(report.probes_run) + " probes";
}

std::string describe_toolchain_defect(const contract::toolchain_defect& d) {
  return d.probe + ": out = " + d.expression + " on " + d.dtype + ": expected " + d.expected +
         ", actual " + d.actual + (d.known ? " (known)" : " (UNKNOWN)") +
         (d.patch.empty() ? "" : "; patch " + d.patch) +
         "; workaround: " + (d.workaround.empty() ? "none known" : d.workaround);
}

} // namespace opforge
