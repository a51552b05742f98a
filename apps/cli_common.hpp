#pragma once

// What the opforge binary's client subcommands share: their exit codes, how they print an error,
// the options every one takes, and plain-text tables.

#include "apps/control_protocol.hpp"
#include "config/config.hpp"

#include <functional>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace opforge::cli {

inline constexpr int exit_unreachable = 1;
inline constexpr int exit_bad_config = 2;
// A campaign that ran to its end with operators failed: scripts tell it from a clean run.
inline constexpr int exit_operators_failed = 3;

/// Prints `opforge: <the error's message>` to stderr and returns `code`.
int fail(const caf::error& err, int code);

/// Options of the client subcommands.
struct client_options {
  bool json = false;
  int timeout_ms = 5000;

  void add_to(CLI::App& cmd) {
    cmd.add_flag("--json", json, "print the daemon's reply as JSON");
    cmd.add_option("--timeout-ms", timeout_ms, "how long to wait for the daemon")
        ->check(CLI::PositiveNumber);
  }
};

/// Sends a request of `type` with `fields` to the daemon of `cfg` and prints its reply: as JSON
/// with --json, else through `print`. Returns 0, or exit_unreachable after printing the error.
int request_and_print(const config& cfg, const client_options& opts, request_type type,
                      nlohmann::json fields,
                      const std::function<void(const nlohmann::json&)>& print);

/// `rows` in columns as wide as their widest entry; the last column is not padded.
void print_table(const std::vector<std::vector<std::string>>& rows);

/// The strings of a JSON array, joined by ", ".
std::string joined(const nlohmann::json& items);

} // namespace opforge::cli
