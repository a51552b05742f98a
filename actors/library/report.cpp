#include "actors/library/report.hpp"

#include "actors/library/kernels.hpp"
#include "messages/utc_time.hpp"
#include "persistence/keys.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <tuple>

#include <spdlog/fmt/fmt.h>

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

namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

const std::array<const char*, 6> palette{"#1f77b4", "#d62728", "#2ca02c",
                                         "#9467bd", "#ff7f0e", "#17becf"};

// Plot geometry: the axes' box inside the SVG.
constexpr double width = 640, height = 320, left = 56, right = 16, top = 16, bottom = 40;

std::string coverage_table(const std::string& title, const std::vector<coverage_row>& rows,
                           const std::vector<std::string>& columns) {
  std::string out = fmt::format("<h2>{}</h2>\n<table><tr><th>{}</th><th>operators</th>",
                                escape(title), title == "Coverage by dtype" ? "dtype" : "category");
  for (const auto& c : columns)
    out += fmt::format("<th>{} covered</th>", escape(c));
  out += "</tr>\n";
  for (const auto& row : rows) {
    out += fmt::format("<tr><td>{}</td><td>{}</td>", escape(row.name), row.operators);
    for (const auto& c : columns)
      out += fmt::format("<td>{:.1f}%</td>", 100 * row.covered.at(c));
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string curves_svg(const std::vector<coverage_curve>& curves) {
  uint32_t max_calls = 1;
  for (const auto& c : curves)
    if (!c.points.empty())
      max_calls = std::max(max_calls, c.points.back().calls);
  auto x = [&](double calls) { return left + (width - left - right) * calls / max_calls; };
  auto y = [&](double share) { return height - bottom - (height - top - bottom) * share; };
  std::string out =
      fmt::format("<svg id=\"coverage-curve\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
                  "height=\"{}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                  "stroke=\"#888\"/>",
                  width, height, left, top, width - left - right, height - top - bottom);
  for (int tick = 0; tick <= 4; ++tick)
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}%</text>",
                       left - 4, y(tick / 4.0) + 4, tick * 25);
  out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">0</text><text x=\"{}\" y=\"{}\" "
                     "font-size=\"11\" text-anchor=\"end\">{} LLM calls per operator</text>",
                     left, height - bottom + 14, width - right, height - bottom + 14, max_calls);
  for (size_t i = 0; i < curves.size(); ++i) {
    const auto& c = curves[i];
    const char* colour = palette[i % palette.size()];
    double denominator = std::max<uint32_t>(c.operators, 1);
    // A step curve: coverage holds until the next operator passes.
    double level = y(0);
    std::string points = fmt::format("{:.1f},{:.1f}", x(0), level);
    for (const auto& p : c.points) {
      points += fmt::format(" {:.1f},{:.1f}", x(p.calls), level);
      level = y(p.covered / denominator);
      points += fmt::format(" {:.1f},{:.1f}", x(p.calls), level);
    }
    points += fmt::format(" {:.1f},{:.1f}", x(max_calls), level);
    out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" points=\"{}\"/>",
                       colour, i + 1 == curves.size() ? 3 : 2, points);
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"{}\">{}</text>", left + 8,
                       top + 16 + 14 * i, colour, escape(c.name));
  }
  return out + "</svg>\n";
}

// Horizontal bars, one per label, scaled to the largest value.
std::string bars_svg(const std::string& id, const std::vector<std::pair<std::string, double>>& bars,
                     const char* colour = palette[0]) {
  double most = 1;
  for (const auto& [label, value] : bars)
    most = std::max(most, value);
  // Wide enough for the longest label (12 px sans-serif: at most 7 px a character), so that no
  // label runs off the left edge; the plot keeps at least half the width.
  size_t longest = 0;
  for (const auto& bar : bars)
    longest = std::max(longest, bar.first.size());
  double bar_height = 18;
  double label_width = std::clamp(7.0 * static_cast<double>(longest) + 12, 120.0, width / 2.0);
  double plot = width - label_width - 60;
  std::string out =
      fmt::format("<svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\">",
                  id, width, std::max<double>(bar_height * bars.size() + 8, 24));
  for (size_t i = 0; i < bars.size(); ++i) {
    const auto& [label, value] = bars[i];
    double y = 4 + bar_height * i;
    out +=
        fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"end\">{}</text>"
                    "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>"
                    "<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\">{}</text>",
                    label_width - 6, y + 13, escape(label), label_width, y + 2, plot * value / most,
                    bar_height - 4, colour, label_width + plot * value / most + 4, y + 13, value);
  }
  return out + "</svg>\n";
}

// The regressed kernels per toolchain and change, then as bars.
std::string regressions_table(const std::string& id,
                              const std::vector<toolchain_regressions>& groups) {
  std::string out = "<table><tr><th>device kind</th><th>toolchain</th><th>change</th><th>regressed "
                    "kernels</th><th>operators</th></tr>\n";
  std::vector<std::pair<std::string, double>> regressed;
  for (const auto& r : groups) {
    std::string operators;
    for (const auto& op : r.operators)
      operators += (operators.empty() ? "" : ", ") + op;
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                       escape(r.device_kind), escape(r.fingerprint), escape(r.change), r.kernels,
                       escape(operators));
    regressed.emplace_back(r.change, r.kernels);
  }
  // A colour of its own, apart from the curves' and the other bars'.
  return out + "</table>\n" + bars_svg(id, regressed, palette[4]);
}

std::string speedup_table(const std::vector<category_speedup>& rows) {
  if (rows.empty())
    return "<p>No kernel has been timed yet.</p>\n";
  std::string out = "<table id=\"speedups\"><tr><th>device kind</th><th>category</th><th>timed "
                    "kernels</th><th>geomean speedup</th><th>slowest</th><th>fastest</th><th>"
                    "slower than baseline</th></tr>\n";
  for (const auto& r : rows)
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2f}x</td><td>{:.2f}x</td>"
                       "<td>{:.2f}x</td><td>{}</td></tr>\n",
                       escape(r.device_kind), escape(r.category), r.kernels, r.geomean_speedup,
                       r.slowest, r.fastest, r.slower_than_baseline);
  return out + "</table>\n";
}

std::string roofline_svgs(const std::vector<roofline_histogram>& histograms) {
  if (histograms.empty())
    return "<p>No kernel has been timed yet.</p>\n";
  std::string out;
  for (const auto& h : histograms) {
    std::vector<std::pair<std::string, double>> bins;
    for (size_t i = 0; i < h.counts.size(); ++i)
      bins.emplace_back(
          fmt::format("{} {:.0f}-{:.0f}%", h.device_kind, 100 * h.edges[i], 100 * h.edges[i + 1]),
          h.counts[i]);
    out += bars_svg("roofline-" + h.device_kind, bins, palette[5]);
    out += fmt::format("<p>{}: {} launch-bound timings left out, {} without a peak for the "
                       "device kind.</p>\n",
                       escape(h.device_kind), h.launch_bound, h.without_peak);
  }
  return out;
}

// Per toolchain its summary, then a row per defect.
std::string conformance_table(const std::vector<contract::conformance_report>& reports) {
  if (reports.empty())
    return "<p>No worker has reported a toolchain's conformance yet.</p>\n";
  std::string out =
      "<table id=\"toolchain-defects\"><tr><th>device kind</th><th>toolchain</th><th>probe</th>"
      "<th>dtype</th><th>expression</th><th>expected</th><th>actual</th><th>known</th><th>patch"
      "</th><th>workaround</th></tr>\n";
  for (const auto& r : reports) {
    if (r.defects.empty()) {
      out +=
          fmt::format("<tr><td>{}</td><td>{}</td><td colspan=\"8\">{}</td></tr>\n",
                      escape(r.device_kind), escape(r.fingerprint), escape(conformance_summary(r)));
      continue;
    }
    for (const auto& d : r.defects)
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                         "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         escape(r.device_kind), escape(r.fingerprint), escape(d.probe),
                         escape(d.dtype), escape(d.expression), escape(d.expected),
                         escape(d.actual), d.known ? "yes" : "no", escape(d.patch),
                         escape(d.workaround.empty() ? "none known" : d.workaround));
  }
  return out + "</table>\n";
}

} // namespace

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

namespace {

std::string utc_minute(int64_t ms) {
  return format_utc(ms, "%Y-%m-%d %H:%M UTC");
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items)
    out += (out.empty() ? "" : ", ") + item;
  return out;
}

// When it was made, over which device kinds, dtypes and campaigns, then the campaigns themselves.
std::string header_html(const campaign_report& report) {
  std::vector<std::string> kinds, dtypes;
  for (const auto& c : report.campaigns) {
    if (std::find(kinds.begin(), kinds.end(), c.device_kind) == kinds.end())
      kinds.push_back(c.device_kind);
    for (const auto& dtype : c.dtypes)
      if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end())
        dtypes.push_back(dtype);
  }
  std::string out = fmt::format(
      "<p id=\"header\">Generated {}. {} campaigns on device kinds {}; dtypes {}.</p>\n",
      report.generated_ms ? utc_minute(report.generated_ms) : std::string{"at an unknown time"},
      report.campaigns.size(), escape(kinds.empty() ? "-" : joined(kinds)),
      escape(dtypes.empty() ? "-" : joined(dtypes)));
  out += "<table id=\"campaigns\"><tr><th>campaign</th><th>state</th><th>model</th><th>device "
         "kind</th><th>dtypes</th><th>operators</th><th>submitted</th><th>why it ended so</th>"
         "</tr>\n";
  for (const auto& c : report.campaigns)
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                       "<td>{}</td><td>{}</td></tr>\n",
                       escape(c.campaign_id), escape(c.state), escape(c.column),
                       escape(c.device_kind), escape(joined(c.dtypes)), c.operators,
                       utc_minute(c.created_ms), escape(c.error.empty() ? "-" : c.error));
  return out + "</table>\n";
}

// Every operator no campaign covered, with its newest session's own words.
std::string failed_table(const std::vector<failed_operator>& failed) {
  std::string out = "<table id=\"failed\"><tr><th>operator</th><th>campaign</th><th>reason</th>"
                    "<th>how its newest session ended</th></tr>\n";
  for (const auto& f : failed)
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", escape(f.op),
                       escape(f.campaign_id), escape(f.reason), escape(f.end_reason));
  return out + "</table>\n";
}

} // namespace

std::string render_html(const campaign_report& report) {
  std::string out =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>opforge report</title>"
      "<style>body{font-family:sans-serif;margin:24px;background:#fff}table{border-collapse:"
      "collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,"
      "th:first-child{text-align:left}</style></head><body>\n<h1>opforge report</h1>\n";
  out += header_html(report);
  out += coverage_table("Coverage by category", report.by_category, report.columns);
  out += coverage_table("Coverage by dtype", report.by_dtype, report.columns);
  out += "<h2>Coverage against LLM calls</h2>\n" + curves_svg(report.curves);
  std::vector<std::pair<std::string, double>> failures(report.failures.begin(),
                                                       report.failures.end());
  out += "<h2>Failed operators by final reason</h2>\n" +
         (failures.empty() ? "<p>None: every operator that ended was covered.</p>\n"
                           : bars_svg("failures", failures) + failed_table(report.failed));
  std::vector<std::pair<std::string, double>> calls;
  out += "<h2>Calls and tokens per passed operator</h2>\n<table><tr><th>campaign</th><th>"
         "operator</th><th>LLM calls</th><th>prompt tokens</th><th>completion tokens</th></tr>\n";
  for (const auto& p : report.passed) {
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                       escape(p.campaign_id), escape(p.op), p.calls, p.prompt_tokens,
                       p.completion_tokens);
    calls.emplace_back(p.campaign_id + " " + p.op, p.calls);
  }
  out += "</table>\n" + bars_svg("calls-per-operator", calls);
  out += "<h2>Regressions per toolchain</h2>\n";
  out += report.regressions.empty()
             ? "<p>None: every kernel passes on the newest toolchain it was validated on.</p>\n"
             : regressions_table("regressions", report.regressions);
  out += "<h2>Speedup per category</h2>\n" + speedup_table(report.speedups);
  out += "<h2>Share of the peak bandwidth</h2>\n" + roofline_svgs(report.roofline);
  out += "<h2>Speed regressions per toolchain</h2>\n";
  out += report.speed_regressions.empty()
             ? "<p>None: no kernel runs slower on a toolchain than on the one before it.</p>\n"
             : regressions_table("speed-regressions", report.speed_regressions);
  out += "<h2>Toolchain defects</h2>\n" + conformance_table(report.conformance);
  return out + "</body></html>\n";
}

} // namespace opforge
