// opforge report's pure part: coverage tables, curves, failures, costs and speed from stored
// campaigns, sessions and kernels, and the self-contained HTML, rendered by a real headless
// Chromium.

#include "actors/library/report.hpp"
#include "tests/chromium_support.hpp"
#include "tests/test_store_support.hpp"

#include <cmath>
#include <fstream>
#include <optional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::chromium_testing;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

stored_campaign campaign(std::string id, std::string model, std::vector<operator_spec> ops) {
  stored_campaign c;
  c.spec.campaign_id = std::move(id);
  c.spec.endpoint = "ep-" + model;
  c.spec.model = std::move(model);
  c.spec.operators = std::move(ops);
  c.state = contract::campaign_state::done;
  return c;
}

operator_spec op(std::string name, std::string category, std::vector<std::string> dtypes) {
  return {std::move(name), "", std::move(category), "", std::move(dtypes)};
}

session_record session(const std::string& campaign_id, const std::string& op_name,
                       session_state state, uint32_t calls, std::string end_reason = "") {
  session_record s;
  s.campaign_id = campaign_id;
  s.session_id = campaign_id + "/" + op_name;
  s.op = op_name;
  s.state = state;
  s.total_calls = calls;
  s.prompt_tokens = 1000 * calls;
  s.completion_tokens = 100 * calls;
  s.end_reason = std::move(end_reason);
  return s;
}

session_record failed(const std::string& campaign_id, const std::string& op_name, uint32_t calls,
                      std::string last_outcome) {
  auto s = session(campaign_id, op_name, session_state::failed, calls,
                   "budget spent: 1 dialogs of at most 20 calls (" + std::to_string(calls) +
                       " calls in all)");
  s.history.push_back(
      {1, 1, contract::attempt_stage::test, contract::attempt_outcome::compile_error, "first"});
  s.history.push_back({1, calls, contract::attempt_stage::test,
                       *from_string<contract::attempt_outcome>(last_outcome), "last"});
  return s;
}

// Two models over the same four operators: "big" passes three, "small" passes one and fails two.
struct two_models {
  std::vector<stored_campaign> campaigns{
      campaign("c-big", "big",
               {op("abs", "elementwise", {"float32", "int64"}),
                op("neg", "elementwise", {"float32"}), op("sum", "reduction", {"float32"}),
                op("cumsum", "reduction", {"float32"})}),
      campaign("c-small", "small",
               {op("abs", "elementwise", {"float32", "int64"}),
                op("neg", "elementwise", {"float32"}), op("sum", "reduction", {"float32"}),
                op("cumsum", "reduction", {"float32"})})};
  std::vector<session_record> sessions{session("c-big", "abs", session_state::success, 1),
                                       session("c-big", "neg", session_state::success, 3),
                                       session("c-big", "sum", session_state::success, 3),
                                       failed("c-big", "cumsum", 20, "runtime_error"),
                                       session("c-small", "abs", session_state::success, 2),
                                       failed("c-small", "sum", 20, "timeout"),
                                       failed("c-small", "cumsum", 7, "accuracy_error"),
                                       // Still running: neither covered nor failed.
                                       session("c-small", "neg", session_state::prompt, 4),
                                       // Another campaign's session is not counted.
                                       session("c-other", "abs", session_state::success, 1)};
};

contract::toolchain_proof proof(const std::string& fingerprint, const std::string& triton,
                                contract::outcome outcome, int64_t at_ms) {
  contract::toolchain_proof made;
  made.fingerprint = fingerprint;
  made.device_kind = "interpreter";
  made.toolchain = {{"torch", "2.13.0"}, {"triton", triton}};
  made.outcome = outcome;
  made.validated_at_ms = at_ms;
  return made;
}

kernel_version kernel(const std::string& op, const std::string& variant, const std::string& hash,
                      std::vector<contract::toolchain_proof> proofs_newest_first) {
  kernel_version version;
  version.kernel.op = op;
  version.kernel.variant = variant;
  version.kernel.hash = hash;
  version.kernel.proofs = std::move(proofs_newest_first);
  version.device_kind = "interpreter";
  return version;
}

// Triton 3.6.0 (fingerprint aaaa) broke two versions of abs and max/binary; 3.5.1 (bbbb) broke
// neg, which passed on 3.6.0 before; sum passes everywhere.
std::vector<kernel_version> regressed_library() {
  using contract::outcome;
  auto on_351 = proof("bbbb", "3.5.1", outcome::pass, 1000);
  auto on_36 = proof("aaaa", "3.6.0", outcome::pass, 2000);
  auto fails_on_36 = proof("aaaa", "3.6.0", outcome::compile_error, 2000);
  auto fails_on_351 = proof("bbbb", "3.5.1", outcome::accuracy_error, 3000);
  return {kernel("abs", "", "h1", {fails_on_36, on_351}),
          kernel("abs", "", "h2", {fails_on_36, on_351}),
          kernel("max", "binary", "h3", {fails_on_36, on_351}),
          kernel("neg", "", "h4", {fails_on_351, on_36}), kernel("sum", "", "h5", {on_36, on_351})};
}

TEST(Report, CoverageByCategoryAndDtypePerModel) {
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  EXPECT_EQ(report.columns, (std::vector<std::string>{"big", "small"}));
  ASSERT_EQ(report.by_category.size(), 2u);
  EXPECT_EQ(report.by_category[0].name, "elementwise");
  EXPECT_EQ(report.by_category[0].operators, 2u);
  EXPECT_DOUBLE_EQ(report.by_category[0].covered.at("big"), 1.0);
  EXPECT_DOUBLE_EQ(report.by_category[0].covered.at("small"), 0.5);
  EXPECT_EQ(report.by_category[1].name, "reduction");
  EXPECT_DOUBLE_EQ(report.by_category[1].covered.at("big"), 0.5);
  EXPECT_DOUBLE_EQ(report.by_category[1].covered.at("small"), 0.0);
  ASSERT_EQ(report.by_dtype.size(), 2u);
  EXPECT_EQ(report.by_dtype[0].name, "float32");
  EXPECT_EQ(report.by_dtype[0].operators, 4u);
  EXPECT_DOUBLE_EQ(report.by_dtype[0].covered.at("big"), 0.75);
  EXPECT_EQ(report.by_dtype[1].name, "int64");
  EXPECT_DOUBLE_EQ(report.by_dtype[1].covered.at("small"), 1.0);
}

TEST(Report, CurvesPerCampaignAndTheirUnion) {
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  ASSERT_EQ(report.curves.size(), 3u);
  auto points = [](const coverage_curve& c) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (const auto& p : c.points)
      out.emplace_back(p.calls, p.covered);
    return out;
  };
  using pts = std::vector<std::pair<uint32_t, uint32_t>>;
  EXPECT_EQ(report.curves[0].name, "c-big");
  EXPECT_EQ(report.curves[0].operators, 4u);
  EXPECT_EQ(points(report.curves[0]), (pts{{1, 1}, {3, 3}}));
  EXPECT_EQ(points(report.curves[1]), (pts{{2, 1}}));
  // The union takes each operator's cheapest pass: abs after 1 call (big), neg and sum after 3.
  EXPECT_EQ(report.curves[2].name, "all campaigns");
  EXPECT_EQ(report.curves[2].operators, 4u);
  EXPECT_EQ(points(report.curves[2]), (pts{{1, 1}, {3, 3}}));
}

TEST(Report, FailuresByReasonAndCostsOfPasses) {
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  // sum failed on "small" but passed on "big": only cumsum is a failed operator, under the last
  // verdict of its newest session, "small"'s.
  EXPECT_EQ(report.failures, (std::map<std::string, uint32_t>{{"accuracy_error", 1}}));
  ASSERT_EQ(report.passed.size(), 4u);
  EXPECT_EQ(report.passed[0].campaign_id, "c-big");
  EXPECT_EQ(report.passed[0].op, "abs");
  EXPECT_EQ(report.passed[2].op, "sum");
  EXPECT_EQ(report.passed[2].calls, 3u);
  EXPECT_EQ(report.passed[2].prompt_tokens, 3000u);
  EXPECT_EQ(report.passed[2].completion_tokens, 300u);
  EXPECT_EQ(report.passed[3].campaign_id, "c-small");
}

TEST(Report, HeaderNamesTheCampaignsAndEveryFailedOperatorIsNamed) {
  two_models in;
  in.campaigns[0].request.dtypes = {"float32", "int64"};
  in.campaigns[0].spec.device_kind = "cuda";
  in.campaigns[0].spec.created_ms = 1764892800000; // 2025-12-05 00:00 UTC
  // Rejected before it selected anything: listed in the header, no column of its own.
  auto rejected = campaign("c-rejected", "phantom", {});
  rejected.state = contract::campaign_state::rejected;
  rejected.error = "no OpInfo named 'absx'";
  in.campaigns.push_back(rejected);
  auto report = build_report(in.campaigns, in.sessions);
  report.generated_ms = 1764896400000; // 2025-12-05 01:00 UTC

  EXPECT_EQ(report.columns, (std::vector<std::string>{"big", "small"}));
  ASSERT_EQ(report.campaigns.size(), 3u);
  EXPECT_EQ(report.campaigns[0].dtypes, (std::vector<std::string>{"float32", "int64"}));
  EXPECT_EQ(report.campaigns[1].dtypes, (std::vector<std::string>{"float32", "int64"}))
      << "without a stored request: its operators' dtypes";
  EXPECT_EQ(report.campaigns[2].state, "rejected");
  EXPECT_EQ(report.campaigns[2].operators, 0u);
  ASSERT_EQ(report.failed.size(), 1u);
  EXPECT_EQ(report.failed[0].op, "cumsum");
  EXPECT_EQ(report.failed[0].campaign_id, "c-small");
  EXPECT_EQ(report.failed[0].reason, "accuracy_error");
  EXPECT_THAT(report.failed[0].end_reason, HasSubstr("budget spent"));

  auto html = render_html(report);
  EXPECT_THAT(html, HasSubstr("Generated 2025-12-05 01:00 UTC. 3 campaigns on device kinds cuda, "
                              "interpreter; dtypes float32, int64."));
  EXPECT_THAT(html, HasSubstr("<td>c-rejected</td><td>rejected</td><td>phantom</td>"));
  EXPECT_THAT(html, HasSubstr("no OpInfo named 'absx'"));
  EXPECT_THAT(html, HasSubstr("<tr><td>cumsum</td><td>c-small</td><td>accuracy_error</td>"));
  EXPECT_THAT(html, Not(HasSubstr("<th>phantom</th>")));
}

TEST(Report, FailureReasonsAreClassesNotSentences) {
  EXPECT_EQ(failure_reason(failed("c", "abs", 3, "lint_violation")), "lint_violation");
  auto cancelled = failed("c", "abs", 3, "accuracy_error");
  cancelled.end_reason = "cancelled: by request";
  EXPECT_EQ(failure_reason(cancelled), "cancelled");
  auto refused = session("c", "abs", session_state::failed, 1,
                         "the endpoint refused the request for good: 404 no such answer");
  EXPECT_EQ(failure_reason(refused), "the endpoint refused the request for good");
  // Out of budget before any answer was judged: nothing more specific to say.
  auto nothing = session("c", "abs", session_state::failed, 0,
                         "budget spent: 1 dialogs of at most 2 calls (0 calls in all)");
  EXPECT_EQ(failure_reason(nothing), "budget spent");
  EXPECT_EQ(failure_reason(session("c", "abs", session_state::failed, 0)), "unknown");
}

TEST(Report, RegressionsPerToolchainChange) {
  auto groups = per_toolchain(find_regressions(regressed_library()));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].device_kind, "interpreter");
  EXPECT_EQ(groups[0].fingerprint, "aaaa");
  EXPECT_EQ(groups[0].change, "triton 3.5.1 -> 3.6.0");
  EXPECT_EQ(groups[0].kernels, 3u);
  EXPECT_EQ(groups[0].operators, (std::vector<std::string>{"abs", "max/binary"}));
  EXPECT_EQ(groups[1].fingerprint, "bbbb");
  EXPECT_EQ(groups[1].change, "triton 3.6.0 -> 3.5.1");
  EXPECT_EQ(groups[1].kernels, 1u);
  EXPECT_EQ(groups[1].operators, (std::vector<std::string>{"neg"}));
  EXPECT_TRUE(per_toolchain(std::vector<regression>{}).empty());
}

TEST(Report, HtmlIsSelfContained) {
  two_models in;
  in.campaigns[0].spec.operators[0].category = "<script>";
  auto report = build_report(in.campaigns, in.sessions);
  EXPECT_THAT(render_html(report), HasSubstr("<h2>Regressions per toolchain</h2>\n<p>None: "));
  report.regressions = per_toolchain(find_regressions(regressed_library()));
  auto html = render_html(report);
  EXPECT_THAT(html, HasSubstr("<tr><td>reduction</td><td>2</td><td>50.0%</td><td>0.0%</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>interpreter</td><td>aaaa</td><td>triton 3.5.1 -&gt; "
                              "3.6.0</td><td>3</td><td>abs, max/binary</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<svg id=\"regressions\""));
  EXPECT_THAT(html, HasSubstr("<tr><td>float32</td><td>4</td><td>75.0%</td><td>25.0%</td></tr>"));
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;"));
  EXPECT_THAT(html, HasSubstr("<svg id=\"coverage-curve\""));
  EXPECT_THAT(html, HasSubstr("<svg id=\"failures\""));
  EXPECT_THAT(html, HasSubstr("<svg id=\"calls-per-operator\""));
  // Nothing to fetch: no scripts, no links, no images from elsewhere.
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, Not(HasSubstr("href=")));
}

// A real headless Chromium draws the page: the bars and all three curves show up in their colours.
TEST(Report, ChromiumRendersThePlots) {
  two_models in;
  test::temp_dir dir;
  auto page = dir.path() / "report.html";
  auto shot = dir.path() / "report.png";
  auto report = build_report(in.campaigns, in.sessions);
  report.regressions = per_toolchain(find_regressions(regressed_library()));
  std::ofstream{page} << render_html(report);
  auto img = screenshot(page, shot);
  EXPECT_EQ(img.width, 800u);
  EXPECT_EQ(img.height, 3200u);
  // Bars are filled in the first colour; the curves are 2-3 px lines of about 570 px.
  EXPECT_GT(pixels_of(img, 0x1f77b4), 2000u);
  EXPECT_GT(pixels_of(img, 0xd62728), 400u);
  EXPECT_GT(pixels_of(img, 0x2ca02c), 600u);
  // The regressions' bars, in a colour of their own.
  EXPECT_GT(pixels_of(img, 0xff7f0e), 1000u);
}

contract::kernel_timing timing(const std::string& fingerprint, const std::string& shape_class,
                               double speedup, std::optional<double> peak_share,
                               bool launch_bound = false, int64_t at_ms = 10) {
  return {.fingerprint = fingerprint,
          .device_kind = "interpreter",
          .dtype = contract::dtype::float32,
          .shape_class = shape_class,
          .baseline = "aten",
          .kernel_us = 10,
          .baseline_us = 10 * speedup,
          .speedup = speedup,
          .noise = 0.01,
          .launch_bound = launch_bound,
          .peak_share = peak_share,
          .measured_at_ms = at_ms};
}

// abs and neg (elementwise) and sum (reduction) of two_models' campaigns are timed; cumsum is not.
// abs has two versions: the faster one counts. sum's timings on an older toolchain do not.
std::vector<kernel_version> timed_library() {
  using contract::outcome;
  auto passes = std::vector{proof("aaaa", "3.6.0", outcome::pass, 2000)};
  auto slow_abs = kernel("abs", "", "h1", passes);
  slow_abs.kernel.timings = {timing("aaaa", "n<=1M", 0.5, 0.3)};
  auto fast_abs = kernel("abs", "", "h2", passes);
  fast_abs.kernel.timings = {timing("aaaa", "n<=1M", 2, 0.85), timing("aaaa", "n<=16M", 8, 0.95),
                             // Launch-bound: in neither the speedup nor the histogram.
                             timing("aaaa", "n<=4K", 100, 0.01, true)};
  auto neg = kernel("neg", "", "h3", passes);
  neg.kernel.timings = {timing("aaaa", "n<=1M", 0.5, 0.12), timing("aaaa", "n<=16M", 0.5, {})};
  auto sum = kernel("sum", "", "h4", passes);
  sum.kernel.timings = {timing("bbbb", "n<=1M", 9, 0.5, false, 5),
                        timing("aaaa", "n<=1M", 1.5, 1.2, false, 20)};
  auto cumsum = kernel("cumsum", "", "h5", passes);
  auto unfiled = kernel("erf", "", "h6", passes);
  unfiled.kernel.timings = {timing("aaaa", "n<=1M", 3, 0.05)};
  return {slow_abs, fast_abs, neg, sum, cumsum, unfiled};
}

TEST(Report, SpeedupPerCategoryAndTheShareOfThePeak) {
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  add_speed(report, timed_library(), in.campaigns);
  ASSERT_EQ(report.speedups.size(), 3u);
  const auto& elementwise = report.speedups[0];
  EXPECT_EQ(elementwise.device_kind, "interpreter");
  EXPECT_EQ(elementwise.category, "elementwise");
  EXPECT_EQ(elementwise.kernels, 2u);
  // abs: sqrt(2 * 8) = 4; neg: 0.5; their geometric mean sqrt(2).
  EXPECT_NEAR(elementwise.geomean_speedup, std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(elementwise.slowest, 0.5, 1e-12);
  EXPECT_NEAR(elementwise.fastest, 4, 1e-12);
  EXPECT_EQ(elementwise.slower_than_baseline, 1u);
  const auto& reduction = report.speedups[1];
  EXPECT_EQ(reduction.category, "reduction");
  EXPECT_EQ(reduction.kernels, 1u);
  EXPECT_NEAR(reduction.geomean_speedup, 1.5, 1e-12);
  EXPECT_EQ(report.speedups[2].category, "uncategorized");
  EXPECT_NEAR(report.speedups[2].geomean_speedup, 3, 1e-12);

  ASSERT_EQ(report.roofline.size(), 1u);
  const auto& histogram = report.roofline[0];
  EXPECT_EQ(histogram.device_kind, "interpreter");
  ASSERT_EQ(histogram.edges.size(), 11u);
  EXPECT_DOUBLE_EQ(histogram.edges[0], 0);
  EXPECT_DOUBLE_EQ(histogram.edges[10], 1);
  // abs 0.85 and 0.95, neg 0.12, sum 1.2 (the last bin holds 1 and more), erf 0.05.
  EXPECT_EQ(histogram.counts, (std::vector<uint32_t>{1, 1, 0, 0, 0, 0, 0, 0, 1, 2}));
  EXPECT_EQ(histogram.launch_bound, 1u);
  EXPECT_EQ(histogram.without_peak, 1u);

  auto html = render_html(report);
  EXPECT_THAT(html, HasSubstr("<tr><td>interpreter</td><td>elementwise</td><td>2</td><td>1.41x"
                              "</td><td>0.50x</td><td>4.00x</td><td>1</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<svg id=\"roofline-interpreter\""));
  EXPECT_THAT(html, HasSubstr("interpreter: 1 launch-bound timings left out, 1 without a peak"));
  EXPECT_THAT(html, HasSubstr("<h2>Speed regressions per toolchain</h2>\n<p>None"));
}

TEST(Report, WithoutTimingsTheSpeedSectionsSaySo) {
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  add_speed(report, regressed_library(), in.campaigns);
  EXPECT_TRUE(report.speedups.empty());
  EXPECT_TRUE(report.roofline.empty());
  auto html = render_html(report);
  EXPECT_THAT(html, HasSubstr("<h2>Speedup per category</h2>\n<p>No kernel has been timed yet."));
}

TEST(Report, SpeedRegressionsPerToolchainChange) {
  using contract::outcome;
  auto slowed = kernel(
      "abs", "", "h1",
      {proof("bbbb", "3.5.1", outcome::pass, 3000), proof("aaaa", "3.6.0", outcome::pass, 2000)});
  slowed.kernel.timings = {timing("aaaa", "n<=1M", 2, {}), timing("bbbb", "n<=1M", 2, {})};
  slowed.kernel.timings[1].kernel_us = 20;
  two_models in;
  auto report = build_report(in.campaigns, in.sessions);
  report.speed_regressions = per_toolchain(find_speed_regressions({slowed}, 0.10));
  ASSERT_EQ(report.speed_regressions.size(), 1u);
  EXPECT_EQ(report.speed_regressions[0].fingerprint, "bbbb");
  EXPECT_EQ(report.speed_regressions[0].change, "triton 3.6.0 -> 3.5.1");
  EXPECT_EQ(report.speed_regressions[0].operators, std::vector<std::string>{"abs"});
  auto html = render_html(report);
  EXPECT_THAT(html, HasSubstr("<svg id=\"speed-regressions\""));
  EXPECT_THAT(html, HasSubstr("<tr><td>interpreter</td><td>bbbb</td><td>triton 3.6.0 -&gt; "
                              "3.5.1</td><td>1</td><td>abs</td></tr>"));
}

} // namespace

// Each toolchain's conformance: a row per defect with what it computes and its workaround, or
// the count of probes that found none.
TEST(Report, ToolchainDefectsPerDeviceKindAndFingerprint) {
  campaign_report report;
  EXPECT_THAT(render_html(report),
              HasSubstr("<h2>Toolchain defects</h2>\n<p>No worker has reported"));
  report.conformance = {
      {.fingerprint = "aaaa", .device_kind = "cuda", .probes_run = 31},
      {.fingerprint = "bbbb",
       .device_kind = "interpreter",
       .probes_run = 31,
       .defects = {{.probe = "negate_bfloat16",
                    .dtype = "bfloat16",
                    .expression = "-x",
                    .expected = "[-0.5]",
                    .actual = "[-8.0]",
                    .known = true,
                    .workaround = "(-x.to(tl.float32)).to(tl.bfloat16)",
                    .patch = "negation_sign_flip"},
                   {.probe = "rsqrt_float32", .dtype = "float32", .expression = "tl.rsqrt(x)"}}},
      {.fingerprint = "cccc", .device_kind = "interpreter", .error = "the probe run exited 1"}};
  EXPECT_EQ(conformance_summary(report.conformance[0]), "no defects found (31 probes)");
  EXPECT_EQ(conformance_summary(report.conformance[1]), "2 defects (1 unknown) in 31 probes");
  EXPECT_EQ(conformance_summary(report.conformance[2]),
            "the probes did not run: the probe run exited 1");
  EXPECT_EQ(describe_toolchain_defect(report.conformance[1].defects[1]),
            "rsqrt_float32: out = tl.rsqrt(x) on float32: expected , actual  (UNKNOWN); "
            "workaround: none known");
  auto html = render_html(report);
  EXPECT_THAT(html, HasSubstr("<tr><td>cuda</td><td>aaaa</td><td colspan=\"8\">no defects found "
                              "(31 probes)</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>interpreter</td><td>bbbb</td><td>negate_bfloat16</td><td>"
                              "bfloat16</td><td>-x</td><td>[-0.5]</td><td>[-8.0]</td><td>yes</td>"
                              "<td>negation_sign_flip</td><td>(-x.to(tl.float32)).to(tl.bfloat16)"
                              "</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<td>tl.rsqrt(x)</td><td></td><td></td><td>no</td><td></td><td>"
                              "none known</td></tr>"));
}

TEST(Report, ImportsAreListedWithWhatTheyAccepted) {
  campaign_report report;
  EXPECT_THAT(render_html(report),
              HasSubstr("<h2>Imports</h2>\n<p>None: no kernel set or backend was imported.</p>"));
  report.imports = {{.import_id = "import-20261206-101500-00ab",
                     .state = import_state::done,
                     .layout = import_layout::torch_library,
                     .source = "flag_gems",
                     .device_kind = "cuda",
                     .created_ms = 1'796'000'000'000,
                     .tests = 433,
                     .accepted = 15},
                    {.import_id = "import-20261206-101600-00cd",
                     .state = import_state::failed,
                     .error = "the daemon stopped while the import was testing; the verdicts "
                              "before that stand",
                     .layout = import_layout::candidates,
                     .source = "team<x>",
                     .device_kind = "interpreter"}};
  auto html = render_html(report);
  EXPECT_THAT(html, HasSubstr("<tr><td>import-20261206-101500-00ab</td><td>done</td><td>"
                              "torch-library</td><td>flag_gems</td><td>cuda</td><td>15</td><td>"
                              "433</td><td>2026-11-30 00:53 UTC</td><td>-</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<td>failed</td><td>candidates</td><td>team&lt;x&gt;</td>"));
  EXPECT_THAT(html, HasSubstr("<td>the daemon stopped while the import was testing; the "
                              "verdicts before that stand</td></tr>"));
}
