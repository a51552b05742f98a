// The demo cassette end to end through the real LLM client: a campaign over the real store, the
// real llm_endpoint actor speaking HTTP to the replay server serving config/demo/cassette.jsonl,
// and a scripted device manager whose verdicts are the ones the real linter and harness gave
// these candidates on the interpreter (see config/demo/README.md).

#include "actors/campaign.hpp"
#include "actors/llm_endpoint.hpp"
#include "actors/metrics.hpp"
#include "actors/replay_server.hpp"
#include "actors/store.hpp"
#include "messages/errors.hpp"
#include "messages/session_messages.hpp"
#include "messages/wire.hpp"
#include "tests/test_session_support.hpp"
#include "tests/test_store_support.hpp"

#include <fstream>
#include <sstream>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::testing;
using json = nlohmann::json;

namespace {

struct e2e_config : caf::actor_system_config {
  e2e_config() {
    add_message_types<caf::id_block::opforge>();
    register_error_category(*this);
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

// What the linter and the harness said about each demo answer on the interpreter.
job_reply demo_verdict(const device_job& job, const json& request) {
  auto source = request.at("source").get<std::string>();
  if (job.kind == "lint") {
    if (source.find("torch.clamp_min") == std::string::npos)
      return done(clean_lint());
    return done({{"ok", false},
                 {"violations",
                  {{{"rule", "module_attribute"},
                    {"line", 12},
                    {"col", 16},
                    {"text", "torch.clamp_min"},
                    {"hint", "`torch.clamp_min` is not allowed by the interpreter profile: torch "
                             "may be used only for its allowed names."}}}},
                 {"syntax_error", nullptr}});
  }
  if (source.find("BLOCK_SIZE=1000") != std::string::npos)
    // On CUDA this is a CompilationError; the interpreter raises it when the kernel runs, and the
    // harness reports what it saw.
    return done({{"outcome", "runtime_error"},
                 {"tests_run", 1},
                 {"tests_passed", 0},
                 {"failure",
                  {{"dtype", "bfloat16"},
                   {"message", "InterpreterError: ValueError(\"arange's range must be a power of "
                               "2\")"},
                   {"backtrace", "File \"candidate.py\", line 3, in abs_kernel"}}}});
  if (source.find("1.0 / (1.0 + tl.exp(x))") != std::string::npos)
    return done({{"outcome", "accuracy_error"},
                 {"tests_run", 1},
                 {"tests_passed", 0},
                 {"failure",
                  {{"dtype", "bfloat16"},
                   {"sample", "Tensor[bfloat16](20, 20)"},
                   {"diff", {{"max_abs_error", 0.98}, {"mismatched", 399}, {"total", 400}}}}}});
  return done({{"outcome", "pass"}, {"tests_run", 5}, {"tests_passed", 5}});
}

} // namespace

TEST(SessionEndToEnd, DemoCassetteConvergesThroughTheRealClient) {
  test::temp_dir dir;
  replay_server::options opts;
  opts.python = OPFORGE_PYTHON;
  opts.worker_dir = std::string{OPFORGE_SOURCE_DIR} + "/worker";
  opts.cassette = std::string{OPFORGE_SOURCE_DIR} + "/config/demo/cassette.jsonl";
  opts.hit_log = (dir.path() / "hits.jsonl").string();
  auto server = replay_server::start(opts);
  ASSERT_TRUE(server) << render(server.error());

  e2e_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto telemetry = std::make_shared<metrics>("e2e");
  auto store = spawn_store(sys, dir.db(), telemetry);
  ASSERT_TRUE(store) << render(store.error());
  endpoint_config endpoint;
  endpoint.name = "demo";
  endpoint.kind = "replay";
  (*server)->serve(endpoint);
  endpoint.context_window = 32768;
  endpoint.max_tokens = 4096;
  auto templates = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
  ASSERT_TRUE(templates) << render(templates.error());
  auto jobs = std::make_shared<job_script>();
  jobs->reply_for = demo_verdict;
  session_services services;
  services.store = *store;
  services.llm = sys.spawn(llm_endpoint, endpoint, telemetry);
  services.jobs = sys.spawn(scripted_jobs, jobs);
  services.templates = std::make_shared<const prompt_templates>(std::move(*templates));
  services.examples = "EXAMPLES";

  campaign_spec spec;
  spec.campaign_id = "demo";
  spec.endpoint = "demo";
  spec.concurrency = 4;
  spec.budgets.context_window_tokens = endpoint.context_window;
  spec.budgets.reply_reserve_tokens = endpoint.max_tokens;
  for (auto op : {"nn.functional.relu", "abs", "sigmoid", "neg"})
    spec.operators.push_back({op,
                              "",
                              "pointwise",
                              std::string{op} + "(input) -> Tensor",
                              {"bfloat16", "float16", "float32", "int32", "int64"}});
  campaign_status status;
  self->request(sys.spawn(campaign, spec, services, std::vector<session_record>{}), caf::infinite,
                atom::run_v)
      .receive([&](campaign_status& s) { status = std::move(s); },
               [&](const caf::error& err) { FAIL() << render(err); });
  EXPECT_EQ(status.succeeded, 4u);
  std::map<std::string, uint32_t> calls;
  for (const auto& s : status.finished) {
    EXPECT_EQ(s.state, "SUCCESS") << s.op << ": " << s.end_reason;
    EXPECT_EQ(s.faults, 0u) << s.op;
    calls[s.op] = s.llm_calls;
  }
  EXPECT_EQ(calls, (std::map<std::string, uint32_t>{
                       {"abs", 2}, {"neg", 1}, {"nn.functional.relu", 2}, {"sigmoid", 2}}));
  // Every answer of the cassette was served once, over HTTP.
  std::ifstream hits{opts.hit_log};
  std::string line;
  size_t served = 0;
  while (std::getline(hits, line))
    served += !line.empty();
  EXPECT_EQ(served, 7u);
  for (auto actor :
       {caf::actor_cast<caf::actor>(services.llm), caf::actor_cast<caf::actor>(services.jobs)})
    self->send_exit(actor, caf::exit_reason::user_shutdown);
  self->request(*store, caf::infinite, atom::shutdown_v)
      .receive([](atom::ok) {}, [](const caf::error&) {});
}
