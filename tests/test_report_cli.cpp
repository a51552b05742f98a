// `opforge report` against a real daemon whose store holds two finished campaigns and a library
// where a kernel regressed: the report request reads them back from RocksDB and the CLI writes
// the HTML and JSON files.

#include "actors/library/kernels.hpp"
#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/records.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/cli_test_support.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::cli_testing;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

stored_campaign campaign(const std::string& id, const std::string& model) {
  stored_campaign c;
  c.spec.campaign_id = id;
  c.spec.endpoint = "ep";
  c.spec.model = model;
  c.spec.operators = {{"abs", "", "elementwise", "", {"float32"}},
                      {"sum", "", "reduction", "", {"float32", "int64"}}};
  c.state = contract::campaign_state::done;
  c.ended_ms = 1764000000000;
  return c;
}

session_record session(const std::string& campaign_id, const std::string& op, session_state state,
                       uint32_t calls, const std::string& end_reason) {
  session_record s;
  s.session_id = campaign_id + "/" + op;
  s.campaign_id = campaign_id;
  s.op = op;
  s.endpoint = "ep";
  s.state = state;
  s.total_calls = calls;
  s.prompt_tokens = 500 * calls;
  s.completion_tokens = 50 * calls;
  s.end_reason = end_reason;
  return s;
}

class ReportCli : public CliTest {
protected:
  void SetUp() override {
    CliTest::SetUp();
    fs::create_directories(data);
    auto db = open_rocksdb_store(data / "store");
    ASSERT_TRUE(db) << render(db.error());
    write_batch batch;
    for (const auto& c : {campaign("c1", "big"), campaign("c2", "small")})
      batch.ops.push_back({family::campaigns, c.spec.campaign_id, encode_campaign(c)});
    auto sum_failed = session("c2", "sum", session_state::failed, 12,
                              "budget spent: 1 dialogs of at most 12 calls (12 calls in all)");
    sum_failed.history.push_back({1, 12, contract::attempt_stage::test,
                                  contract::attempt_outcome::accuracy_error, "max abs error 0.5"});
    for (const auto& s : {session("c1", "abs", session_state::success, 2, "passed"),
                          session("c1", "sum", session_state::success, 5, "passed"),
                          session("c2", "abs", session_state::success, 1, "passed"), sum_failed})
      batch.ops.push_back({family::sessions, session_key(s.campaign_id, s.op), encode_record(s)});
    // c1's abs kernel, accepted on Triton 3.6.0, fails on 3.5.1.
    kernel_record abs;
    abs.op = "abs";
    abs.wrapper = "abs_wrapper";
    abs.source = "def abs_wrapper(x):\n    return x.abs()\n";
    abs.dtypes = {"float32"};
    abs.origin = "campaign";
    abs.campaign_id = "c1";
    abs.tests_run = abs.tests_passed = 4;
    abs.toolchain = "aaaaaaaaaaaaaaaa";
    abs.toolchain_versions = {{"torch", "2.13.0"}, {"triton", "3.6.0"}};
    abs.device_kind = "interpreter";
    abs.accepted_at_ms = 1764000000000;
    for (auto& op : accept_kernel(abs))
      batch.ops.push_back(std::move(op));
    auto broken = acceptance_proof(abs);
    broken.fingerprint = "bbbbbbbbbbbbbbbb";
    broken.toolchain["triton"] = "3.5.1";
    broken.outcome = contract::outcome::compile_error;
    broken.tests_passed = 0;
    broken.validated_at_ms += 60000;
    batch.ops.push_back(add_validation(content_hash(abs.source), broken));
    ASSERT_FALSE((*db)->write(batch));
    ASSERT_FALSE((*db)->close());
    serve();
  }

  outcome opforge(std::vector<std::string> args) {
    args.insert(args.end(),
                {"--config", (dir / "quiet.yaml").string(), "--data-dir", data.string()});
    return run(args);
  }
};

} // namespace

TEST_F(ReportCli, WritesHtmlAndJsonOverEveryCampaign) {
  auto html = dir / "report.html", numbers = dir / "report.json";
  auto written = opforge({"report", "--all", "--html", html.string(), "--json", numbers.string()});
  ASSERT_EQ(written.code, 0) << written.err;
  auto report = json::parse(slurp(numbers));
  EXPECT_EQ(report.at("columns"), json({"big", "small"}));
  EXPECT_EQ(
      report.at("by_category").at(1),
      json({{"name", "reduction"}, {"operators", 1}, {"covered", {{"big", 1.0}, {"small", 0.0}}}}));
  EXPECT_EQ(report.at("by_dtype").at(1).at("name"), "int64");
  // c2 failed sum, but c1 covered it: over both campaigns no operator failed.
  EXPECT_EQ(report.at("failures"), json::object());
  EXPECT_EQ(report.at("regressions"), json::parse(R"([{"device_kind": "interpreter",
      "fingerprint": "bbbbbbbbbbbbbbbb", "change": "triton 3.6.0 -> 3.5.1", "kernels": 1,
      "operators": ["abs"]}])"));
  auto curves = report.at("curves");
  ASSERT_EQ(curves.size(), 3u);
  EXPECT_EQ(curves[2].at("name"), "all campaigns");
  EXPECT_EQ(curves[2].at("points"),
            json::parse(R"([{"calls": 1, "covered": 1}, {"calls": 5, "covered": 2}])"));
  EXPECT_EQ(report.at("passed").size(), 3u);
  EXPECT_EQ(report.at("passed").at(1), json({{"campaign", "c1"},
                                             {"op", "sum"},
                                             {"calls", 5},
                                             {"prompt_tokens", 2500},
                                             {"completion_tokens", 250}}));
  auto page = slurp(html);
  EXPECT_THAT(page, HasSubstr("<svg id=\"coverage-curve\""));
  EXPECT_THAT(page,
              HasSubstr("<tr><td>elementwise</td><td>1</td><td>100.0%</td><td>100.0%</td></tr>"));
  EXPECT_THAT(page, HasSubstr("<tr><td>interpreter</td><td>bbbbbbbbbbbbbbbb</td><td>triton 3.6.0 "
                              "-&gt; 3.5.1</td><td>1</td><td>abs</td></tr>"));
}

TEST_F(ReportCli, OneCampaignOrAnUnknownOne) {
  auto numbers = dir / "c2.json";
  auto one = opforge({"report", "--campaign", "c2", "--json", numbers.string()});
  ASSERT_EQ(one.code, 0) << one.err;
  auto report = json::parse(slurp(numbers));
  EXPECT_EQ(report.at("columns"), json({"small"}));
  EXPECT_EQ(report.at("curves").size(), 2u);
  // Out of budget with wrong values last.
  EXPECT_EQ(report.at("failures"), json({{"accuracy_error", 1}}));
  // The library's regressions, whichever campaign the report covers.
  EXPECT_EQ(report.at("regressions").size(), 1u);

  auto unknown = opforge({"report", "--campaign", "nope", "--json", numbers.string()});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("no campaign 'nope'"));
  auto nowhere = opforge({"report"});
  EXPECT_EQ(nowhere.code, 2);
  EXPECT_THAT(nowhere.err, HasSubstr("--html FILE, --json FILE"));
}

// The daemon started on campaigns that ended before it: `campaigns` counts their stored sessions
// (it used to list them with 0 counts), and `attach` says in its exit code that c2 failed one.
TEST_F(ReportCli, CountsOfCampaignsFromBeforeTheStartAndTheExitCodeOfFailures) {
  auto listed = opforge({"campaigns", "--json"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  auto campaigns = json::parse(listed.out).at("campaigns");
  ASSERT_EQ(campaigns.size(), 2u);
  EXPECT_EQ(campaigns[0].at("campaign_id"), "c2");
  EXPECT_EQ(campaigns[0].at("succeeded"), 1);
  EXPECT_EQ(campaigns[0].at("failed"), 1);
  EXPECT_EQ(campaigns[0].at("llm_calls"), 13);
  EXPECT_EQ(campaigns[1].at("succeeded"), 2);
  EXPECT_EQ(campaigns[1].at("failed"), 0);
  EXPECT_EQ(campaigns[1].at("llm_calls"), 7);

  auto failing = opforge({"attach", "c2"});
  EXPECT_EQ(failing.code, 3) << failing.out << failing.err;
  auto clean = opforge({"attach", "c1"});
  EXPECT_EQ(clean.code, 0) << clean.out << clean.err;
}
