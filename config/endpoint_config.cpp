#include "config/endpoint_config.hpp"

#include "messages/errors.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <optional>
#include <set>
#include <sstream>

namespace opforge {

namespace {

caf::error invalid(const std::string& path, const std::string& what) {
  return caf::make_error(errc::config_invalid, path + ": " + what);
}

// Converts a YAML scalar to JSON, keeping numbers and booleans typed ("true" -> true, "3" -> 3).
nlohmann::json scalar_to_json(const YAML::Node& node) {
  if (node.Tag() == "!") // quoted in the file: always a string
    return node.Scalar();
  bool flag;
  if (YAML::convert<bool>::decode(node, flag))
    return flag;
  int64_t integer;
  if (YAML::convert<int64_t>::decode(node, integer))
    return integer;
  double number;
  if (YAML::convert<double>::decode(node, number))
    return number;
  return node.Scalar();
}

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
  case YAML::NodeType::Map: {
    auto out = nlohmann::json::object();
    for (const auto& item : node)
      out[item.first.Scalar()] = yaml_to_json(item.second);
    return out;
  }
  case YAML::NodeType::Sequence: {
    auto out = nlohmann::json::array();
    for (const auto& item : node)
      out.push_back(yaml_to_json(item));
    return out;
  }
  case YAML::NodeType::Scalar:
    return scalar_to_json(node);
  default:
    return nullptr;
  }
}

// Reads the fields of one YAML map, remembering the first error and every key it was asked for,
// so that a misspelt key is reported instead of silently ignored.
class field_reader {
public:
  field_reader(const YAML::Node& node, std::string path) : node_{node}, path_{std::move(path)} {
    if (!node_.IsMap())
      fail(path_, "expected a map");
  }

  void string(const char* key, std::string& out, bool required = false) {
    auto value = lookup(key, required);
    if (!value)
      return;
    if (!value->IsScalar())
      return fail(key_path(key), "expected a string");
    out = value->Scalar();
    if (required && out.empty())
      fail(key_path(key), "must not be empty");
  }

  // One of an enum's names, parsed to its value here, so that no one after the load compares the
  // text; the complaint names every name allowed.
  template <contract::contract_enum E>
  void choice(const char* key, E& out) {
    auto value = lookup(key, false);
    if (!value)
      return;
    auto allowed = "expected " + contract::one_of<E>();
    if (!value->IsScalar())
      return fail(key_path(key), allowed);
    auto parsed = from_string<E>(value->Scalar());
    if (!parsed)
      return fail(key_path(key), allowed + ", got " + value->Scalar());
    out = *parsed;
  }

  template <class Number>
  void number(const char* key, Number& out, double min, double max) {
    auto value = lookup(key, false);
    if (!value)
      return;
    double parsed;
    if (!value->IsScalar() || !YAML::convert<double>::decode(*value, parsed) || std::isnan(parsed))
      return fail(key_path(key), "expected a number");
    if (parsed < min || parsed > max) {
      std::ostringstream range;
      // Every bound is a whole number; without this, 1e9 reads "1e+09".
      range << std::fixed << std::setprecision(0) << "must lie in [" << min << ", " << max
            << "], got " << value->Scalar();
      return fail(key_path(key), range.str());
    }
    if (std::is_integral_v<Number> && parsed != std::floor(parsed))
      return fail(key_path(key), "expected a whole number, got " + value->Scalar());
    out = static_cast<Number>(parsed);
  }

  void duration(const char* key, std::chrono::milliseconds& out) {
    auto value = lookup(key, false);
    if (!value)
      return;
    if (!value->IsScalar())
      return fail(key_path(key), "expected a duration like 500ms, 30s or 5m");
    auto parsed = parse_duration(value->Scalar());
    if (!parsed)
      return fail(key_path(key),
                  "expected a duration like 500ms, 30s or 5m, got '" + value->Scalar() + "'");
    out = *parsed;
  }

  void json_map(const char* key, nlohmann::json& out) {
    auto value = lookup(key, false);
    if (!value)
      return;
    if (!value->IsMap())
      return fail(key_path(key), "expected a map");
    out = yaml_to_json(*value);
  }

  void string_map(const char* key, std::map<std::string, std::string>& out) {
    auto value = lookup(key, false);
    if (!value)
      return;
    if (!value->IsMap())
      return fail(key_path(key), "expected a map of strings");
    for (const auto& item : *value) {
      if (!item.second.IsScalar())
        return fail(key_path(key) + "." + item.first.Scalar(), "expected a string");
      out[item.first.Scalar()] = item.second.Scalar();
    }
  }

  /// The node under `key` for a nested reader; empty when absent.
  std::optional<YAML::Node> child(const char* key) { return lookup(key, false); }

  std::string key_path(const char* key) const { return path_ + "." + key; }

  void fail(const std::string& where, const std::string& what) {
    if (!error_)
      error_ = invalid(where, what);
  }

  /// The first error, including keys nobody asked for.
  caf::error finish() {
    if (!error_ && node_.IsMap())
      for (const auto& item : node_)
        if (!known_.count(item.first.Scalar()))
          fail(key_path(item.first.Scalar().c_str()), "unknown key");
    return std::move(error_);
  }

private:
  // The value under `key`; empty when absent or null (a default YAML::Node is a defined null).
  std::optional<YAML::Node> lookup(const char* key, bool required) {
    known_.insert(key);
    if (!node_.IsMap())
      return std::nullopt;
    auto value = node_[key];
    if (!value || value.IsNull()) {
      if (required)
        fail(key_path(key), "required");
      return std::nullopt;
    }
    return value;
  }

  const YAML::Node& node_;
  std::string path_;
  std::set<std::string> known_;
  caf::error error_;
};

constexpr double uint_max = 4294967295.0;

caf::expected<endpoint_config> parse_endpoint(const YAML::Node& node, const std::string& path,
                                              const endpoint_config& defaults) {
  auto cfg = defaults;
  field_reader in{node, path};
  in.string("name", cfg.name, true);
  in.choice("kind", cfg.kind);
  bool replay = cfg.kind == endpoint_kind::replay;
  in.string("base_url", cfg.base_url, !replay);
  in.string("model", cfg.model, !replay);
  in.string("api_key_env", cfg.api_key_env);
  in.number("context_window", cfg.context_window, 256, uint_max);
  in.number("max_tokens", cfg.max_tokens, 1, uint_max);
  in.number("temperature", cfg.temperature, 0, 2);
  in.number("top_p", cfg.top_p, 0, 1);
  in.json_map("extra_body", cfg.extra_body);
  in.string_map("headers", cfg.headers);
  in.number("concurrency", cfg.concurrency, 1, 4096);
  in.number("requests_per_minute", cfg.requests_per_minute, 0, 1e9);
  in.number("tokens_per_minute", cfg.tokens_per_minute, 0, 1e12);
  in.duration("connect_timeout", cfg.connect_timeout);
  in.duration("total_timeout", cfg.total_timeout);
  in.duration("first_byte_timeout", cfg.first_byte_timeout);
  in.number("max_attempts", cfg.max_attempts, 1, 3);
  in.duration("backoff_base", cfg.backoff_base);
  in.duration("backoff_cap", cfg.backoff_cap);
  in.duration("max_retry_after", cfg.max_retry_after);
  in.number("retry_budget_ratio", cfg.retry_budget_ratio, 0, 10);
  in.number("retry_budget_max", cfg.retry_budget_max, 0, 1e6);
  in.number("breaker_failures", cfg.breaker_failures, 1, 1000);
  in.duration("breaker_open_for", cfg.breaker_open_for);
  in.duration("outage_after", cfg.outage_after);
  in.choice("probe", cfg.probe);
  in.duration("probe_interval", cfg.probe_interval);
  in.duration("probe_interval_max", cfg.probe_interval_max);
  if (cfg.probe_interval.count() <= 0)
    in.fail(in.key_path("probe_interval"), "must be positive");
  else if (cfg.probe_interval_max < cfg.probe_interval)
    in.fail(in.key_path("probe_interval_max"), "must not be shorter than probe_interval");
  if (cfg.first_byte_timeout.count() <= 0)
    in.fail(in.key_path("first_byte_timeout"), "must be positive");
  else if (cfg.first_byte_timeout > cfg.total_timeout)
    in.fail(in.key_path("first_byte_timeout"), "must not be longer than total_timeout");
  in.string("record_to", cfg.record_to);
  in.string("cassette", cfg.cassette, replay);
  in.number("replay_latency_ms", cfg.replay_latency_ms, 0, 600'000);
  if (!replay && cfg.base_url.rfind("http://", 0) != 0 && cfg.base_url.rfind("https://", 0) != 0)
    in.fail(in.key_path("base_url"), "expected an http:// or https:// URL, got " + cfg.base_url);
  if (cfg.extra_body.contains("messages") || cfg.extra_body.contains("stream"))
    in.fail(in.key_path("extra_body"), "must not set messages or stream");
  if (auto err = in.finish())
    return err;
  while (!cfg.base_url.empty() && cfg.base_url.back() == '/')
    cfg.base_url.pop_back();
  return cfg;
}

caf::expected<summarizer_config> parse_summarizer(const YAML::Node& node, const std::string& path) {
  summarizer_config cfg;
  field_reader in{node, path};
  in.choice("mode", cfg.mode);
  in.string("endpoint", cfg.endpoint, cfg.mode == summarizer_mode::llm);
  in.number("summarize_over_chars", cfg.summarize_over_chars, 0, 1e9);
  in.number("llm_threshold_chars", cfg.llm_threshold_chars, 0, 1e9);
  in.number("max_chars", cfg.max_chars, 200, 1e9);
  in.number("context_lines", cfg.context_lines, 0, 10'000);
  in.string("prompt_file", cfg.prompt_file);
  in.number("max_tokens", cfg.max_tokens, 1, uint_max);
  if (auto err = in.finish())
    return err;
  return cfg;
}

} // namespace

caf::expected<std::chrono::milliseconds> parse_duration(const std::string& text) {
  double value = -1;
  size_t used = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = text.size(); // no number: fall through to the error below
  }
  static const std::map<std::string, double, std::less<>> millis_per_unit{
      {"ms", 1}, {"s", 1000}, {"", 1000}, {"m", 60'000}, {"h", 3'600'000}};
  auto unit = millis_per_unit.find(std::string_view{text}.substr(used));
  if (unit == millis_per_unit.end() || value < 0 || !std::isfinite(value))
    return caf::make_error(errc::config_invalid,
                           "expected a duration like 500ms, 30s or 5m, got '" + text + "'");
  return std::chrono::milliseconds{std::llround(value * unit->second)};
}

caf::expected<llm_config> parse_llm_section(const YAML::Node& node, std::string path) {
  llm_config cfg;
  field_reader in{node, path};
  auto endpoints = in.child("endpoints");
  auto summarizer = in.child("summarizer");
  in.duration("outage_after", cfg.outage_after);
  endpoint_config defaults;
  defaults.outage_after = cfg.outage_after;
  if (endpoints && !endpoints->IsSequence())
    in.fail(in.key_path("endpoints"), "expected a list");
  if (auto err = in.finish(); err) // report map-level problems before descending
    return err;
  if (endpoints) {
    std::set<std::string> names;
    for (size_t i = 0; i < endpoints->size(); ++i) {
      auto item_path = path + ".endpoints[" + std::to_string(i) + "]";
      auto endpoint = parse_endpoint((*endpoints)[i], item_path, defaults);
      if (!endpoint)
        return endpoint.error();
      if (!names.insert(endpoint->name).second)
        return invalid(item_path + ".name", "duplicate endpoint name " + endpoint->name);
      cfg.endpoints.push_back(std::move(*endpoint));
    }
  }
  if (summarizer) {
    auto parsed = parse_summarizer(*summarizer, path + ".summarizer");
    if (!parsed)
      return parsed.error();
    cfg.summarizer = std::move(*parsed);
  }
  if (cfg.summarizer.mode == summarizer_mode::llm) {
    auto& wanted = cfg.summarizer.endpoint;
    auto found = std::any_of(cfg.endpoints.begin(), cfg.endpoints.end(),
                             [&](const endpoint_config& e) { return e.name == wanted; });
    if (!found)
      return invalid(path + ".summarizer.endpoint", "no endpoint named " + wanted);
  }
  return cfg;
}

caf::expected<std::string> read_prompt_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return caf::make_error(errc::config_unreadable, "cannot open prompt file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return caf::make_error(errc::config_unreadable, "cannot read prompt file " + path);
  return text.str();
}

} // namespace opforge
