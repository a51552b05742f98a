#pragma once

// `opforge repair`: asks the daemon to repair the library's regressions. It builds one campaign per
// regressed toolchain (actors/library/repair.hpp), each pinned to that toolchain's fingerprint and
// seeding a debug-existing session per regressed kernel, and prints them; `opforge attach ID`
// follows one.

#include <chrono>
#include <string>

#include <CLI/CLI.hpp>

namespace opforge {

struct repair_options {
  std::string fingerprint; // only the regressions on this toolchain; "" = every one
  std::string endpoint;    // the LLM endpoint the sessions ask; "" = the daemon's default

  void add_to(CLI::App& cmd);
};

/// Starts the repair campaigns and prints them (the daemon's reply as JSON with `json`). Exit
/// status: 0 when they started or there was nothing to repair; 1 when the daemon refused or went
/// away.
int run_repair(const std::string& control, const repair_options& options, bool json,
               std::chrono::milliseconds timeout);

} // namespace opforge
