#include "apps/cli_common.hpp"

#include "apps/control_client.hpp"
#include "messages/errors.hpp"

#include <algorithm>
#include <iostream>

namespace opforge::cli {

int fail(const caf::error& err, int code) {
  std::cerr << "opforge: " << message(err) << '\n';
  return code;
}

int request_and_print(const config& cfg, const client_options& opts, request_type type,
                      nlohmann::json fields,
                      const std::function<void(const nlohmann::json&)>& print) {
  auto reply = control_request(cfg.control.listen, type, std::move(fields),
                               std::chrono::milliseconds{opts.timeout_ms});
  if (!reply)
    return fail(reply.error(), exit_unreachable);
  if (opts.json)
    std::cout << reply->dump(2) << '\n';
  else
    print(*reply);
  return 0;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(rows.front().size() - 1, 0);
  for (auto& row : rows)
    for (size_t i = 0; i < widths.size(); ++i)
      widths[i] = std::max(widths[i], row[i].size());
  for (auto& row : rows) {
    for (size_t i = 0; i < widths.size(); ++i)
      std::cout << row[i] << std::string(widths[i] - row[i].size() + 2, ' ');
    std::cout << row.back() << '\n';
  }
}

std::string joined(const nlohmann::json& items) {
  std::string out;
  for (auto& item : items)
    out += (out.empty() ? "" : ", ") + item.get<std::string>();
  return out;
}

} // namespace opforge::cli
