#include "apps/campaign_setup.hpp"

#include "actors/llm/llm_endpoint.hpp"
#include "actors/llm/summarizer.hpp"
#include "actors/sessions/prompt_templates.hpp"
#include "messages/errors.hpp"

#include <fstream>

#include <caf/send.hpp>

#include <nlohmann/json.hpp>

namespace opforge {

namespace {

caf::error config_error(std::string what) {
  return caf::make_error(errc::config_invalid, std::move(what));
}

std::string join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& item : items)
    out += (out.empty() ? "" : ", ") + item;
  return out;
}

} // namespace

caf::expected<endpoint_plan>
plan_endpoints(const config& cfg,
               const std::function<std::optional<std::string>(const std::string&)>& env) {
  endpoint_plan plan;
  if (!cfg.llm.endpoints.empty()) {
    plan.endpoints = cfg.llm.endpoints;
    plan.default_endpoint = plan.endpoints.front().name;
    return plan;
  }
  if (auto url = env("OPFORGE_LLM_URL"); url && !url->empty()) {
    auto model = env("OPFORGE_LLM_MODEL");
    if (!model || model->empty())
      return config_error("OPFORGE_LLM_URL is set but OPFORGE_LLM_MODEL is not: name the model "
                          "the endpoint serves");
    endpoint_config endpoint;
    endpoint.outage_after = cfg.llm.outage_after;
    endpoint.name = "env";
    endpoint.base_url = *url;
    endpoint.model = *model;
    if (env("OPFORGE_LLM_API_KEY"))
      endpoint.api_key_env = "OPFORGE_LLM_API_KEY";
    plan.endpoints.push_back(std::move(endpoint));
    plan.default_endpoint = "env";
    return plan;
  }
  endpoint_config demo;
  demo.outage_after = cfg.llm.outage_after;
  demo.name = demo_endpoint_name;
  demo.kind = endpoint_kind::replay;
  demo.model = "opforge-demo (hand-written answers)";
  demo.cassette = cfg.campaigns.demo_cassette.string();
  plan.endpoints.push_back(std::move(demo));
  plan.default_endpoint = demo_endpoint_name;
  plan.demo = true;
  return plan;
}

caf::expected<std::set<std::string>> cassette_operators(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    return config_error("cannot read the cassette '" + path + "'");
  std::set<std::string> operators;
  size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    auto entry = nlohmann::json::parse(line, nullptr, false);
    if (!entry.is_object() || !entry.contains("operator") || !entry["operator"].is_string())
      return config_error(path + ":" + std::to_string(number) +
                          ": expected a JSON object with an operator");
    operators.insert(entry["operator"].get<std::string>());
  }
  if (operators.empty())
    return config_error("the cassette '" + path + "' holds no answers");
  return operators;
}

std::string concurrency_text(int64_t endpoint, int64_t campaigns) {
  auto out = "concurrency " + std::to_string(endpoint);
  if (endpoint < campaigns)
    out += " (campaigns.concurrency is " + std::to_string(campaigns) + ": " +
           std::to_string(campaigns - endpoint) +
           " of a campaign's sessions wait for this endpoint)";
  return out;
}

caf::expected<std::vector<std::string>>
check_config_data(const config& cfg,
                  const std::function<std::optional<std::string>(const std::string&)>& env) {
  std::vector<std::string> report{"config data: " + resource_dir().string()};
  const auto& campaigns = cfg.campaigns;
  if (auto templates = prompt_templates::load(campaigns.prompts_dir); !templates)
    return templates.error();
  report.push_back("prompt templates: " + campaigns.prompts_dir.string());
  if (auto examples = load_worked_examples(campaigns.examples_dir); !examples)
    return examples.error();
  report.push_back("worked examples: " + campaigns.examples_dir.string());
  if (cfg.llm.summarizer.mode == summarizer_mode::llm) {
    if (auto prompt = read_prompt_file(cfg.llm.summarizer.prompt_file); !prompt)
      return prompt.error();
    report.push_back("summarizer prompt: " + cfg.llm.summarizer.prompt_file);
  }
  auto plan = plan_endpoints(cfg, env);
  if (!plan)
    return plan.error();
  if (plan->demo) {
    auto replayed = cassette_operators(campaigns.demo_cassette.string());
    if (!replayed)
      return replayed.error();
    report.push_back("demo cassette: " + campaigns.demo_cassette.string() + " (" + join(*replayed) +
                     ")");
  }
  for (const auto& e : plan->endpoints)
    report.push_back("llm endpoint " + e.name + ": " + e.model + " at " +
                     (e.kind == endpoint_kind::replay ? "a replay of " + e.cassette : e.base_url) +
                     ", " + concurrency_text(e.concurrency, campaigns.concurrency));
  return report;
}

void campaign_parts::stop() {
  for (auto& endpoint : endpoints)
    caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
  if (summarizer)
    caf::anon_send_exit(summarizer, caf::exit_reason::user_shutdown);
}

namespace {

caf::error start_parts(campaign_parts& parts, caf::actor_system& sys, const config& cfg,
                       const endpoint_plan& plan, std::shared_ptr<metrics> families) {
  auto templates = prompt_templates::load(cfg.campaigns.prompts_dir);
  if (!templates)
    return templates.error();
  auto examples = load_worked_examples(cfg.campaigns.examples_dir);
  if (!examples)
    return examples.error();
  parts.setup.templates = std::make_shared<const prompt_templates>(std::move(*templates));
  parts.setup.examples = std::move(*examples);
  parts.setup.defaults = cfg.campaigns;
  parts.setup.acceptance = cfg.acceptance;
  parts.setup.telemetry = families;
  parts.setup.default_endpoint = plan.default_endpoint;
  for (auto endpoint : plan.endpoints) {
    campaign_endpoint entry;
    if (endpoint.kind == endpoint_kind::replay) {
      auto operators = cassette_operators(endpoint.cassette);
      if (!operators)
        return operators.error();
      replay_server::options opts;
      opts.python = cfg.python;
      opts.cassette = endpoint.cassette;
      opts.latency_ms = endpoint.replay_latency_ms;
      opts.hit_log = (cfg.data_dir / ("replay-" + endpoint.name + ".jsonl")).string();
      opts.by_answer_index = true;
      opts.restarts = &families->replay_restarts(endpoint.name);
      auto server = replay_server::start(opts);
      if (!server)
        return server.error();
      (*server)->serve(endpoint);
      parts.replay_servers.push_back(std::move(*server));
      if (plan.demo)
        entry.replayed_operators = std::move(*operators);
    }
    families->add_llm_endpoint(endpoint.name);
    entry.actor = sys.spawn(llm_endpoint, endpoint, families);
    entry.config = endpoint;
    parts.endpoints.push_back(entry.actor);
    parts.setup.endpoint_order.push_back(endpoint.name);
    parts.setup.endpoints.emplace(endpoint.name, std::move(entry));
  }
  const auto& summary = cfg.llm.summarizer;
  std::string summary_prompt;
  llm_endpoint_actor summary_endpoint;
  if (summary.mode == summarizer_mode::llm) {
    auto prompt = read_prompt_file(summary.prompt_file);
    if (!prompt)
      return prompt.error();
    summary_prompt = std::move(*prompt);
    auto found = parts.setup.endpoints.find(summary.endpoint);
    if (found == parts.setup.endpoints.end())
      return config_error("llm.summarizer.endpoint: no endpoint named '" + summary.endpoint + "'");
    summary_endpoint = found->second.actor;
  }
  parts.summarizer = sys.spawn(summarizer, summary, summary_prompt, summary_endpoint, families);
  parts.setup.summarizer = parts.summarizer;
  parts.setup.summarize_over_chars = summary.summarize_over_chars;
  return {};
}

} // namespace

caf::expected<campaign_parts> start_campaign_parts(caf::actor_system& sys, const config& cfg,
                                                   const endpoint_plan& plan,
                                                   std::shared_ptr<metrics> families) {
  campaign_parts parts;
  if (auto err = start_parts(parts, sys, cfg, plan, std::move(families))) {
    parts.stop(); // the actor system waits for every actor before it goes
    return err;
  }
  return parts;
}

} // namespace opforge
