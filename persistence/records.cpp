#include "persistence/records.hpp"

#include "messages/errors.hpp"
#include "messages/msgpack_codec.hpp"
#include "persistence/field_codec.hpp"

#include <type_traits>

// The records are msgpack maps of their field lists (persistence/field_codec.hpp), the same maps
// the nlohmann-based codec before them wrote (tests/fixtures/records). The contract's own structs
// inside (the verdict) use their generated codecs.

namespace opforge::field_codec {

// A session state this build does not know reads as PROMPT, as it always did. Beside stored_name,
// where the struct reader's templates look.
codec::read_result read_value(const msgpack::object& o, stored_name<session_state>& out) {
  std::string name;
  if (auto bad = codec::read_value(o, name))
    return bad;
  out.value = from_string<session_state>(name).value_or(session_state::prompt);
  return std::nullopt;
}

} // namespace opforge::field_codec

namespace opforge {

namespace codec = contract::codec;
using field_codec::corrupt;
using field_codec::decode_fields;
using field_codec::pack_fields;
using field_codec::presence;
using field_codec::read_fields;
using field_codec::unpack_record;

// Declared here, in the records' namespace, where the containers' templates look for them.
void pack_value(codec::packer& p, const session_budgets& x);
void pack_value(codec::packer& p, const session_message& x);
void pack_value(codec::packer& p, const session_attempt& x);
void pack_value(codec::packer& p, const proved_version& x);
void pack_value(codec::packer& p, const operator_spec& x);
void pack_value(codec::packer& p, const campaign_spec& x);
void pack_value(codec::packer& p, const campaign_seed& x);
void pack_value(codec::packer& p, const campaign_request& x);
codec::read_result read_value(const msgpack::object& o, session_budgets& x);
codec::read_result read_value(const msgpack::object& o, session_message& x);
codec::read_result read_value(const msgpack::object& o, session_attempt& x);
codec::read_result read_value(const msgpack::object& o, proved_version& x);
codec::read_result read_value(const msgpack::object& o, operator_spec& x);
codec::read_result read_value(const msgpack::object& o, campaign_spec& x);
codec::read_result read_value(const msgpack::object& o, campaign_seed& x);
codec::read_result read_value(const msgpack::object& o, campaign_request& x);

namespace {

// Each record's fields, once for both directions: `f(key, member)`, or with presence::required.
constexpr auto budgets_fields = [](auto& x, auto&& f) {
  f("max_dialogs", x.max_dialogs);
  f("max_calls_per_dialog", x.max_calls_per_dialog);
  f("context_window_tokens", x.context_window_tokens);
  f("reply_reserve_tokens", x.reply_reserve_tokens);
  f("optimize", x.optimize);
  f("optimize_target_speedup", x.optimize_target_speedup);
  f("optimize_calls", x.optimize_calls);
  f("same_failure_limit", x.same_failure_limit);
};

constexpr auto version_fields = [](auto& x, auto&& f) {
  f("source", x.source);
  f("verdict", x.verdict);
  f("toolchain", x.toolchain);
  f("device_kind", x.device_kind);
  f("toolchain_versions", x.toolchain_versions);
  f("llm_calls", x.llm_calls);
  f("proved_at_ms", x.proved_at_ms);
  f("benchmarked", x.benchmarked);
  f("timings", x.timings);
  f("speedup", x.speedup);
  f("timer", x.timer);
  f("timing_error", x.timing_error);
};

constexpr auto message_fields = [](auto& x, auto&& f) {
  f("role", x.role);
  f("content", x.content);
};

// Every build wrote an attempt's stage and outcome.
constexpr auto attempt_fields = [](auto& x, auto&& f) {
  f("dialog", x.dialog);
  f("call", x.call);
  f("stage", x.stage, presence::required);
  f("outcome", x.outcome, presence::required);
  f("detail", x.detail);
};

// All but the verdict, which encode_record and decode_record handle with the schema.
constexpr auto record_fields = [](auto& x, auto&& f) {
  f("session_id", x.session_id);
  f("campaign_id", x.campaign_id);
  f("op", x.op);
  f("variant", x.variant);
  f("wrapper", x.wrapper);
  f("dtypes", x.dtypes);
  f("docstring", x.docstring);
  f("seed_kernel", x.seed_kernel);
  f("endpoint", x.endpoint);
  f("model", x.model);
  f("budgets", x.budgets);
  f("state", x.state);
  f("revision", x.revision);
  f("dialog", x.dialog);
  f("calls_in_dialog", x.calls_in_dialog);
  f("total_calls", x.total_calls);
  f("consecutive_faults", x.consecutive_faults);
  f("total_faults", x.total_faults);
  f("messages", x.messages);
  f("proposal", x.proposal);
  f("last_feedback", x.last_feedback);
  f("toolchain", x.toolchain);
  f("device_kind", x.device_kind);
  f("toolchain_versions", x.toolchain_versions);
  f("aten_overloads", x.aten_overloads);
  f("prompt_tokens", x.prompt_tokens);
  f("completion_tokens", x.completion_tokens);
  f("history", x.history);
  f("end_reason", x.end_reason);
  f("versions", x.versions);
  f("optimizing", x.optimizing);
  f("optimize_calls_used", x.optimize_calls_used);
};

constexpr auto transition_fields = [](auto& x, auto&& f) {
  f("revision", x.revision);
  f("from", x.from);
  f("to", x.to);
  f("detail", x.detail);
  f("at_ms", x.at_ms);
  f("content", x.content);
};

constexpr auto operator_fields = [](auto& x, auto&& f) {
  f("op", x.op);
  f("variant", x.variant);
  f("category", x.category);
  f("docstring", x.docstring);
  f("dtypes", x.dtypes);
  f("aten_overloads", x.aten_overloads);
  f("seed_kernel", x.seed_kernel);
  f("seed_feedback", x.seed_feedback);
  f("model_samples", x.model_samples);
};

constexpr auto spec_fields = [](auto& x, auto&& f) {
  f("campaign_id", x.campaign_id);
  f("endpoint", x.endpoint);
  f("failover", x.failover);
  f("model", x.model);
  f("device_kind", x.device_kind);
  f("created_ms", x.created_ms);
  f("budgets", x.budgets);
  f("concurrency", x.concurrency);
  f("operators", x.operators);
  f("covered", x.covered);
  f("sample_sets", x.sample_sets);
  f("fingerprint", x.fingerprint);
  f("max_tokens", x.max_tokens);
};

constexpr auto seed_fields = [](auto& x, auto&& f) {
  f("op", x.op);
  f("variant", x.variant);
  f("kernel", x.kernel);
  f("feedback", x.feedback);
};

constexpr auto request_fields = [](auto& x, auto&& f) {
  f("names", x.names);
  f("categories", x.categories);
  f("all", x.all);
  f("failed", x.failed);
  f("dtypes", x.dtypes);
  f("endpoint", x.endpoint);
  f("device_kind", x.device_kind);
  f("concurrency", x.concurrency);
  f("max_dialogs", x.max_dialogs);
  f("max_calls_per_dialog", x.max_calls_per_dialog);
  f("seeds", x.seeds);
  f("fingerprint", x.fingerprint);
  f("sample_sets", x.sample_sets);
  f("max_tokens", x.max_tokens);
};

// Campaigns stored before `request` existed were never stored while resolving: it reads empty.
constexpr auto campaign_fields = [](auto& x, auto&& f) {
  f("spec", x.spec);
  f("state", x.state);
  f("error", x.error);
  f("ended_ms", x.ended_ms);
  f("request", x.request);
};

const msgpack::object* member(const msgpack::object& map, std::string_view key) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    auto& [name, value] = map.via.map.ptr[i];
    if (name.type == msgpack::type::STR &&
        std::string_view{name.via.str.ptr, name.via.str.size} == key)
      return &value;
  }
  return nullptr;
}

// The verdict is stored as the worker's result map with the hosts beside its keys, `confirmed_on`
// and `disagreement: {passed_on, failed_on}` when there are hosts to name; nil when there is none.
void pack_verdict(codec::packer& p, const session_verdict& verdict) {
  auto bytes = std::visit(
      [](const auto& result) -> std::string {
        if constexpr (std::is_same_v<std::decay_t<decltype(result)>, std::monostate>)
          return {};
        else
          return codec::to_bytes(result);
      },
      verdict.result);
  if (bytes.empty()) {
    p.pack_nil();
    return;
  }
  const auto& hosts = verdict.hosts;
  auto handle = msgpack::unpack(bytes.data(), bytes.size());
  const auto& result = handle.get().via.map;
  p.pack_map(result.size + !hosts.confirmed_on.empty() + !hosts.failed_on.empty());
  for (uint32_t i = 0; i < result.size; ++i) {
    codec::pack_object(p, result.ptr[i].key);
    codec::pack_object(p, result.ptr[i].val);
  }
  if (!hosts.confirmed_on.empty()) {
    codec::pack_key(p, "confirmed_on");
    codec::pack_value(p, hosts.confirmed_on);
  }
  if (!hosts.failed_on.empty()) {
    codec::pack_key(p, "disagreement");
    p.pack_map(2);
    codec::pack_key(p, "passed_on");
    codec::pack_value(p, hosts.passed_on);
    codec::pack_key(p, "failed_on");
    codec::pack_value(p, hosts.failed_on);
  }
}

// A lint result says `ok`, a test result its `outcome`; one that is not whole is corrupt.
std::optional<std::string> read_verdict(const msgpack::object& o, session_verdict& verdict) {
  verdict = {};
  if (o.type == msgpack::type::NIL)
    return std::nullopt;
  if (o.type != msgpack::type::MAP)
    return "not a map";
  auto read_result = [&]<class T>(T result, const char* name) -> std::optional<std::string> {
    if (auto bad = read_value(o, result))
      return name + (": " + bad->message());
    verdict.result = std::move(result);
    return std::nullopt;
  };
  auto bad = member(o, "outcome") ? read_result(contract::test_result{}, "test_result")
             : member(o, "ok")    ? read_result(contract::lint_result{}, "lint_result")
                                  : "neither a lint result (ok) nor a test result (outcome)";
  if (bad)
    return bad;
  codec::struct_reader hosts{o};
  hosts.optional("confirmed_on", verdict.hosts.confirmed_on);
  if (auto* disagreement = member(o, "disagreement")) {
    codec::struct_reader sides{*disagreement};
    sides.optional("passed_on", verdict.hosts.passed_on);
    sides.optional("failed_on", verdict.hosts.failed_on);
    if (auto problem = sides.result())
      return "disagreement: " + problem->message();
  }
  if (auto problem = hosts.result())
    return problem->message();
  return std::nullopt;
}

// Bumped when a stored record can no longer be read as this build writes it.
constexpr int64_t record_schema = 1;

// PARSE and FEEDBACK are passed through within one step, so no checkpoint ever holds them.
bool is_resting(session_state state) {
  switch (state) {
  case session_state::generate:
  case session_state::lint:
  case session_state::test:
  case session_state::optimize:
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

} // namespace

void pack_value(codec::packer& p, const session_budgets& x) {
  pack_fields(p, x, budgets_fields);
}

void pack_value(codec::packer& p, const session_message& x) {
  pack_fields(p, x, message_fields);
}

void pack_value(codec::packer& p, const session_attempt& x) {
  pack_fields(p, x, attempt_fields);
}

void pack_value(codec::packer& p, const proved_version& x) {
  pack_fields(p, x, version_fields);
}

void pack_value(codec::packer& p, const operator_spec& x) {
  pack_fields(p, x, operator_fields);
}

void pack_value(codec::packer& p, const campaign_spec& x) {
  pack_fields(p, x, spec_fields);
}

void pack_value(codec::packer& p, const campaign_seed& x) {
  pack_fields(p, x, seed_fields);
}

void pack_value(codec::packer& p, const campaign_request& x) {
  pack_fields(p, x, request_fields);
}

codec::read_result read_value(const msgpack::object& o, campaign_seed& x) {
  return read_fields(o, x, seed_fields);
}

codec::read_result read_value(const msgpack::object& o, campaign_request& x) {
  return read_fields(o, x, request_fields);
}

codec::read_result read_value(const msgpack::object& o, session_budgets& x) {
  return read_fields(o, x, budgets_fields);
}

codec::read_result read_value(const msgpack::object& o, session_message& x) {
  return read_fields(o, x, message_fields);
}

codec::read_result read_value(const msgpack::object& o, session_attempt& x) {
  return read_fields(o, x, attempt_fields);
}

codec::read_result read_value(const msgpack::object& o, proved_version& x) {
  return read_fields(o, x, version_fields);
}

codec::read_result read_value(const msgpack::object& o, operator_spec& x) {
  return read_fields(o, x, operator_fields);
}

codec::read_result read_value(const msgpack::object& o, campaign_spec& x) {
  return read_fields(o, x, spec_fields);
}

std::string encode_record(const session_record& record) {
  msgpack::sbuffer buffer;
  codec::packer p{buffer};
  pack_fields(p, record, record_fields, 2);
  codec::pack_key(p, "verdict");
  pack_verdict(p, record.verdict);
  codec::pack_key(p, "schema");
  codec::pack_value(p, record_schema);
  return {buffer.data(), buffer.size()};
}

caf::expected<session_record> decode_record(std::string_view bytes) {
  const char* what = "session record";
  auto handle = unpack_record(bytes);
  if (!handle)
    return corrupt(what, message(handle.error()));
  const auto& value = handle->get();
  if (value.type != msgpack::type::MAP)
    return corrupt(what, "not a map");
  auto* schema = member(value, "schema");
  int64_t version = 0;
  if (!schema || codec::read_value(*schema, version) || version != record_schema)
    return corrupt(what, "schema " + (schema ? std::to_string(version) : std::string{"missing"}) +
                             ", expected " + std::to_string(record_schema));
  session_record record;
  codec::struct_reader r{value};
  read_fields(r, record, record_fields);
  if (auto bad = r.result())
    return corrupt(what, bad->message());
  if (auto* verdict = member(value, "verdict"))
    if (auto bad = read_verdict(*verdict, record.verdict))
      return corrupt(what, "verdict: " + *bad);
  if (!is_resting(record.state))
    return corrupt(what, "stored in transient state " + to_string(record.state));
  return record;
}

std::string encode_transition(const session_transition& transition) {
  return field_codec::encode_fields(transition, transition_fields);
}

caf::expected<session_transition> decode_transition(std::string_view bytes) {
  return decode_fields<session_transition>(bytes, "session event", transition_fields);
}

std::string encode_campaign(const stored_campaign& campaign) {
  return field_codec::encode_fields(campaign, campaign_fields);
}

// A campaign state this build does not know makes the campaign unreadable: guessing could resume
// one that ended, or drop one that runs.
caf::expected<stored_campaign> decode_campaign(std::string_view bytes) {
  return decode_fields<stored_campaign>(bytes, "campaign record", campaign_fields);
}

} // namespace opforge
