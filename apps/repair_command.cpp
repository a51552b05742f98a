#include "apps/repair_command.hpp"

#include "apps/control_client.hpp"
#include "messages/errors.hpp"

#include <iostream>

namespace opforge {

void repair_options::add_to(CLI::App& cmd) {
  cmd.add_option("--fingerprint", fingerprint,
                 "repair only the kernels that regressed on this toolchain (default: every one)");
  cmd.add_option("--endpoint", endpoint,
                 "LLM endpoint by name (default: the first configured); a,b fails over from a to "
                 "b while a is down");
}

int run_repair(const std::string& control, const repair_options& options, bool json,
               std::chrono::milliseconds timeout) {
  auto reply = control_request(
      control, request_type::repair,
      {{"fingerprint", options.fingerprint}, {"endpoint", options.endpoint}}, timeout);
  if (!reply) {
    std::cerr << "opforge: " << message(reply.error()) << '\n';
    return 1;
  }
  if (json) {
    std::cout << reply->dump(2) << '\n';
    return 0;
  }
  auto campaigns = reply->value("campaigns", nlohmann::json::array());
  auto where = options.fingerprint.empty() ? std::string{} : " on toolchain " + options.fingerprint;
  if (campaigns.empty()) {
    std::cout << (reply->value("regressions", 0) == 0
                      ? "no regressions" + where + " in the library: nothing to repair\n"
                      : "every regression" + where +
                            " is served on its toolchain by another kernel already: nothing to "
                            "repair\n");
    return 0;
  }
  for (const auto& c : campaigns) {
    std::string seeded;
    for (const auto& id : c.value("seeded", nlohmann::json::array()))
      seeded += (seeded.empty() ? "" : ", ") + id.get<std::string>();
    auto id = c.value("campaign_id", std::string{});
    std::cout << "repair campaign " << id << " on toolchain " << c.value("fingerprint", "")
              << " (device " << c.value("device_kind", "") << ", endpoint "
              << c.value("endpoint", "") << "): " << seeded << "\n  follow it with `opforge attach "
              << id << "`\n";
  }
  return 0;
}

} // namespace opforge
