#pragma once

// `opforge report`: what the campaigns achieved, computed from the stored campaigns and sessions.
// Pure functions over store scans, so they are tested without actors; the HTML is one file with
// inline SVG plots and nothing to fetch.

#include "actors/library/regressions.hpp"
#include "messages/import_messages.hpp"
#include "persistence/records.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace opforge {

/// One row of TritorX's Table 1: a category (or a dtype), how many operators, and the share of
/// them that passed per column (a campaign's model, or its endpoint when the model is unnamed).
struct coverage_row {
  std::string name;
  uint32_t operators = 0;
  std::map<std::string, double> covered; // column -> fraction in [0, 1]
};

/// Coverage against LLM calls: after `calls` answers per operator, `covered` of them passed.
struct curve_point {
  uint32_t calls = 0;
  uint32_t covered = 0;
};

struct coverage_curve {
  std::string name; // a campaign id, or "all campaigns" for the union
  uint32_t operators = 0;
  std::vector<curve_point> points; // ascending calls, one point per distinct count
};

/// What one passed operator cost.
struct passed_cost {
  std::string campaign_id;
  std::string op;
  uint32_t calls = 0;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
};

/// What one new toolchain broke: the kernels of a device kind that passed on an earlier
/// toolchain and fail on this one, where the change between the two reads the same.
struct toolchain_regressions {
  std::string device_kind;
  std::string fingerprint;            // the toolchain they fail on
  std::string change;                 // in words, from the last one they passed on
  uint32_t kernels = 0;               // regressed kernels
  std::vector<std::string> operators; // their operator ids, each once, sorted
};

/// How fast one category's kernels of a device kind are against their baselines: of each operator
/// variant its fastest timed version, by its speedup on the toolchain it was last timed on (the
/// geometric mean over the dtypes and shape classes that are not launch-bound, over all of them
/// where every one is).
struct category_speedup {
  std::string device_kind;
  std::string category;
  uint32_t kernels = 0;              // timed operator variants
  double geomean_speedup = 0;        // over those kernels
  double slowest = 0;                // the lowest kernel speedup
  double fastest = 0;                // the highest
  uint32_t slower_than_baseline = 0; // kernels with a speedup below 1
};

/// Where the same kernels stand against the device kind's peak bandwidth: their timings that are
/// not launch-bound, binned by peak_share.
struct roofline_histogram {
  std::string device_kind;
  std::vector<double> edges;    // bin i holds shares in [edges[i], edges[i + 1]); the last bin
                                // also holds a share of 1 or more
  std::vector<uint32_t> counts; // one per bin
  uint32_t launch_bound = 0;    // timings left out as launch-bound
  uint32_t without_peak = 0;    // timings on a kind whose registry entry names no peak
};

/// A campaign as the report's header lists it.
struct report_campaign {
  std::string campaign_id;
  std::string state;  // contract::campaign_state's name
  std::string column; // report_column: its model, or its endpoint
  std::string device_kind;
  std::vector<std::string> dtypes; // what it asked for
  uint32_t operators = 0;
  int64_t created_ms = 0;
  std::string error; // why it was rejected, or that it spent its token budget
};

/// An operator no campaign covered, by its newest failed session.
struct failed_operator {
  std::string op; // operator id
  std::string campaign_id;
  std::string reason;     // failure_reason()
  std::string end_reason; // the session's own words
};

struct campaign_report {
  int64_t generated_ms = 0;               // wall clock; set by whoever builds it
  std::vector<report_campaign> campaigns; // oldest first
  // In order of first appearance, of the campaigns that selected operators (a rejected one
  // selected none).
  std::vector<std::string> columns;
  std::vector<coverage_row> by_category;
  std::vector<coverage_row> by_dtype;
  std::vector<coverage_curve> curves; // one per campaign, then the union
  // Operators that no campaign covered, each counted once under failure_reason() of its newest
  // failed session.
  std::map<std::string, uint32_t> failures;
  std::vector<failed_operator> failed; // the same operators by name, sorted
  std::vector<passed_cost> passed;
  std::vector<toolchain_regressions> regressions; // of the whole library, not only the campaigns'
  std::vector<toolchain_regressions> speed_regressions; // likewise, the kernels that got slower
  std::vector<category_speedup> speedups;               // by device kind, then category
  std::vector<roofline_histogram> roofline;             // by device kind
  // What the conformance probes found on each toolchain (the library's kept reports), by device
  // kind and fingerprint.
  std::vector<contract::conformance_report> conformance;
  std::vector<import_status> imports; // every stored import, oldest first, without verdicts
};

/// A toolchain's conformance in one line, as `status` and the report say it: "no defects found
/// (N probes)", "N defects (M unknown) in P probes", or why the probes did not run.
std::string conformance_summary(const contract::conformance_report& report);

/// One defect in one line: "probe: out = <expression> on <dtype>: expected ... got ...", whether
/// the device kind lists it, and its patch and workaround.
std::string describe_toolchain_defect(const contract::toolchain_defect& defect);

/// Why a failed session ended, as a class that many operators share: the verdict of its last
/// attempt when it spent its budget (what kept it from passing, e.g. accuracy_error); else its end
/// reason without the details (e.g. "cancelled").
std::string failure_reason(const session_record& session);

/// The column a campaign's operators count under.
std::string report_column(const campaign_spec& spec);

/// Builds the report over `campaigns` and the sessions they ran; sessions of other campaigns are
/// ignored, and an operator a campaign lists but never started counts as not covered.
campaign_report build_report(const std::vector<stored_campaign>& campaigns,
                             const std::vector<session_record>& sessions);

/// `regressions` (find_regressions over the library) grouped per failing toolchain and change,
/// ordered by device kind, fingerprint and change.
std::vector<toolchain_regressions> per_toolchain(const std::vector<regression>& regressions);

/// `slower` (find_speed_regressions over the library) grouped as `per_toolchain` groups
/// regressions.
std::vector<toolchain_regressions> per_toolchain(const std::vector<speed_regression>& slower);

/// The library's speed for the report: `speedups` and `roofline` of `kernels` (the library's
/// `list` reply), each operator variant under the category a campaign of `campaigns` files it
/// under ("uncategorized" where none lists it).
void add_speed(campaign_report& report, const std::vector<kernel_version>& kernels,
               const std::vector<stored_campaign>& campaigns);

/// The report as one self-contained HTML page (inline SVG, no scripts, no network).
std::string render_html(const campaign_report& report);

} // namespace opforge
