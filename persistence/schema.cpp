#include "persistence/schema.hpp"

#include "messages/errors.hpp"
#include "persistence/keys.hpp"

#include <charconv>
#include <iterator>
#include <optional>

namespace opforge {

namespace {

/// `text` as a decimal number, if all of it is one.
template <class Number>
std::optional<Number> parse_decimal(std::string_view text) {
  Number number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    return std::nullopt;
  return number;
}

// v0 is the layout before the schema carried a version: events were keyed
// "<session id>/<decimal seq>", which scans event 10 before event 9. v1 keys them by `event_key`.
caf::expected<write_batch> rekey_events(store& db) {
  write_batch batch;
  caf::error malformed;
  auto err = db.scan(family::events, "", [&](std::string_view key, std::string_view value) {
    auto slash = key.rfind('/');
    auto seq = slash == std::string_view::npos ? std::nullopt
                                               : parse_decimal<uint64_t>(key.substr(slash + 1));
    if (!seq) {
      malformed = caf::make_error(errc::store_corrupt, db.path().string(), "family events",
                                  "key '" + printable(key) + "'",
                                  "a v0 event key is <session id>/<decimal sequence number>");
      return false;
    }
    batch.ops.push_back(
        {family::events, event_key(key.substr(0, slash), *seq), std::string{value}});
    batch.ops.push_back({family::events, std::string{key}, std::nullopt});
    return true;
  });
  if (err)
    return err;
  if (malformed)
    return malformed;
  return batch;
}

constexpr migration registry[] = {
    {0, "key events by session and big-endian sequence number", rekey_events},
};
static_assert(std::size(registry) == current_schema_version,
              "every schema version below the current one needs a migration");

caf::expected<uint32_t> stored_version(store& db) {
  auto stored = db.get(family::meta, schema_version_key);
  if (!stored)
    return stored.error();
  if (!*stored)
    return uint32_t{0};
  const auto& text = **stored;
  auto version = parse_decimal<uint32_t>(text);
  if (!version)
    return caf::make_error(errc::store_corrupt, db.path().string(), "family meta",
                           "key '" + std::string{schema_version_key} + "'",
                           "expected a decimal number, got '" + printable(text) + "'");
  return *version;
}

caf::error write_version(store& db, write_batch batch, uint32_t version) {
  batch.ops.push_back({family::meta, std::string{schema_version_key}, std::to_string(version)});
  batch.sync = true;
  return db.write(batch);
}

} // namespace

std::span<const migration> migrations() {
  return registry;
}

caf::expected<uint32_t> settle_schema(store& db, bool is_new) {
  if (is_new) {
    if (auto err = write_version(db, {}, current_schema_version))
      return err;
    return current_schema_version;
  }
  auto version = stored_version(db);
  if (!version)
    return version.error();
  if (*version > current_schema_version)
    return caf::make_error(errc::store_schema_mismatch, db.path().string(),
                           "the database has schema version " + std::to_string(*version) +
                               ", newer than version " + std::to_string(current_schema_version) +
                               " of this opforge build: run a newer opforge");
  for (auto step = *version; step < current_schema_version; ++step) {
    const auto& next = registry[step];
    auto batch = next.plan(db);
    if (!batch) {
      const auto& cause = batch.error();
      return caf::error{cause.code(), cause.category(),
                        caf::make_message(db.path().string(),
                                          "migration from schema version " + std::to_string(step) +
                                              " (" + std::string{next.summary} + ")",
                                          render(cause))};
    }
    if (auto err = write_version(db, std::move(*batch), step + 1))
      return err;
  }
  return current_schema_version;
}

} // namespace opforge
