#include "persistence/records.hpp"

#include "messages/errors.hpp"
#include "messages/wire.hpp"

#include <stdexcept>

namespace opforge {

namespace {

template <class T>
nlohmann::json contract_json(const T& value) {
  auto bytes = contract::codec::to_bytes(value);
  return nlohmann::json::from_msgpack(bytes.begin(), bytes.end());
}

// A stored verdict that is not a whole lint or test result makes the record corrupt.
template <class T>
T contract_value(const nlohmann::json& in, const char* what) {
  auto bytes = nlohmann::json::to_msgpack(in);
  auto value =
      wire::decode_as<T>({reinterpret_cast<const char*>(bytes.data()), bytes.size()}, what);
  if (!value)
    throw std::invalid_argument{"verdict: " + render(value.error())};
  return std::move(*value);
}

} // namespace

// The verdict is stored as the worker's result map (the generated codec's bytes), so that a
// record written while it was kept as the bare payload decodes the same.
void to_json(nlohmann::json& out, const session_verdict& verdict) {
  out = std::visit(
      [](const auto& result) -> nlohmann::json {
        if constexpr (std::is_same_v<std::decay_t<decltype(result)>, std::monostate>)
          return nullptr;
        else
          return contract_json(result);
      },
      verdict.result);
  const auto& hosts = verdict.hosts;
  if (!hosts.confirmed_on.empty())
    out["confirmed_on"] = hosts.confirmed_on;
  if (!hosts.failed_on.empty())
    out["disagreement"] = {{"passed_on", hosts.passed_on}, {"failed_on", hosts.failed_on}};
}

// A lint result says `ok`, a test result its `outcome`.
void from_json(const nlohmann::json& in, session_verdict& verdict) {
  verdict = {};
  if (in.is_null())
    return;
  if (!in.is_object())
    throw std::invalid_argument{"verdict: not a map"};
  if (in.contains("outcome"))
    verdict.result = contract_value<contract::test_result>(in, "test_result");
  else if (in.contains("ok"))
    verdict.result = contract_value<contract::lint_result>(in, "lint_result");
  else
    throw std::invalid_argument{"verdict: neither a lint result (ok) nor a test result (outcome)"};
  verdict.hosts.confirmed_on = in.value("confirmed_on", std::vector<std::string>{});
  if (auto disagreement = in.find("disagreement"); disagreement != in.end()) {
    verdict.hosts.passed_on = disagreement->value("passed_on", std::vector<std::string>{});
    verdict.hosts.failed_on = disagreement->value("failed_on", std::string{});
  }
}

namespace contract {

// States are stored by their contract names. Next to the enum, where the JSON codecs look for
// them; a name this build does not know reads as PROMPT, as it always did.
void to_json(nlohmann::json& out, session_state state) {
  out = to_string(state);
}

void from_json(const nlohmann::json& in, session_state& state) {
  state = in.is_string()
              ? from_string<session_state>(in.get<std::string>()).value_or(session_state::prompt)
              : session_state::prompt;
}

// A campaign state this build does not know makes the campaign unreadable: guessing could resume
// one that ended, or drop one that runs.
void to_json(nlohmann::json& out, campaign_state state) {
  out = to_string(state);
}

void from_json(const nlohmann::json& in, campaign_state& state) {
  auto known = in.is_string() ? from_string<campaign_state>(in.get<std::string>()) : std::nullopt;
  if (!known)
    throw std::invalid_argument{"campaign state " + in.dump() + ": not one of " +
                                one_of<campaign_state>()};
  state = *known;
}

} // namespace contract

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(session_message, role, content)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(session_attempt, dialog, call, stage, outcome,
                                                detail)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(session_record, session_id, campaign_id, op,
                                                variant, wrapper, dtypes, docstring, seed_kernel,
                                                endpoint, model, budgets, state, revision, dialog,
                                                calls_in_dialog, total_calls, consecutive_faults,
                                                total_faults, messages, proposal, last_feedback,
                                                verdict, toolchain, device_kind, toolchain_versions,
                                                aten_overloads, prompt_tokens, completion_tokens,
                                                history, end_reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(session_transition, revision, from, to, detail,
                                                at_ms, content)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(operator_spec, op, variant, category, docstring,
                                                dtypes, aten_overloads, seed_kernel, seed_feedback)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(campaign_spec, campaign_id, endpoint, model,
                                                device_kind, created_ms, budgets, concurrency,
                                                operators, failover, fingerprint)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(stored_campaign, spec, state, error, ended_ms)

void to_json(nlohmann::json& out, const session_budgets& b) {
  out = {{"max_dialogs", b.max_dialogs},
         {"max_calls_per_dialog", b.max_calls_per_dialog},
         {"context_window_tokens", b.context_window_tokens},
         {"reply_reserve_tokens", b.reply_reserve_tokens}};
}

void from_json(const nlohmann::json& in, session_budgets& b) {
  session_budgets defaults;
  b.max_dialogs = in.value("max_dialogs", defaults.max_dialogs);
  b.max_calls_per_dialog = in.value("max_calls_per_dialog", defaults.max_calls_per_dialog);
  b.context_window_tokens = in.value("context_window_tokens", defaults.context_window_tokens);
  b.reply_reserve_tokens = in.value("reply_reserve_tokens", defaults.reply_reserve_tokens);
}

namespace {

// Bumped when a stored record can no longer be read as this build writes it.
constexpr int record_schema = 1;

// PARSE and FEEDBACK are passed through within one step, so no checkpoint ever holds them.
bool is_resting(session_state state) {
  switch (state) {
  case session_state::generate:
  case session_state::lint:
  case session_state::test:
  case session_state::success:
  case session_state::failed:
  case session_state::prompt: // created, not started yet
    return true;
  case session_state::parse:
  case session_state::feedback:
    return false;
  }
  return false;
}

std::string to_msgpack(const nlohmann::json& value) {
  auto bytes = nlohmann::json::to_msgpack(value);
  return {bytes.begin(), bytes.end()};
}

} // namespace

std::string encode_record(const session_record& record) {
  nlohmann::json value = record;
  value["schema"] = record_schema;
  return to_msgpack(value);
}

caf::expected<session_record> decode_record(std::string_view bytes) {
  auto corrupt = [](const std::string& what) {
    return caf::make_error(errc::store_corrupt, "session record: " + what);
  };
  try {
    auto value = nlohmann::json::from_msgpack(bytes.begin(), bytes.end());
    if (!value.is_object())
      return corrupt("not a map");
    if (value.value("schema", 0) != record_schema)
      return corrupt("schema " + value.value("schema", nlohmann::json{}).dump() + ", expected " +
                     std::to_string(record_schema));
    auto record = value.get<session_record>();
    if (!is_resting(record.state))
      return corrupt(std::string{"stored in transient state "} + to_string(record.state));
    return record;
  } catch (const nlohmann::json::exception& e) {
    return corrupt(e.what());
  } catch (const std::invalid_argument& e) {
    return corrupt(e.what());
  }
}

std::string encode_transition(const session_transition& transition) {
  return to_msgpack(nlohmann::json(transition));
}

caf::expected<session_transition> decode_transition(std::string_view bytes) {
  try {
    return nlohmann::json::from_msgpack(bytes.begin(), bytes.end()).get<session_transition>();
  } catch (const nlohmann::json::exception& e) {
    return caf::make_error(errc::store_corrupt, std::string{"session event: "} + e.what());
  }
}

std::string encode_campaign(const stored_campaign& campaign) {
  return to_msgpack(nlohmann::json(campaign));
}

caf::expected<stored_campaign> decode_campaign(std::string_view bytes) {
  try {
    return nlohmann::json::from_msgpack(bytes.begin(), bytes.end()).get<stored_campaign>();
  } catch (const nlohmann::json::exception& e) {
    return caf::make_error(errc::store_corrupt, std::string{"campaign record: "} + e.what());
  } catch (const std::invalid_argument& e) {
    return caf::make_error(errc::store_corrupt, std::string{"campaign record: "} + e.what());
  }
}

} // namespace opforge
