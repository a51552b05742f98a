// Model sample sets through a campaign (issue 18 §5): `opforge run --from-model REPORT` imports
// the set a model check captured into the daemon's store, every test job of the campaign carries
// the operator's part of it to the real interpreter worker (which never captured it), and a
// kernel that passes OpInfo's samples but fails the model's own call is reported as such.

#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/model_sets.hpp"
#include "persistence/records.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/cli_test_support.hpp"

#include <cstdlib>
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::cli_testing;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

constexpr auto campaign_bound = std::chrono::milliseconds{240s};

const std::string demo_cassette = std::string{OPFORGE_SOURCE_DIR} + "/config/demo/cassette.jsonl";

// A model check's report whose model `toy` calls neg once on a (3, 7, 5) tensor, with that call
// captured (`captured_inputs`), as `python -m opforge_library modelcheck --capture` writes it.
constexpr const char* toy_report = R"(
import json, sys
from pathlib import Path
import torch
from opforge_worker import model_sets
capture = model_sets.Capture()
with capture:
    torch.neg(torch.randn(3, 7, 5))
root = Path(sys.argv[1])
catalog = [{"name": "neg", "variant": "", "aten_overloads": ["aten.neg.default"]}]
model_sets.save("toy", capture, catalog, root)
Path(sys.argv[2]).write_text(json.dumps({
    "model": "toy", "aten_calls": {"aten.neg.default": 1}, "served_calls": 0,
    "missing_overloads": ["aten.neg.default"], "missing_operators": [{"op": "neg"}],
    "max_abs_deviation": 0.0, "max_rel_deviation": 0.0, "seconds_with_library": 0.1,
    "seconds_without_library": 0.1, "captured_inputs": model_sets.encoded("toy", root)}))
)";

// The demo's neg answer, and the same kernel made wrong for exactly the model's shape: it passes
// every generated set and fails model:toy.
std::pair<json, json> neg_answers() {
  std::ifstream in{demo_cassette};
  for (std::string line; std::getline(in, line);) {
    auto entry = json::parse(line);
    if (entry["operator"] != "neg")
      continue;
    auto wrong = entry;
    auto& content = wrong["response"]["choices"][0]["message"]["content"];
    auto text = content.get<std::string>();
    auto replace = [&](const std::string& from, const std::string& to) {
      auto at = text.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos)
        text.replace(at, from.size(), to);
    };
    replace("BLOCK_SIZE: tl.constexpr):", "BLOCK_SIZE: tl.constexpr, OFF: tl.constexpr):");
    replace("    tl.store(", "    if OFF:\n        y = y + 1\n    tl.store(");
    replace("BLOCK_SIZE=1024)", "BLOCK_SIZE=1024, OFF=tuple(x.shape) == (3, 7, 5))");
    content = text;
    wrong["index"] = 0;
    entry["index"] = 1;
    return {wrong, entry};
  }
  ADD_FAILURE() << "the demo cassette has no neg answer";
  return {};
}

class ModelSetCampaign : public CliTest {
protected:
  void SetUp() override {
    CliTest::SetUp();
    auto [wrong, right] = neg_answers();
    write("cassette.jsonl", wrong.dump() + "\n" + right.dump() + "\n");
    write("serve.yaml", "workers: {listen: '" + workers_endpoint() +
                            "'}\nllm: {endpoints: [{name: demo, kind: replay, cassette: '" +
                            (dir / "cassette.jsonl").string() + "'}]}\n");
    // The worker's own set directory stays empty: only the daemon's copy can reach it.
    ::setenv("OPFORGE_MODEL_SETS_DIR", (dir / "worker-sets").c_str(), 1);
    auto command = std::string{OPFORGE_PYTHON} + " -c '" + toy_report + "' " +
                   (dir / "captured").string() + " " + (dir / "toy.json").string();
    ASSERT_EQ(std::system(command.c_str()), 0);
    fs::remove_all(dir / "captured");
  }

  void TearDown() override {
    ::unsetenv("OPFORGE_MODEL_SETS_DIR");
    CliTest::TearDown();
  }

  outcome opforge(std::vector<std::string> args, std::chrono::milliseconds bound = process_bound) {
    args.insert(args.end(), {"--data-dir", data.string()});
    auto pid = spawn(args, dir / "cli.out", dir / "cli.err");
    int code = wait_for(pid, bound);
    return {code, slurp(dir / "cli.out"), slurp(dir / "cli.err")};
  }
};

TEST_F(ModelSetCampaign, AKernelThatFailsOnlyTheModelsInputsIsToldSoAndRepaired) {
  daemon = spawn({"serve", "--config", (dir / "serve.yaml").string(), "--data-dir", data.string(),
                  "--metrics-listen", ""},
                 dir / "serve.out", dir / "serve.err");
  auto deadline = std::chrono::steady_clock::now() + process_bound;
  while (opforge({"status"}).code != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(50ms);

  auto absent = opforge({"run", "neg", "--sets", "model:absent", "--dtypes", "float32"});
  EXPECT_NE(absent.code, 0);
  EXPECT_THAT(absent.out + absent.err, HasSubstr("the daemon holds no model set model:absent"));

  auto run = opforge({"run", "--from-model", (dir / "toy.json").string(), "--dtypes", "float32",
                      "--max-dialogs", "1", "--max-calls", "2"},
                     campaign_bound);
  ASSERT_EQ(run.code, 0) << run.out << run.err << slurp(dir / "serve.err");
  EXPECT_THAT(run.out, HasSubstr("  PASS  neg  (")) << run.out;
  auto show = opforge({"show", "neg"});
  EXPECT_THAT(show.out, HasSubstr("passes OpInfo's samples but fails model:toy inputs"))
      << show.out;
  EXPECT_EQ(opforge({"shutdown"}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0) << slurp(dir / "serve.err");

  auto db = open_rocksdb_store(data / "store");
  ASSERT_TRUE(db) << render(db.error());
  // The daemon holds the set; the campaign's spec kept neg's part, the one its tests carried.
  auto stored = (*db)->get(family::meta, model_set_key("model:toy", "neg"));
  ASSERT_TRUE(stored && *stored);
  std::vector<stored_campaign> campaigns;
  session_record neg;
  EXPECT_FALSE((*db)->scan(family::campaigns, "", [&](std::string_view, std::string_view value) {
    auto campaign = decode_campaign(value);
    EXPECT_TRUE(campaign);
    if (campaign && campaign->state == contract::campaign_state::done)
      campaigns.push_back(*campaign);
    return true;
  }));
  ASSERT_EQ(campaigns.size(), 1u);
  EXPECT_EQ(campaigns[0].spec.sample_sets, std::vector<std::string>{"model:toy"});
  ASSERT_EQ(campaigns[0].spec.operators.size(), 1u);
  EXPECT_EQ(campaigns[0].spec.operators[0].model_samples.at("model:toy"), **stored);
  EXPECT_FALSE((*db)->scan(family::sessions, "", [&](std::string_view, std::string_view value) {
    auto record = decode_record(value);
    if (record && record->op == "neg" && record->campaign_id == campaigns[0].spec.campaign_id)
      neg = *record;
    return true;
  }));
  EXPECT_EQ(neg.state, session_state::success);
  ASSERT_EQ(neg.history.size(), 2u);
  EXPECT_EQ(neg.history[0].outcome, contract::attempt_outcome::accuracy_error);
  EXPECT_THAT(neg.history[0].detail,
              HasSubstr("float32: passes OpInfo's samples but fails model:toy inputs"));
  auto* verdict = neg.verdict.test();
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->per_dtype.at("float32").sets.at("model:toy").passed, 1);
  EXPECT_FALSE((*db)->close());
}

} // namespace
