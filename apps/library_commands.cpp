#include "apps/library_commands.hpp"

#include "apps/control_client.hpp"
#include "messages/errors.hpp"
#include "messages/utc_time.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <spawn.h>
#include <spdlog/fmt/fmt.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace opforge::cli {

namespace {

// One line per kernel version; the validations (fingerprint:outcome, newest first) come last.
void print_kernels(const nlohmann::json& reply, const kernels_options& selected) {
  auto kernels = reply.value("kernels", nlohmann::json::array());
  if (kernels.empty()) {
    std::cout << "no kernels" << (selected.op.empty() ? "" : " for " + selected.op)
              << " in the library\n";
    return;
  }
  std::vector<std::vector<std::string>> rows{
      {"OPERATOR", "VERSION", "DEVICE", "DTYPES", "ORIGIN", "ACCEPTED (UTC)", "HASH", "PROVED ON"}};
  for (auto& k : kernels) {
    std::string proofs;
    for (auto& p : k.value("proofs", nlohmann::json::array()))
      proofs += (proofs.empty() ? "" : ", ") + p.value("fingerprint", std::string{}) + ":" +
                p.value("outcome", std::string{});
    auto provenance = k.value("provenance", nlohmann::json::object());
    rows.push_back({k.value("operator", ""),
                    std::to_string(k.value("version", 0)) + (k.value("current", false) ? "*" : ""),
                    k.value("device_kind", ""), joined(k.value("dtypes", nlohmann::json::array())),
                    provenance.value("origin", "-"),
                    utc_minute(k.value("accepted_at_ms", int64_t{0})), k.value("hash", ""),
                    proofs.empty() ? "-" : proofs});
  }
  print_table(rows);
  std::cout << "(* current: the operator's newest kernel accepted on that device kind)\n";
}

// The current kernel's source; with several device kinds, each under a comment that names it.
int print_source(const nlohmann::json& reply, const kernels_options& selected) {
  std::vector<nlohmann::json> current;
  for (auto& k : reply.value("kernels", nlohmann::json::array()))
    if (k.value("current", false))
      current.push_back(k);
  if (current.empty()) {
    std::cerr << "opforge: no kernel for " << selected.op << " in the library\n";
    return exit_unreachable;
  }
  for (auto& k : current) {
    if (current.size() > 1)
      std::cout << "# " << k.value("operator", "") << " v" << k.value("version", 0) << " on "
                << k.value("device_kind", "") << " (" << k.value("hash", "") << ")\n";
    std::cout << k.value("source", "");
  }
  return 0;
}

} // namespace

int list_kernels(const config& cfg, const client_options& opts, const kernels_options& selected) {
  if (selected.source && selected.op.empty()) {
    std::cerr << "opforge: --source needs OP, the operator whose kernel to print\n";
    return exit_bad_config;
  }
  int printed = 0; // print_source's status: the version asked for may not be there
  auto status = request_and_print(cfg, opts, request_type::kernels,
                                  {{"op", selected.op}, {"source", selected.source}},
                                  [&](const nlohmann::json& reply) {
                                    if (selected.source)
                                      printed = print_source(reply, selected);
                                    else
                                      print_kernels(reply, selected);
                                  });
  return status != 0 ? status : printed;
}

namespace {

// One line per regressed kernel: the toolchain change in words, the verdict before and after, and
// last, as it may be long, why it fails now. Then one line per kernel that got slower: its
// slowest dtype and shape class with the times on both toolchains, and how many more there are.
void print_regressions(const nlohmann::json& reply) {
  auto regressions = reply.value("regressions", nlohmann::json::array());
  auto slower = reply.value("speed_regressions", nlohmann::json::array());
  if (regressions.empty() && slower.empty()) {
    std::cout << "no regressions in the library\n";
    return;
  }
  auto verdict = [](const nlohmann::json& proof) {
    return proof.value("fingerprint", std::string{}) + ":" + proof.value("outcome", std::string{}) +
           " (" + std::to_string(proof.value("tests_passed", 0)) + "/" +
           std::to_string(proof.value("tests_run", 0)) + ")";
  };
  auto or_dash = [](const std::string& text) { return text.empty() ? std::string{"-"} : text; };
  if (!regressions.empty()) {
    std::vector<std::vector<std::string>> rows{
        {"OPERATOR", "HASH", "CHANGE", "BEFORE", "AFTER", "SERVED BY", "FAILURE"}};
    for (auto& r : regressions)
      rows.push_back({r.value("operator", ""), r.value("hash", ""), r.value("change", ""),
                      verdict(r["before"]), verdict(r["after"]),
                      or_dash(r.value("served_by", std::string{})),
                      or_dash(r["after"].value("detail", std::string{}))});
    print_table(rows);
  }
  if (!slower.empty()) {
    if (!regressions.empty())
      std::cout << '\n';
    std::vector<std::vector<std::string>> rows{
        {"OPERATOR", "HASH", "CHANGE", "BEFORE", "AFTER", "SLOWEST", "TIME", "SERVED BY"}};
    for (auto& r : slower) {
      auto cells = r.value("slower", nlohmann::json::array());
      const auto& worst = cells.at(0);
      auto time = fmt::format("{:.1f} -> {:.1f} us ({:.2f}x, noise {:.0f}%/{:.0f}%)",
                              worst.value("before_us", 0.0), worst.value("after_us", 0.0),
                              worst.value("ratio", 0.0), 100 * worst.value("before_noise", 0.0),
                              100 * worst.value("after_noise", 0.0));
      if (cells.size() > 1)
        time += fmt::format(", {} more", cells.size() - 1);
      rows.push_back(
          {r.value("operator", ""), r.value("hash", ""), r.value("change", ""),
           r["before"].value("fingerprint", std::string{}),
           r["after"].value("fingerprint", std::string{}),
           worst.value("dtype", std::string{}) + " " + worst.value("shape_class", std::string{}),
           time, or_dash(r.value("served_by", std::string{}))});
    }
    print_table(rows);
  }
}

} // namespace

int list_regressions(const config& cfg, const client_options& opts) {
  return request_and_print(cfg, opts, request_type::regressions, {}, print_regressions);
}

// What re-validation asked by hand owes: one row per toolchain it applies to.
void print_revalidation(const nlohmann::json& reply) {
  std::vector<std::vector<std::string>> rows{
      {"DEVICE", "FINGERPRINT", "OWED", "RUNNING", "PASSED", "FAILED", "TOOLCHAIN"}};
  for (const auto& t : reply.value("toolchains", nlohmann::json::array())) {
    // Named: items() of the temporary that value() returns would dangle in the range-for (C++20
    // destroys it before the loop body runs). A version a toolchain lacks (no CUDA or driver on
    // an interpreter worker) is left out.
    auto toolchain = t.value("toolchain", nlohmann::json::object());
    std::string tools;
    for (const auto& [name, version] : toolchain.items())
      if (version.is_string() && !version.get_ref<const std::string&>().empty())
        tools += (tools.empty() ? "" : " ") + name + " " + version.get<std::string>();
    rows.push_back({t.value("device_kind", std::string{}), t.value("fingerprint", std::string{}),
                    std::to_string(t.value("owed", 0)), std::to_string(t.value("running", 0)),
                    std::to_string(t.value("passed", 0)), std::to_string(t.value("failed", 0)),
                    tools});
  }
  print_table(rows);
  std::cout << "(verdicts older than this request no longer count there; `opforge status` "
               "shows the progress)\n";
}

namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
  out.close();
  if (!out)
    std::cerr << "opforge: cannot write " << path << '\n';
  return static_cast<bool>(out);
}

} // namespace

int write_report(const config& cfg, const report_options& selected) {
  if (selected.html.empty() && selected.json.empty()) {
    std::cerr << "opforge: report needs --html FILE, --json FILE or both\n";
    return exit_bad_config;
  }
  auto reply =
      control_request(cfg.control.listen, request_type::report, {{"campaign", selected.campaign}},
                      std::chrono::milliseconds{selected.timeout_ms});
  if (!reply)
    return fail(reply.error(), exit_unreachable);
  if (!selected.html.empty() && !write_file(selected.html, reply->value("html", "")))
    return exit_unreachable;
  if (!selected.json.empty() && !write_file(selected.json, (*reply)["report"].dump(2) + "\n"))
    return exit_unreachable;
  return 0;
}

namespace {

// Runs `argv` with this process's stdin, stdout and stderr, and waits: its exit status, or 128 +
// the signal that ended it, as a shell reports it.
caf::expected<int> run_child(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (int err = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ); err != 0)
    return caf::make_error(errc::config_invalid,
                           "cannot run " + argv[0] + ": " + std::strerror(err) +
                               " (set python: in the config, or OPFORGE_PYTHON)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return caf::make_error(errc::unspecified, std::string{"waitpid: "} + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

// Asks the daemon for the bundle, writes it to a temporary file and runs the exporter of the
// worker package on it (PROTOCOL.md, "Control socket": export); the exporter's exit status is
// this command's.
int export_library(const config& cfg, const client_options& opts, const export_options& chosen) {
  auto reply =
      control_request(cfg.control.listen, request_type::export_,
                      {{"device_kind", chosen.device_kind}, {"fingerprint", chosen.fingerprint}},
                      std::chrono::milliseconds{opts.timeout_ms});
  if (!reply)
    return fail(reply.error(), exit_unreachable);
  auto kind = reply->value("device_kind", std::string{});
  auto* bundle = reply->contains("bundle") ? &(*reply)["bundle"] : nullptr;
  if (!bundle || !bundle->is_binary()) {
    std::cerr << "opforge: the daemon's reply to export has no bundle\n";
    return exit_unreachable;
  }
  if (reply->value("kernels", 0) == 0) {
    std::cerr << "opforge: the library has no kernels for device kind " << kind
              << (chosen.fingerprint.empty() ? "" : " proven on toolchain " + chosen.fingerprint)
              << ": nothing to export\n";
    return exit_unreachable;
  }
  auto pattern = (std::filesystem::temp_directory_path() / "opforge-bundle-XXXXXX").string();
  int fd = ::mkstemp(pattern.data());
  if (fd < 0) {
    std::cerr << "opforge: cannot create a temporary file: " << std::strerror(errno) << '\n';
    return exit_bad_config;
  }
  ::close(fd);
  struct remove_file {
    std::string path;
    ~remove_file() { std::filesystem::remove(path); }
  } cleanup{pattern};
  const auto& bytes = bundle->get_binary();
  std::ofstream{pattern, std::ios::binary}.write(reinterpret_cast<const char*>(bytes.data()),
                                                 static_cast<std::streamsize>(bytes.size()));
  std::cerr << "exporting " << reply->value("kernels", 0) << " kernels (device kind " << kind
            << ") as " << chosen.format << " into " << chosen.out << '\n';
  auto status = run_child(chosen.exporter_command(cfg.python, pattern));
  if (!status)
    return fail(status.error(), exit_bad_config);
  return *status;
}

} // namespace opforge::cli
