#pragma once

// The opforge binary's subcommands that read the kernel library from the daemon: `kernels`,
// `regressions`, what `revalidate` prints, `report` and `export`.

#include "apps/cli_common.hpp"
#include "config/config.hpp"
#include "messages/device_kind.hpp"

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace opforge::cli {

// What `kernels` selects and shows.
struct kernels_options {
  std::string op;
  bool source = false;
};

// What `report` covers and where it writes.
struct report_options {
  std::string campaign;
  bool all = false;
  std::string html;
  std::string json;
  int timeout_ms = 30000;

  void add_to(CLI::App& cmd) {
    auto* one = cmd.add_option("--campaign", campaign, "report on this campaign");
    auto* every = cmd.add_flag("--all", all, "report on every campaign (the default)");
    one->excludes(every);
    cmd.add_option("--html", html, "write the report here: one HTML file with inline SVG plots");
    cmd.add_option("--json", json, "write the report's numbers here as JSON");
    // A report reads every session of its campaigns: far more than a status query.
    cmd.add_option("--timeout-ms", timeout_ms, "how long to wait for the daemon")
        ->check(CLI::PositiveNumber);
  }
};

// What `export` asks the daemon for and hands the exporter.
struct export_options {
  std::string format;
  std::string out;
  std::string name;
  std::string dispatch_key;
  std::string device_kind;
  std::string fingerprint;
  std::string min_speedup;
  std::string untimed;
  std::string unmeasured;
  std::string launch_bound;

  void add_to(CLI::App& cmd) {
    cmd.add_option("--format", format, "torch-library (a pip-installable package) or backendbench")
        ->required()
        ->check(CLI::IsMember({"torch-library", "backendbench"}));
    cmd.add_option("--out", out, "directory to write")->required();
    cmd.add_option("--name", name, "the package's name (torch-library)");
    cmd.add_option("--dispatch-key", dispatch_key, "where the kernels register (torch-library)")
        ->check(CLI::IsMember({"CUDA", "PrivateUse1", "CPU"}));
    cmd.add_option("--device-kind", device_kind,
                   "whose kernels to export (default: the campaigns' device kind)")
        ->check([](const std::string& kind) {
          return is_device_kind(kind) ? "" : "a device kind is " + std::string{device_kind_rule};
        });
    cmd.add_option("--fingerprint", fingerprint,
                   "export the kernels proven on this toolchain (default: the newest of each)");
    // The routing's defaults are the exporter's (the worker's data/timing.yaml export_routing).
    cmd.add_option("--min-speedup", min_speedup,
                   "a timed kernel serves a shape class at least this much faster than the "
                   "original (torch-library)")
        ->check(CLI::PositiveNumber);
    cmd.add_option("--untimed", untimed,
                   "where calls of a dtype and shape class without a timing go (torch-library)")
        ->check(CLI::IsMember({"kernel", "original"}));
    cmd.add_option("--unmeasured", unmeasured,
                   "where calls of a shape class without a timing go in a dtype timed in other "
                   "classes (torch-library)")
        ->check(CLI::IsMember({"kernel", "original"}));
    cmd.add_option("--launch-bound", launch_bound,
                   "where calls of a launch-bound dtype and shape class go: the original, or by "
                   "their speedup (torch-library)")
        ->check(CLI::IsMember({"original", "timed"}));
  }

  std::vector<std::string> exporter_command(const std::string& python,
                                            const std::string& bundle) const {
    std::vector<std::string> argv{python,     "-m",   "opforge_library", "export",
                                  "--bundle", bundle, "--format",        format,
                                  "--out",    out};
    if (!name.empty())
      argv.insert(argv.end(), {"--name", name});
    if (!dispatch_key.empty())
      argv.insert(argv.end(), {"--dispatch-key", dispatch_key});
    for (const auto& [flag, value] :
         {std::pair{"--min-speedup", &min_speedup}, std::pair{"--untimed", &untimed},
          std::pair{"--unmeasured", &unmeasured}, std::pair{"--launch-bound", &launch_bound}})
      if (!value->empty())
        argv.insert(argv.end(), {flag, *value});
    return argv;
  }
};

/// Lists the library's kernels, or prints OP's current source with `--source`.
int list_kernels(const config& cfg, const client_options& opts, const kernels_options& selected);

/// Lists the kernels that regressed (fail, or run slower) on a newer toolchain.
int list_regressions(const config& cfg, const client_options& opts);

/// Prints what a re-validation asked by hand owes, one row per toolchain.
void print_revalidation(const nlohmann::json& reply);

/// Writes the campaign report as HTML, JSON or both.
int write_report(const config& cfg, const report_options& selected);

/// Asks the daemon for the library's bundle and runs the worker package's exporter on it; the
/// exporter's exit status is this command's.
int export_library(const config& cfg, const client_options& opts, const export_options& chosen);

} // namespace opforge::cli
