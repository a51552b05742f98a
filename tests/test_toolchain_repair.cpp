// A real toolchain drop through the real binary (issue 19, "How we will know"): `opforge serve`
// with its local workers (Triton 3.6.0, the build's venv) builds a library by `opforge import` of
// tests/fixtures/toolchain_drop/library, a kernel that calls tl.mul (absent from Triton 3.5.1's
// triton.language) and one that works on both. Then a worker from the venv ops/toolchain-venv.sh
// builds (Triton 3.5.1, the same torch) connects. The test shows the new fingerprint detected and
// the library re-validated there, the regression listed with its toolchain change and failure, a
// repair through a recorded answer (the replay endpoint, tests/fixtures/toolchain_drop/
// recorded.jsonl) proved on 3.5.1 and validated on 3.6.0 too, and `opforge export --fingerprint`
// choosing, per toolchain, the kernel proved there.

#include "tests/cli_test_support.hpp"

#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge::cli_testing;
using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

// Workers import torch and triton, the interpreter runs every sample, and the first run builds the
// 3.5.1 venv from a (cached) wheel. Bounds only keep a hang from stalling CI.
constexpr auto step_bound = std::chrono::milliseconds{300s};

const fs::path fixtures = fs::path{OPFORGE_SOURCE_DIR} / "tests" / "fixtures" / "toolchain_drop";

// The venv of the old toolchain, as worker/tests/test_toolchain_drop.py finds (and builds) it.
fs::path old_venv() {
  if (const char* venv = std::getenv("OPFORGE_OLD_TOOLCHAIN_VENV"))
    return venv;
  return fs::path{OPFORGE_SOURCE_DIR} / ".venv-old";
}

template <class Predicate>
bool eventually(Predicate done, std::chrono::milliseconds bound = step_bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(500ms);
  }
  return true;
}

// Runs `argv` (not the opforge binary) with its output in `out`; its pid.
pid_t spawn_command(const std::vector<std::string>& argv, const fs::path& out) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& arg : argv)
      args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// The kernel of `op` in an exported torch-library package: its module's source.
std::string exported_source(const fs::path& package, const std::string& op) {
  std::string found;
  for (const auto& entry : fs::directory_iterator{package / "kernels"}) {
    auto name = entry.path().filename().string();
    if (name.rfind("k_" + op + "_", 0) == 0 && entry.path().extension() == ".py")
      found += slurp(entry.path());
  }
  return found;
}

class ToolchainRepair : public CliTest {
protected:
  void SetUp() override {
    CliTest::SetUp();
    ::unsetenv("OPFORGE_LLM_URL");
    auto venv = old_venv();
    auto base = fs::path{OPFORGE_PYTHON}.parent_path().parent_path();
    auto build =
        spawn_command({"/usr/bin/env", "OPFORGE_VENV=" + base.string(),
                       OPFORGE_SOURCE_DIR "/ops/toolchain-venv.sh", venv.string(), "3.5.1"},
                      dir / "venv.log");
    ASSERT_EQ(wait_for(build, 900s), 0) << slurp(dir / "venv.log");
    old_python = (venv / "bin" / "python").string();

    // The old worker connects on its own, so the socket admits workers without keys (ipc only).
    write("drop.yaml", "workers: {listen: '" + workers_endpoint() +
                           "', allow_unauthenticated: true}\n"
                           "local_workers:\n"
                           "  - {role: device, kind: interpreter, count: 1, slots: 1}\n"
                           "  - {role: lint, kind: none, count: 1, slots: 1}\n"
                           "campaigns: {device_kind: interpreter, dtypes: float32}\n"
                           "llm: {endpoints: [{name: recorded, kind: replay, cassette: '" +
                           (fixtures / "recorded.jsonl").string() + "'}]}\n");
    daemon = spawn({"serve", "--config", (dir / "drop.yaml").string(), "--data-dir", data.string(),
                    "--metrics-listen", ""},
                   dir / "serve.out", dir / "serve.err");
    ASSERT_TRUE(eventually(
        [&] { return opforge({"status"}).code == 0 || ::waitpid(daemon, nullptr, WNOHANG) != 0; },
        process_bound))
        << slurp(dir / "serve.err");
  }

  void TearDown() override {
    if (old_worker > 0) {
      ::kill(old_worker, SIGTERM);
      if (wait_for(old_worker, 10s) < 0)
        ADD_FAILURE() << "the old worker outlived SIGTERM";
    }
    CliTest::TearDown();
  }

  outcome opforge(std::vector<std::string> args, std::chrono::milliseconds bound = process_bound) {
    args.insert(args.end(),
                {"--config", (dir / "drop.yaml").string(), "--data-dir", data.string()});
    auto pid = spawn(args, dir / "cli.out", dir / "cli.err");
    int code = wait_for(pid, bound);
    return {code, slurp(dir / "cli.out"), slurp(dir / "cli.err")};
  }

  json opforge_json(std::vector<std::string> args) {
    args.push_back("--json");
    auto result = opforge(args);
    EXPECT_EQ(result.code, 0) << result.out << result.err;
    return json::parse(result.code == 0 ? result.out : "{}");
  }

  // The library's kernels of `op`, oldest version first, with sources.
  json kernels(const std::string& op) {
    auto listed = opforge({"kernels", op, "--json"});
    EXPECT_EQ(listed.code, 0) << listed.err;
    return json::parse(listed.out).at("kernels");
  }

  // The verdict of a kernel on a fingerprint, as `kernels` lists its proofs.
  static std::optional<json> proof_on(const json& kernel, const std::string& fingerprint) {
    for (const auto& proof : kernel.at("proofs"))
      if (proof.at("fingerprint") == fingerprint)
        return proof;
    return std::nullopt;
  }

  // Exports the kernels proved on `fingerprint` as a torch-library package; its directory.
  fs::path export_for(const std::string& fingerprint, const std::string& name) {
    auto out = dir / ("export-" + name);
    auto exported = opforge({"export", "--format", "torch-library", "--out", out.string(), "--name",
                             "drop_kernels", "--fingerprint", fingerprint},
                            step_bound);
    EXPECT_EQ(exported.code, 0) << exported.out << exported.err;
    auto manifest = json::parse(slurp(out / "drop_kernels" / "manifest.json"), nullptr, false);
    EXPECT_EQ(manifest.value("fingerprint", ""), fingerprint) << manifest.dump(1);
    return out / "drop_kernels";
  }

  std::string old_python;
  pid_t old_worker = 0;
};

} // namespace

TEST_F(ToolchainRepair, RealDrop) {
  // 1. The library, proved on Triton 3.6.0: both kernels pass there.
  auto imported = opforge({"import", (fixtures / "library").string(), "--layout", "candidates",
                           "--dtypes", "float32", "--source", "drop", "--json"},
                          step_bound);
  ASSERT_EQ(imported.code, 0) << imported.out << imported.err << slurp(dir / "serve.err");
  ASSERT_EQ(json::parse(imported.out).at("accepted"), 2) << imported.out;
  auto square = kernels("square");
  ASSERT_EQ(square.size(), 1u);
  const auto& accepted = square[0].at("proofs").at(0);
  ASSERT_EQ(accepted.at("toolchain").at("triton"), "3.6.0") << accepted.dump(1);
  std::string new_fingerprint = accepted.at("fingerprint");
  auto regressions = opforge_json({"regressions"});
  EXPECT_TRUE(regressions.at("regressions").empty()) << regressions.dump(1);

  // 2. A worker on Triton 3.5.1 connects: another fingerprint, detected without being asked for,
  // and every current kernel is re-validated there.
  old_worker =
      spawn_command({"/usr/bin/env", "PYTHONPATH=" OPFORGE_SOURCE_DIR "/worker", old_python, "-m",
                     "opforge_worker", "serve", "--connect", workers_endpoint(), "--device",
                     "interpreter", "--slots", "1", "--role", "device"},
                    dir / "old-worker.log");
  std::string old_fingerprint;
  ASSERT_TRUE(eventually([&] {
    for (const auto& w : opforge_json({"workers"}).value("workers", json::array()))
      if (w.value("role", "") == "device" && w.at("toolchain").value("triton", "") == "3.5.1")
        old_fingerprint = w.value("fingerprint", "");
    return !old_fingerprint.empty();
  })) << slurp(dir / "old-worker.log");
  ASSERT_NE(old_fingerprint, new_fingerprint);
  ASSERT_TRUE(eventually([&] {
    auto abs = kernels("abs"), sq = kernels("square");
    return proof_on(abs.at(0), old_fingerprint) && proof_on(sq.at(0), old_fingerprint);
  })) << slurp(dir / "serve.err");
  // The maintenance actor's view: the new toolchain, live, its work done, one kernel failing.
  auto toolchain = json::object();
  ASSERT_TRUE(eventually([&] {
    auto maintenance = opforge_json({"status"}).value("maintenance", json::object());
    for (const auto& t : maintenance.value("toolchains", json::array()))
      if (t.value("fingerprint", "") == old_fingerprint)
        toolchain = t;
    return toolchain.value("owed", 1) == 0 && maintenance.value("regressions", 0) == 1;
  })) << toolchain.dump(1);
  EXPECT_EQ(toolchain.value("live", false), true);
  EXPECT_EQ(toolchain.at("toolchain").value("triton", ""), "3.5.1");
  EXPECT_EQ(toolchain.value("passed", 0), 1);
  EXPECT_EQ(toolchain.value("failed", 0), 1);
  auto abs_there = proof_on(kernels("abs").at(0), old_fingerprint);
  EXPECT_EQ(abs_there->at("outcome"), "pass") << abs_there->dump(1);
  EXPECT_EQ(abs_there->at("toolchain").at("triton"), "3.5.1");

  // 3. The regression: the operator, the change in words, the old verdict and the new one with
  // why it fails.
  regressions = opforge_json({"regressions"});
  ASSERT_EQ(regressions.at("regressions").size(), 1u) << regressions.dump(1);
  const auto& r = regressions.at("regressions").at(0);
  EXPECT_EQ(r.at("operator"), "square");
  EXPECT_EQ(r.at("change"), "triton 3.6.0 -> 3.5.1");
  EXPECT_EQ(r.at("before").at("fingerprint"), new_fingerprint);
  EXPECT_EQ(r.at("before").at("outcome"), "pass");
  EXPECT_EQ(r.at("after").at("fingerprint"), old_fingerprint);
  EXPECT_EQ(r.at("after").at("outcome"), "runtime_error");
  EXPECT_THAT(r.at("after").at("detail").get<std::string>(),
              HasSubstr("module 'triton.language' has no attribute 'mul'"));
  auto listed = opforge({"regressions"});
  EXPECT_THAT(listed.out, HasSubstr("triton 3.6.0 -> 3.5.1"));
  EXPECT_THAT(listed.out, HasSubstr(old_fingerprint + ":runtime_error (0/"));
  EXPECT_THAT(listed.out, HasSubstr("has no attribute 'mul'"));

  // Per toolchain, the kernels proved there: on 3.6.0 both, on 3.5.1 only abs. The exporter runs
  // the interpreter's kernels to map them to overloads.
  ::setenv("TRITON_INTERPRET", "1", 1);
  auto on_new = export_for(new_fingerprint, "new");
  EXPECT_THAT(exported_source(on_new, "square"), HasSubstr("tl.mul(x, x)"));
  EXPECT_THAT(exported_source(on_new, "abs"), HasSubstr("tl.abs(x)"));
  auto on_old = export_for(old_fingerprint, "old");
  EXPECT_EQ(exported_source(on_old, "square"), "");
  EXPECT_THAT(exported_source(on_old, "abs"), HasSubstr("tl.abs(x)"));

  // 4. The repair: a session seeded with the kernel and its failure, answered from the recorded
  // cassette, tested on the 3.5.1 worker only.
  auto repair = opforge_json({"repair", "--endpoint", "recorded"});
  ASSERT_EQ(repair.at("campaigns").size(), 1u) << repair.dump(1);
  const auto& campaign = repair.at("campaigns").at(0);
  EXPECT_EQ(campaign.at("fingerprint"), old_fingerprint);
  EXPECT_EQ(campaign.at("seeded"), json({"square"}));
  std::string id = campaign.at("campaign_id");
  auto attached = opforge({"attach", id}, step_bound);
  EXPECT_EQ(attached.code, 0) << attached.out << attached.err << slurp(dir / "serve.err");
  auto shown = opforge({"show", "square", "--campaign", id});
  EXPECT_THAT(shown.out, HasSubstr("triton 3.6.0 -> 3.5.1")) << shown.out;
  EXPECT_THAT(shown.out, HasSubstr("has no attribute 'mul'")) << shown.out;

  square = kernels("square");
  ASSERT_EQ(square.size(), 2u) << square.dump(1);
  const auto& repaired = square[1];
  EXPECT_EQ(repaired.at("provenance").at("origin"), "repair");
  EXPECT_EQ(repaired.at("provenance").at("campaign_id"), id);
  auto proved = proof_on(repaired, old_fingerprint);
  ASSERT_TRUE(proved) << repaired.dump(1);
  EXPECT_EQ(proved->at("outcome"), "pass");
  EXPECT_EQ(proved->at("toolchain").at("triton"), "3.5.1");
  auto source = opforge({"kernels", "square", "--source"});
  EXPECT_THAT(source.out, HasSubstr("x * x"));
  EXPECT_THAT(source.out, Not(HasSubstr("tl.mul")));

  // The repaired kernel is validated on 3.6.0 too; the old one keeps its verdicts.
  ASSERT_TRUE(eventually([&] { return proof_on(kernels("square").at(1), new_fingerprint); }))
      << slurp(dir / "serve.err");
  square = kernels("square");
  EXPECT_EQ(proof_on(square[1], new_fingerprint)->at("outcome"), "pass");
  EXPECT_EQ(proof_on(square[0], new_fingerprint)->at("outcome"), "pass");
  EXPECT_EQ(proof_on(square[0], old_fingerprint)->at("outcome"), "runtime_error");
  EXPECT_TRUE(opforge_json({"repair"}).at("campaigns").empty()); // nothing left to repair
  // The regression stays listed (the old kernel still fails on 3.5.1), named as repaired, and
  // no longer counts as one that needs work.
  regressions = opforge_json({"regressions"});
  ASSERT_EQ(regressions.at("regressions").size(), 1u) << regressions.dump(1);
  EXPECT_EQ(regressions.at("regressions").at(0).at("served_by"), square[1].at("hash"));
  EXPECT_TRUE(eventually([&] {
    return opforge_json({"status"}).value("maintenance", json::object()).value("regressions", 1) ==
           0;
  })) << opforge_json({"status"}).dump(1);

  // 5. Export per toolchain: on each, the newest kernel proved there, the repair on both now.
  on_old = export_for(old_fingerprint, "old-repaired");
  EXPECT_THAT(exported_source(on_old, "square"), HasSubstr("x * x"));
  EXPECT_THAT(exported_source(on_old, "square"), Not(HasSubstr("tl.mul")));
  EXPECT_THAT(exported_source(on_old, "abs"), HasSubstr("tl.abs(x)"));
  on_new = export_for(new_fingerprint, "new-repaired");
  EXPECT_THAT(exported_source(on_new, "square"), HasSubstr("x * x"));

  EXPECT_EQ(opforge({"shutdown"}).code, 0);
  EXPECT_EQ(wait_for_daemon(), 0) << slurp(dir / "serve.err");
}
