// The report as one self-contained HTML page: its tables, and its plots as inline SVG.

#include "actors/library/report.hpp"
#include "messages/utc_time.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <spdlog/fmt/fmt.h>

namespace opforge {

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

// The page names its time zone: it is read away from any terminal's clock.
std::string report_time(int64_t ms) {
  return utc_minute(ms) + " UTC";
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
      report.generated_ms ? report_time(report.generated_ms) : std::string{"at an unknown time"},
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
                       report_time(c.created_ms), escape(c.error.empty() ? "-" : c.error));
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

// Every import the store holds: what was imported, where, and how much of it was accepted.
std::string imports_table(const std::vector<import_status>& imports) {
  if (imports.empty())
    return "<p>None: no kernel set or backend was imported.</p>\n";
  std::string out = "<table id=\"imports\"><tr><th>import</th><th>state</th><th>layout</th>"
                    "<th>source</th><th>device kind</th><th>accepted</th><th>of</th>"
                    "<th>opened</th><th>error</th></tr>\n";
  for (const auto& i : imports)
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                       "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
                       escape(i.import_id), to_string(i.state), to_string(i.layout),
                       escape(i.source), escape(i.device_kind), i.accepted, i.tests,
                       report_time(i.created_ms), escape(i.error.empty() ? "-" : i.error));
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
  out += "<h2>Imports</h2>\n" + imports_table(report.imports);
  return out + "</body></html>\n";
}

} // namespace opforge
