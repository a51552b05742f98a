#include "persistence/model_sets.hpp"

#include "messages/errors.hpp"
#include "persistence/keys.hpp"

#include <algorithm>

namespace opforge {

namespace {

caf::error invalid(std::string_view set, const std::string& what) {
  return caf::make_error(errc::request_invalid, "model set " + std::string{set} + ": " + what);
}

bool only_of(std::string_view text, bool (*allowed)(char)) {
  return std::all_of(text.begin(), text.end(), allowed);
}

std::string mib(size_t bytes) {
  return std::to_string((bytes + (size_t{1} << 20) - 1) >> 20) + " MiB";
}

} // namespace

bool is_model_set(std::string_view name) {
  constexpr std::string_view prefix = "model:";
  if (!name.starts_with(prefix))
    return false;
  auto model = name.substr(prefix.size());
  return !model.empty() && model.size() <= 58 && only_of(model, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  });
}

caf::expected<write_batch> replace_model_set(std::string_view set, const model_set_files& files,
                                             const std::vector<key_value>& stored) {
  if (!is_model_set(set))
    return invalid(set, "not a set name (model:<name>, the name of a-z0-9_.-)");
  write_batch batch{{}, true};
  for (const auto& kv : stored)
    batch.ops.push_back({family::meta, kv.key, std::nullopt});
  size_t total = 0;
  for (const auto& [id, file] : files) {
    // OpInfo names and variants: what operator_id makes of them, nothing that could split a key.
    if (id.empty() || id.size() > 128 || !only_of(id, [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.' || c == '/' || c == '-';
        }))
      return invalid(set, "operator id '" + printable(id) + "' is not one");
    if (!only_of(file, [](char c) {
          return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '+' || c == '/' || c == '=';
        }))
      return invalid(set, id + ": the file is not base64");
    if (file.size() > model_set_max_operator_bytes)
      return invalid(set, id + ": its captured inputs are " + mib(file.size()) +
                              " (base64); a test job carries at most " +
                              mib(model_set_max_operator_bytes) +
                              " per operator: capture a smaller model (--size tiny)");
    total += file.size();
    batch.ops.push_back({family::meta, model_set_key(set, id), file});
  }
  if (total > model_set_max_bytes)
    return invalid(set, "its captured inputs are " + mib(total) + " (base64); the daemon keeps " +
                            mib(model_set_max_bytes) +
                            " per set: capture a smaller model (--size tiny)");
  return batch;
}

model_set_files read_model_set(std::string_view set, const std::vector<key_value>& entries) {
  auto prefix = model_set_prefix(set);
  model_set_files files;
  for (const auto& kv : entries)
    if (kv.key.starts_with(prefix))
      files.emplace(kv.key.substr(prefix.size()), kv.value);
  return files;
}

} // namespace opforge
