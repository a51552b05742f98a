// Runs a campaign of scripted sessions on the store in DIR, as the daemon would: `fresh` submits a
// new campaign, `resume` restores every unfinished campaign from the store first. Prints
// "checkpoint" after every acknowledged checkpoint (so a test can kill it mid-campaign) and, at the
// end, one "result" line per session in operator order.
//
//   test_session_crash_runner DIR fresh|resume OPERATORS
//
// Answers and verdicts are functions of the request, so a restarted run gets the same ones: the
// first answer of a session has a sign error (accuracy_error), the second one passes.

#include "actors/sessions/campaign.hpp"
#include "actors/store/store.hpp"
#include "messages/errors.hpp"
#include "messages/metrics.hpp"
#include "messages/session_messages.hpp"
#include "messages/wire.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/test_session_support.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

using namespace opforge;
using namespace opforge::testing;

namespace {

int fail(const caf::error& err) {
  std::fprintf(stderr, "runner: %s\n", render(err).c_str());
  return 2;
}

chat_result answer(const chat_request& request) {
  size_t answers_so_far = std::count_if(request.messages.begin(), request.messages.end(),
                                        [](const auto& m) { return m.role == "assistant"; });
  auto sign = answers_so_far == 0 ? "-" : "+";
  return chat_script::answer(chat_outcome::ok,
                             "```python\n@triton.jit\ndef k(x_ptr):\n    y = " + std::string{sign} +
                                 "1\n\n\ndef " + wrapper_name(request.op) +
                                 "(input):\n    k[(1,)](input)\n    return input\n```\n");
}

job_reply verdict(const device_job& job, const nlohmann::json& request) {
  if (job.kind == contract::job_kind::lint)
    return done(clean_lint());
  if (request.at("source").get<std::string>().find("y = +1") != std::string::npos)
    return done(test_verdict(contract::outcome::pass, 3, 3));
  return done(test_verdict(contract::outcome::accuracy_error, 1, 0,
                           contract::test_failure{.dtype = "float32", .diff = values_differ(2.0)}));
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DIR fresh|resume OPERATORS\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  std::string mode = argv[2];
  auto operators = std::stoul(argv[3]);
  std::vector<unfinished_campaign> campaigns;
  if (mode == "resume") {
    auto db = open_rocksdb_store(dir);
    if (!db)
      return fail(db.error());
    auto loaded = load_unfinished_campaigns(**db);
    if (!loaded)
      return fail(loaded.error());
    campaigns = std::move(*loaded);
    if (auto err = (*db)->close())
      return fail(err);
  } else {
    campaign_spec spec;
    spec.campaign_id = "crash";
    spec.endpoint = "scripted";
    spec.concurrency = 8;
    spec.budgets.max_dialogs = 1;
    spec.budgets.max_calls_per_dialog = 4;
    for (size_t i = 0; i < operators; ++i) {
      auto op = "op" + std::to_string(1000 + i);
      spec.operators.push_back({op, "", "crash", op + "(input) -> Tensor", {"float32"}});
    }
    campaigns.push_back({std::move(spec), {}});
  }
  auto templates = prompt_templates::load(std::string{OPFORGE_SOURCE_DIR} + "/config/prompts");
  if (!templates)
    return fail(templates.error());
  system_config cfg;
  caf::actor_system sys{cfg};
  auto store = spawn_store(sys, dir, std::make_shared<metrics>("runner"));
  if (!store)
    return fail(store.error());
  auto chat = std::make_shared<chat_script>();
  chat->answer_for = answer;
  auto jobs = std::make_shared<job_script>();
  jobs->reply_for = verdict;
  session_services services;
  services.store = sys.spawn(observed_store, *store, [](auto) {
    std::fputs("checkpoint\n", stdout);
    std::fflush(stdout);
  });
  services.llm = sys.spawn(scripted_chat, chat);
  services.jobs = sys.spawn(scripted_jobs, jobs);
  services.templates = std::make_shared<const prompt_templates>(std::move(*templates));
  caf::scoped_actor self{sys};
  std::vector<session_summary> results;
  for (auto& c : campaigns) {
    auto actor = sys.spawn(campaign, c.spec, services, std::move(c.sessions));
    caf::error failure;
    self->request(actor, caf::infinite, atom::run_v)
        .receive(
            [&](campaign_status& status) {
              for (auto& s : status.finished)
                results.push_back(std::move(s));
            },
            [&](const caf::error& err) { failure = err; });
    if (failure)
      return fail(failure);
  }
  std::sort(results.begin(), results.end(),
            [](const auto& a, const auto& b) { return a.op < b.op; });
  for (const auto& s : results)
    std::printf("result %s %s calls=%u dialogs=%u kernel=%s\n", s.op.c_str(),
                to_string(s.state).c_str(), s.llm_calls, s.dialogs, s.kernel_key.c_str());
  std::fflush(stdout);
  stop(self, services, *store);
  return 0;
}
