// `opforge import` through the real binary: `opforge serve` with its default local workers (one
// interpreter device worker, one lint worker, real Python) imports the hand-written kernel set of
// tests/fixtures/import in both layouts. The honest kernel enters the library as
// imported:<source>; the wrong, the cheating and the broken one are listed with their verdicts
// and never accepted; importing again finds the accepted one present; --repair starts sessions
// seeded with the failing kernels, which the demo's recorded answers then repair.

#include "actors/library/kernels.hpp"
#include "apps/control_client.hpp"
#include "messages/errors.hpp"
#include "persistence/keys.hpp"
#include "persistence/records.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/cli_test_support.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::cli_testing;
using json = nlohmann::json;
using ::testing::AnyOf;
using ::testing::HasSubstr;

namespace {

// The workers import torch and triton, and the interpreter runs every sample: an import takes
// seconds to a minute on a busy machine. Bounds only keep a hang from stalling CI.
constexpr auto import_bound = std::chrono::milliseconds{300s};

const fs::path fixtures = fs::path{OPFORGE_SOURCE_DIR} / "tests" / "fixtures" / "import";
const fs::path backends = fs::path{OPFORGE_SOURCE_DIR} / "worker" / "tests" / "corpus" / "backend";

// Every kernel in the store of a daemon that is not running.
std::vector<kernel_record> stored_kernels(const fs::path& data_dir) {
  std::vector<kernel_record> out;
  auto db = open_rocksdb_store(data_dir / "store");
  if (!db) {
    ADD_FAILURE() << "cannot open the store: " << render(db.error());
    return out;
  }
  auto err = (*db)->scan(family::kernels, "", [&](std::string_view, std::string_view value) {
    auto kernel = decode_kernel(value);
    EXPECT_TRUE(kernel) << render(kernel.error());
    if (kernel)
      out.push_back(std::move(*kernel));
    return true;
  });
  EXPECT_FALSE(err) << render(err);
  EXPECT_FALSE((*db)->close());
  return out;
}

std::vector<session_record> stored_sessions(const fs::path& data_dir) {
  std::vector<session_record> out;
  auto db = open_rocksdb_store(data_dir / "store");
  if (!db) {
    ADD_FAILURE() << "cannot open the store: " << render(db.error());
    return out;
  }
  auto err = (*db)->scan(family::sessions, "", [&](std::string_view, std::string_view value) {
    auto record = decode_record(value);
    EXPECT_TRUE(record) << render(record.error());
    if (record)
      out.push_back(std::move(*record));
    return true;
  });
  EXPECT_FALSE(err) << render(err);
  EXPECT_FALSE((*db)->close());
  return out;
}

// path -> verdict of an import's final status.
std::map<std::string, std::string> verdicts(const json& status) {
  std::map<std::string, std::string> out;
  for (const auto& v : status.at("verdicts"))
    out[v.at("path").get<std::string>()] = v.at("verdict").get<std::string>();
  return out;
}

class Import : public CliTest {
protected:
  void SetUp() override {
    CliTest::SetUp();
    ::unsetenv("OPFORGE_LLM_URL"); // the demo endpoint: the recorded answers repair with
    // The workers the daemon starts can import the hand-written installed backend, as they would
    // an installed package (worker/tests/corpus/backend/opforge_test_backend).
    auto pythonpath = backends.string();
    if (const char* inherited = std::getenv("PYTHONPATH"); inherited && *inherited)
      pythonpath.append(":").append(inherited);
    ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
    write("demo.yaml", "workers: {listen: '" + workers_endpoint() + "'}\n");
    start_daemon();
  }

  void start_daemon() {
    daemon = spawn({"serve", "--config", (dir / "demo.yaml").string(), "--data-dir", data.string(),
                    "--metrics-listen", ""},
                   dir / "serve.out", dir / "serve.err");
    auto deadline = std::chrono::steady_clock::now() + process_bound;
    while (opforge({"status"}).code != 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << slurp(dir / "serve.err");
      ASSERT_EQ(::waitpid(daemon, nullptr, WNOHANG), 0) << slurp(dir / "serve.err");
      std::this_thread::sleep_for(20ms);
    }
  }

  outcome opforge(std::vector<std::string> args, std::chrono::milliseconds bound = process_bound) {
    args.insert(args.end(), {"--data-dir", data.string()});
    auto pid = spawn(args, dir / "cli.out", dir / "cli.err");
    int code = wait_for(pid, bound);
    return {code, slurp(dir / "cli.out"), slurp(dir / "cli.err")};
  }

  // Imports a kernel set with --json and returns its final status. Every set these tests import
  // so has kernels refused: the import exits 3, as `run` does with operators failed.
  json import_set(const std::vector<std::string>& args) {
    std::vector<std::string> all{"import", "--dtypes", "float32", "--json"};
    all.insert(all.end(), args.begin(), args.end());
    auto result = opforge(all, import_bound);
    EXPECT_EQ(result.code, 3) << result.out << result.err << slurp(dir / "serve.err");
    if (result.code != 3)
      return json::object({{"verdicts", json::array()}});
    return json::parse(result.out);
  }

  void shut_down() {
    EXPECT_EQ(opforge({"shutdown"}).code, 0);
    EXPECT_EQ(wait_for_daemon(), 0) << slurp(dir / "serve.err");
  }
};

const auto cheat_verdicts = AnyOf("cheat_detected", "lint_violation");

} // namespace

TEST_F(Import, BothLayoutsAcceptTheHonestKernelOnlyAndAgainFindItPresent) {
  auto candidates = import_set(
      {(fixtures / "candidates").string(), "--layout", "candidates", "--source", "mine"});
  EXPECT_EQ(candidates.at("state"), "done");
  EXPECT_EQ(candidates.at("accepted"), 1);
  auto got = verdicts(candidates);
  ASSERT_EQ(got.size(), 4u) << candidates.dump(2);
  EXPECT_EQ(got["abs.py"], "pass") << candidates.dump(2);
  EXPECT_EQ(got["neg.py"], "accuracy_error") << candidates.dump(2);
  EXPECT_THAT(got["sigmoid.py"], cheat_verdicts) << candidates.dump(2);
  EXPECT_EQ(got["nn.functional.relu.py"], "lint_violation") << candidates.dump(2);
  for (const auto& v : candidates.at("verdicts")) {
    if (v.at("path") == "nn.functional.relu.py")
      EXPECT_EQ(v.at("detail"), "syntax error at line 4: expected ':'");
    if (v.at("path") == "neg.py")
      EXPECT_THAT(v.at("detail").get<std::string>(), HasSubstr("float32 extremal #"));
  }

  // Again: the accepted kernel is present by its source, nothing is added twice.
  auto again = import_set(
      {(fixtures / "candidates").string(), "--layout", "candidates", "--source", "mine"});
  EXPECT_EQ(verdicts(again)["abs.py"], "present") << again.dump(2);
  EXPECT_EQ(again.at("accepted"), 0);

  // The same kernels as BackendBench folders, the plain text output.
  auto bench = opforge({"import", (fixtures / "backendbench").string(), "--layout", "backendbench",
                        "--dtypes", "float32"},
                       import_bound);
  ASSERT_EQ(bench.code, 3) << bench.out << bench.err;
  EXPECT_THAT(
      bench.out,
      HasSubstr("  pass            abs__default/abs__default_implementation_v1.py as abs\n"))
      << bench.out;
  EXPECT_THAT(bench.out, HasSubstr("  accuracy_error  neg__default/neg__default_implementation_v1."
                                   "py as neg: float32 extremal #"))
      << bench.out;
  EXPECT_THAT(bench.out, HasSubstr("relu__default/relu__default_implementation_v1.py as "
                                   "nn.functional.relu: syntax error at line 7: expected ':'\n"))
      << bench.out;
  EXPECT_THAT(bench.out, HasSubstr("sigmoid__default/sigmoid__default_implementation_v1.py as "
                                   "sigmoid: "))
      << bench.out;
  EXPECT_THAT(bench.out, HasSubstr(": 1 of 4 kernels passed and entered the library as "
                                   "imported:backendbench\n"))
      << bench.out;

  shut_down();
  std::map<std::string, std::string> origins; // wrapper -> origin
  for (const auto& kernel : stored_kernels(data)) {
    EXPECT_EQ(kernel.op, "abs");
    EXPECT_EQ(kernel.dtypes, std::vector<std::string>{"float32"});
    EXPECT_GT(kernel.tests_passed, 0);
    EXPECT_EQ(kernel.tests_passed, kernel.tests_run);
    origins[kernel.wrapper] = kernel.origin;
  }
  EXPECT_EQ(origins,
            (std::map<std::string, std::string>{
                {"abs", "imported:mine"}, {"abs__default_kernel_impl", "imported:backendbench"}}));
}

TEST_F(Import, AnInstalledBackendIsJudgedPerOverloadThroughTheDispatcher) {
  // opforge_test_backend registers a right neg, a wrong abs, and exp for CUDA only, which the
  // interpreter's CPU tensors never reach.
  auto backend = import_set(
      {"--layout", "torch-library", "--package", "opforge_test_backend", "--ops", "abs,neg,exp"});
  EXPECT_EQ(backend.at("state"), "done") << backend.dump(2);
  EXPECT_EQ(backend.at("layout"), "torch-library");
  EXPECT_EQ(backend.at("source"), "opforge_test_backend");
  EXPECT_EQ(backend.at("tests"), 3);
  EXPECT_EQ(backend.at("accepted"), 1);
  auto got = verdicts(backend);
  EXPECT_EQ(got, (std::map<std::string, std::string>{{"aten.abs.default", "accuracy_error"},
                                                     {"aten.exp.default", "never_reached"},
                                                     {"aten.neg.default", "pass"}}))
      << backend.dump(2);
  for (const auto& v : backend.at("verdicts")) {
    auto detail = v.at("detail").get<std::string>();
    if (v.at("path") == "aten.neg.default") {
      EXPECT_EQ(v.at("op"), "neg");
      int passed = 0, run = 0, calls = 0;
      ASSERT_EQ(std::sscanf(detail.c_str(), "%d/%d tests passed, its kernel called %d times",
                            &passed, &run, &calls),
                3)
          << detail;
      EXPECT_GT(run, 0);
      EXPECT_EQ(passed, run);
      EXPECT_GE(calls, run) << detail; // every sample, and its fresh values
    }
    if (v.at("path") == "aten.abs.default")
      EXPECT_THAT(detail, HasSubstr(" tests passed, its kernel called ")) << detail;
    if (v.at("path") == "aten.exp.default")
      EXPECT_THAT(detail, HasSubstr("its kernel called 0 times: registered, never reached"))
          << detail;
  }

  // Options that do not fit the layout are refused before anything is sent.
  auto no_package = opforge({"import", "--layout", "torch-library"});
  EXPECT_EQ(no_package.code, 2);
  EXPECT_THAT(no_package.err, HasSubstr("name it with --package"));
  auto package_elsewhere = opforge(
      {"import", (fixtures / "candidates").string(), "--layout", "candidates", "--package", "x"});
  EXPECT_EQ(package_elsewhere.code, 2);
  EXPECT_THAT(package_elsewhere.err, HasSubstr("go with --layout torch-library"));
  // A name the worker's contract refuses is refused when the import is asked for.
  auto bad_name = opforge({"import", "--layout", "torch-library", "--package", "no/such"});
  EXPECT_EQ(bad_name.code, 1) << bad_name.out << bad_name.err;
  EXPECT_THAT(bad_name.err,
              HasSubstr("import: key 'package': must be of the characters A-Za-z0-9_."))
      << bad_name.err;
  // A package the worker cannot import fails the import with the worker's reason.
  auto missing = opforge({"import", "--layout", "torch-library", "--package", "no_such_backend_pkg",
                          "--ops", "abs", "--dtypes", "float32"},
                         import_bound);
  EXPECT_EQ(missing.code, 1) << missing.out << missing.err;
  EXPECT_THAT(missing.out + missing.err, HasSubstr("no_such_backend_pkg"));
  EXPECT_THAT(missing.out + missing.err, HasSubstr("no such package is installed"));

  shut_down();
  EXPECT_TRUE(stored_kernels(data).empty()); // the package's kernels stay in the package

  // Both imports outlive the daemon: listed oldest first, each shown with its verdicts.
  start_daemon();
  auto listed = opforge({"imports", "--json"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  auto imports = json::parse(listed.out);
  ASSERT_EQ(imports.size(), 2u) << imports.dump(2);
  EXPECT_EQ(imports[0].at("import_id"), backend.at("import_id"));
  EXPECT_EQ(imports[0].at("state"), "done");
  EXPECT_EQ(imports[0].at("accepted"), 1);
  EXPECT_FALSE(imports[0].contains("verdicts")); // a list of imports, not of their verdicts
  EXPECT_EQ(imports[1].at("state"), "failed");
  EXPECT_EQ(imports[1].at("source"), "no_such_backend_pkg");
  auto shown = opforge({"import", "show", backend.at("import_id").get<std::string>(), "--json"});
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(json::parse(shown.out), backend);
  auto text = opforge({"imports"});
  EXPECT_THAT(text.out, HasSubstr(backend.at("import_id").get<std::string>() +
                                  "  done    torch-library  opforge_test_backend"))
      << text.out;
  auto unknown = opforge({"import", "show", "import-none"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("no import 'import-none' in this daemon's store"));
  // The report lists them too.
  ASSERT_EQ(opforge({"report", "--json", (dir / "report.json").string()}).code, 0);
  auto reported = json::parse(slurp(dir / "report.json")).at("imports");
  ASSERT_EQ(reported.size(), 2u) << reported.dump(2);
  EXPECT_EQ(reported[0].at("import_id"), backend.at("import_id"));
  EXPECT_EQ(reported[0].at("layout"), "torch-library");
  EXPECT_EQ(reported[0].at("accepted"), 1);
  EXPECT_EQ(reported[0].at("tests"), 3);
  EXPECT_EQ(reported[1].at("state"), "failed");
  shut_down();
}

TEST_F(Import, TheOlderBackendBenchLayoutMapsAFolderToEveryOverloadOfItsOp) {
  // Plain text: the verdicts with their numbers, and exit 3 as some were refused.
  auto older = opforge({"import", (fixtures / "backendbench-older").string(), "--layout",
                        "backendbench", "--dtypes", "float32", "--source", "older"},
                       import_bound);
  EXPECT_EQ(older.code, 3) << older.out << older.err << slurp(dir / "serve.err");
  EXPECT_THAT(older.out, HasSubstr("  pass            abs/abs_implementation_v1.py as abs\n"))
      << older.out;
  EXPECT_THAT(older.out, HasSubstr("  unmapped        abs_/abs__implementation_v1.py: folder abs_ "
                                   "names the aten op abs_ (BackendBench's "
                                   "one-folder-per-operator layout: every overload of "
                                   "aten.abs_), and no operator of the catalog dispatches to "
                                   "an overload of it\n"))
      << older.out;
  // NaN becomes 0: the numbers say so (the finite elements agree).
  EXPECT_THAT(older.out, testing::ContainsRegex(
                             "  accuracy_error  neg/neg_implementation_v1\\.py as neg: float32 "
                             "extremal #[0-9]+: .*\\(values differ, max abs error 0, max rel "
                             "error 0, tolerance atol 1e-05 rtol 1.3e-05, 12 NaN/inf "
                             "mismatches, 12 of 400 elements mismatched, first at "
                             "\\[[0-9, ]*\\]: 0.0 where nan is expected\\)\n"))
      << older.out;
  EXPECT_THAT(older.out, HasSubstr(": 1 of 3 kernels passed and entered the library as "
                                   "imported:older\n"))
      << older.out;

  // Again: abs is present and the rest refused as before, still exit 3; a set of the accepted
  // kernel alone exits 0.
  auto only_abs = dir / "only-abs";
  fs::create_directories(only_abs / "abs");
  fs::copy_file(fixtures / "backendbench-older" / "abs" / "abs_implementation_v1.py",
                only_abs / "abs" / "abs_implementation_v1.py");
  auto again = opforge(
      {"import", only_abs.string(), "--layout", "backendbench", "--dtypes", "float32", "--json"},
      import_bound);
  EXPECT_EQ(again.code, 0) << again.out << again.err;
  EXPECT_EQ(verdicts(json::parse(again.out)),
            (std::map<std::string, std::string>{{"abs/abs_implementation_v1.py", "present"}}));

  shut_down();
  auto kernels = stored_kernels(data);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].op, "abs");
  EXPECT_EQ(kernels[0].wrapper, "abs_kernel_impl");
  EXPECT_EQ(kernels[0].origin, "imported:older");
}

TEST_F(Import, RepairStartsSessionsSeededWithTheFailingKernels) {
  auto status =
      import_set({(fixtures / "candidates").string(), "--layout", "candidates", "--repair"});
  auto campaign = status.value("repair_campaign", std::string{});
  ASSERT_FALSE(campaign.empty()) << status.dump(2);

  // The demo's recorded answers for these operators pass by the second call.
  auto attach = opforge({"attach", campaign}, import_bound);
  EXPECT_EQ(attach.code, 0) << attach.out << attach.err;
  EXPECT_THAT(attach.out, HasSubstr("3 of 3 operators passed")) << attach.out;
  // Each session opened with the debug prompt: its seed, and the import's verdict as its status.
  auto show = opforge({"show", "neg", "--campaign", campaign});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, HasSubstr("dialog 1 of 3: debug_existing prompt")) << show.out;
  EXPECT_THAT(show.out, HasSubstr("tl.where(x == x, x * -1, 0)")) << show.out;
  EXPECT_THAT(show.out, HasSubstr("Its test ended accuracy_error")) << show.out;

  shut_down();
  std::map<std::string, std::string> seeds; // operator -> seed
  for (const auto& session : stored_sessions(data)) {
    EXPECT_EQ(session.campaign_id, campaign);
    EXPECT_EQ(session.state, session_state::success) << session.end_reason;
    seeds[session.op] = session.seed_kernel;
  }
  EXPECT_EQ(seeds,
            (std::map<std::string, std::string>{
                {"neg", slurp(fixtures / "candidates" / "neg.py")},
                {"nn.functional.relu", slurp(fixtures / "candidates" / "nn.functional.relu.py")},
                {"sigmoid", slurp(fixtures / "candidates" / "sigmoid.py")}}));
}

TEST_F(Import, LargeSetsTravelInPartsAndOversizedFilesAreRefused) {
  // Forty folders of 1 MiB each are over one control request (32 MiB, bounded so that a run can
  // carry a model's sample set); none defines its impl, so they are judged without a device.
  auto set = dir / "many";
  std::string padding(size_t{1} << 20, '#');
  for (int i = 0; i < 40; ++i) {
    auto folder = "op" + std::to_string(i) + "__default";
    fs::create_directories(set / folder);
    std::ofstream{set / folder / (folder + "_implementation_v1.py")} << padding << "\n";
  }
  auto status = import_set({set.string(), "--layout", "backendbench"});
  EXPECT_EQ(status.at("state"), "done");
  EXPECT_EQ(status.at("layout"), "backendbench");
  EXPECT_EQ(status.at("files"), 40);
  auto got = verdicts(status);
  ASSERT_EQ(got.size(), 40u);
  for (const auto& [path, verdict] : got)
    EXPECT_EQ(verdict, "invalid") << path;

  // A file over one request's room is refused before anything is sent; the room is the limit
  // less 4 KiB for the request itself, and a file costs its path, its bytes and 32 more.
  auto big = dir / "big";
  fs::create_directories(big);
  std::ofstream{big / "abs.py"} << std::string(control_max_request_bytes, '#') << "\n";
  auto refused = opforge({"import", big.string(), "--layout", "candidates"});
  EXPECT_EQ(refused.code, 2);
  EXPECT_THAT(refused.err,
              HasSubstr("abs.py is " + std::to_string(control_max_request_bytes + 1 + 6 + 32) +
                        " bytes; a control request carries at most " +
                        std::to_string(control_max_request_bytes - 4096) +
                        " bytes of kernels, so it cannot be sent"));
}
