// `opforge kernels` and `opforge export` against a real daemon whose store already holds a small
// library: two versions of `abs` (the newer one regressed on a second toolchain, Triton 3.5.1) and
// `max/binary`.
// The exporter itself lives in the worker package; here a stand-in interpreter records how the CLI
// runs it and keeps the bundle it was handed, which is decoded with the contract's codec.

#include "actors/library/kernels.hpp"
#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "persistence/keys.hpp"
#include "persistence/rocksdb_store.hpp"
#include "tests/cli_test_support.hpp"

#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using namespace opforge::cli_testing;
using json = nlohmann::json;
using ::testing::HasSubstr;

namespace {

kernel_record kernel(const std::string& op, const std::string& variant, const std::string& body,
                     int64_t accepted_ms) {
  kernel_record k;
  k.op = op;
  k.variant = variant;
  k.wrapper = op + "_wrapper";
  k.source = "def " + op + "_wrapper(x):\n    return " + body + "\n";
  k.dtypes = {"float32", "int64"};
  k.aten_overloads = {"aten::" + op, "aten::" + op + ".out"};
  k.origin = "campaign";
  k.campaign_id = "c1";
  k.model = "m";
  k.dialogs = 1;
  k.llm_calls = 2;
  k.tests_run = 8;
  k.tests_passed = 8;
  k.toolchain = "aaaaaaaaaaaaaaaa";
  k.toolchain_versions = {{"torch", "2.13.0"}, {"triton", "3.6.0"}};
  k.device_kind = "interpreter";
  k.accepted_at_ms = accepted_ms;
  return k;
}

class LibraryCli : public CliTest {
protected:
  void SetUp() override {
    CliTest::SetUp();
    old_abs = kernel("abs", "", "x.abs()", 1764000000000);
    new_abs = kernel("abs", "", "torch.where(x < 0, -x, x)", 1764000060000);
    max = kernel("max", "binary", "torch.maximum(x, x)", 1764000000000);
    fs::create_directories(data);
    auto db = open_rocksdb_store(data / "store");
    ASSERT_TRUE(db) << render(db.error());
    write_batch batch;
    for (const auto* k : {&old_abs, &new_abs, &max})
      for (auto& op : accept_kernel(*k))
        batch.ops.push_back(std::move(op));
    // A second toolchain where the newer `abs` regressed and the older one still passes.
    auto proof = acceptance_proof(old_abs);
    proof.fingerprint = "bbbbbbbbbbbbbbbb";
    proof.toolchain["triton"] = "3.5.1";
    proof.validated_at_ms += 120000;
    batch.ops.push_back(add_validation(content_hash(old_abs.source), proof));
    proof.outcome = contract::outcome::accuracy_error;
    proof.tests_passed = 5;
    proof.detail = "float32 sample_inputs #5: abs error 2 at [3]";
    batch.ops.push_back(add_validation(content_hash(new_abs.source), proof));
    ASSERT_FALSE((*db)->write(batch));
    ASSERT_FALSE((*db)->close());
    // The stand-in exporter: records its arguments, keeps the bundle, speaks on stderr and exits 3.
    auto script = write("python", "#!/bin/sh\nprintf '%s\\n' \"$@\" > '" + (dir / "argv").string() +
                                      "'\ncp \"$5\" '" + (dir / "bundle").string() +
                                      "'\necho 'exporter: wrote it' >&2\nexit 3\n");
    fs::permissions(script, fs::perms::owner_all);
    write("cli.yaml", "python: '" + script.string() + "'\n");
    serve();
  }

  // The stand-in exporter's arguments, the temporary bundle's path as FILE; and that path.
  std::pair<std::vector<std::string>, std::string> recorded_argv() const {
    std::vector<std::string> argv;
    std::istringstream lines{slurp(dir / "argv")};
    for (std::string line; std::getline(lines, line);)
      argv.push_back(line);
    std::string bundle;
    if (argv.size() > 4)
      bundle = std::exchange(argv[4], "FILE");
    return {argv, bundle};
  }

  outcome opforge(std::vector<std::string> args) {
    args.insert(args.end(), {"--config", (dir / "cli.yaml").string(), "--data-dir", data.string()});
    return run(args);
  }

  kernel_record old_abs, new_abs, max;
};

} // namespace

TEST_F(LibraryCli, KernelsListsEveryVersionWithItsValidations) {
  auto listed = opforge({"kernels"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  auto old_hash = content_hash(old_abs.source), new_hash = content_hash(new_abs.source);
  EXPECT_EQ(listed.out,
            "OPERATOR    VERSION  DEVICE       DTYPES          ORIGIN    ACCEPTED (UTC)    HASH"
            "              PROVED ON\n"
            "abs         1        interpreter  float32, int64  campaign  2025-11-24 16:00  " +
                old_hash +
                "  bbbbbbbbbbbbbbbb:pass, aaaaaaaaaaaaaaaa:pass\n"
                "abs         2*       interpreter  float32, int64  campaign  2025-11-24 16:01  " +
                new_hash +
                "  bbbbbbbbbbbbbbbb:accuracy_error, aaaaaaaaaaaaaaaa:pass\n"
                "max/binary  1*       interpreter  float32, int64  campaign  2025-11-24 16:00  " +
                content_hash(max.source) +
                "  aaaaaaaaaaaaaaaa:pass\n"
                "(* current: the operator's newest kernel accepted on that device kind)\n");

  auto max_only = opforge({"kernels", "max", "--json"});
  ASSERT_EQ(max_only.code, 0) << max_only.err;
  auto kernels = json::parse(max_only.out).at("kernels");
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].at("operator"), "max/binary");
  EXPECT_EQ(kernels[0].at("aten_overloads"), json({"aten::max", "aten::max.out"}));
  EXPECT_EQ(kernels[0].at("provenance").at("origin"), "campaign");
  EXPECT_EQ(kernels[0].at("proofs").at(0).at("toolchain"),
            json({{"torch", "2.13.0"}, {"triton", "3.6.0"}}));
  EXPECT_FALSE(kernels[0].contains("source"));

  auto none = opforge({"kernels", "sin"});
  EXPECT_EQ(none.code, 0);
  EXPECT_EQ(none.out, "no kernels for sin in the library\n");
}

TEST_F(LibraryCli, RegressionsNameTheKernelTheToolchainChangeAndBothVerdicts) {
  auto listed = opforge({"regressions"});
  ASSERT_EQ(listed.code, 0) << listed.err;
  auto new_hash = content_hash(new_abs.source);
  EXPECT_THAT(listed.out, HasSubstr("OPERATOR  HASH"));
  // The older `abs` passes on both toolchains, so it is no regression and it serves `abs` there;
  // `max` was never tried on the second.
  EXPECT_THAT(listed.out, HasSubstr("abs       " + new_hash +
                                    "  triton 3.6.0 -> 3.5.1  aaaaaaaaaaaaaaaa:pass (8/8)  "
                                    "bbbbbbbbbbbbbbbb:accuracy_error (5/8)  " +
                                    content_hash(old_abs.source) +
                                    "  float32 sample_inputs #5: abs error 2 at [3]\n"));
  EXPECT_THAT(listed.out, ::testing::Not(HasSubstr("max")));

  auto as_json = opforge({"regressions", "--json"});
  ASSERT_EQ(as_json.code, 0) << as_json.err;
  auto regressions = json::parse(as_json.out).at("regressions");
  ASSERT_EQ(regressions.size(), 1u);
  EXPECT_EQ(regressions[0].at("operator"), "abs");
  EXPECT_EQ(regressions[0].at("hash"), new_hash);
  EXPECT_EQ(regressions[0].at("change"), "triton 3.6.0 -> 3.5.1");
  EXPECT_EQ(regressions[0].at("before").at("outcome"), "pass");
  EXPECT_EQ(regressions[0].at("before").at("toolchain").at("triton"), "3.6.0");
  EXPECT_EQ(regressions[0].at("after").at("outcome"), "accuracy_error");
  EXPECT_EQ(regressions[0].at("after").at("fingerprint"), "bbbbbbbbbbbbbbbb");
  EXPECT_EQ(regressions[0].at("after").at("tests_passed"), 5);
  EXPECT_EQ(regressions[0].at("after").at("detail"),
            "float32 sample_inputs #5: abs error 2 at [3]");
  EXPECT_EQ(regressions[0].at("before").at("detail"), "");
  EXPECT_EQ(regressions[0].at("served_by"), content_hash(old_abs.source));
}

// The older `abs` still passes where the newer one regressed, so nothing needs repairing there
// (test_toolchain_repair runs a repair through real workers).
TEST_F(LibraryCli, RepairLeavesARegressionThatAnOlderKernelServes) {
  auto repaired = opforge({"repair"});
  ASSERT_EQ(repaired.code, 0) << repaired.err;
  EXPECT_EQ(repaired.out, "every regression is served on its toolchain by another kernel already: "
                          "nothing to repair\n");
  auto as_json = opforge({"repair", "--json"});
  ASSERT_EQ(as_json.code, 0) << as_json.err;
  auto reply = json::parse(as_json.out);
  EXPECT_EQ(reply.at("regressions"), 1);
  EXPECT_EQ(reply.at("campaigns"), json::array());
  auto elsewhere = opforge({"repair", "--fingerprint", "cccccccccccccccc"});
  ASSERT_EQ(elsewhere.code, 0) << elsewhere.err;
  EXPECT_EQ(elsewhere.out,
            "no regressions on toolchain cccccccccccccccc in the library: nothing to repair\n");
  auto campaigns = opforge({"campaigns"});
  EXPECT_EQ(campaigns.out, "no campaigns yet: start one with `opforge run`\n");
}

TEST_F(LibraryCli, KernelsSourcePrintsTheCurrentKernel) {
  auto source = opforge({"kernels", "abs", "--source"});
  ASSERT_EQ(source.code, 0) << source.err;
  EXPECT_EQ(source.out, new_abs.source);
  auto missing = opforge({"kernels", "sin", "--source"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err, "opforge: no kernel for sin in the library\n");
  auto no_op = opforge({"kernels", "--source"});
  EXPECT_EQ(no_op.code, 2);
  EXPECT_EQ(no_op.err, "opforge: --source needs OP, the operator whose kernel to print\n");
}

TEST_F(LibraryCli, ExportHandsTheExporterTheBundleAndPassesItsStatusThrough) {
  auto out = dir / "pkg";
  auto exported =
      opforge({"export", "--format", "torch-library", "--out", out.string(), "--name", "my_backend",
               "--dispatch-key", "PrivateUse1", "--fingerprint", "bbbbbbbbbbbbbbbb"});
  EXPECT_EQ(exported.code, 3) << exported.err;
  EXPECT_THAT(exported.err, HasSubstr("exporter: wrote it\n"));
  auto [argv, bundle_file] = recorded_argv();
  EXPECT_EQ(argv,
            (std::vector<std::string>{"-m", "opforge_library", "export", "--bundle", "FILE",
                                      "--format", "torch-library", "--out", out.string(), "--name",
                                      "my_backend", "--dispatch-key", "PrivateUse1"}));
  EXPECT_FALSE(fs::exists(bundle_file)) << "the temporary bundle outlived the export";

  auto bundle = wire::decode_as<contract::library_bundle>(slurp(dir / "bundle"), "bundle");
  ASSERT_TRUE(bundle) << render(bundle.error());
  EXPECT_EQ(bundle->device_kind, "interpreter"); // the campaigns' default device kind
  EXPECT_EQ(bundle->fingerprint, "bbbbbbbbbbbbbbbb");
  EXPECT_EQ(bundle->daemon_version, OPFORGE_VERSION);
  // On that toolchain the newer `abs` regressed: the older one is exported; `max` was never
  // validated there.
  ASSERT_EQ(bundle->kernels.size(), 1u);
  EXPECT_EQ(bundle->kernels[0].source, old_abs.source);
  EXPECT_EQ(bundle->kernels[0].aten_overloads, old_abs.aten_overloads);
  EXPECT_EQ(bundle->kernels[0].proofs.size(), 2u);

  auto newest = opforge({"export", "--format", "backendbench", "--out", out.string()});
  EXPECT_EQ(newest.code, 3) << newest.err;
  bundle = wire::decode_as<contract::library_bundle>(slurp(dir / "bundle"), "bundle");
  ASSERT_TRUE(bundle) << render(bundle.error());
  EXPECT_EQ(bundle->fingerprint, "");
  ASSERT_EQ(bundle->kernels.size(), 2u);
  EXPECT_EQ(bundle->kernels[0].source, new_abs.source);
  EXPECT_EQ(bundle->kernels[1].op, "max");
  EXPECT_EQ(recorded_argv().first,
            (std::vector<std::string>{"-m", "opforge_library", "export", "--bundle", "FILE",
                                      "--format", "backendbench", "--out", out.string()}));

  // The routing choices reach the exporter as given; absent, the exporter's defaults apply.
  auto routed = opforge({"export", "--format", "torch-library", "--out", out.string(),
                         "--launch-bound", "timed", "--untimed", "original", "--min-speedup",
                         "1.05", "--unmeasured", "kernel"});
  EXPECT_EQ(routed.code, 3) << routed.err;
  EXPECT_EQ(recorded_argv().first,
            (std::vector<std::string>{"-m", "opforge_library", "export", "--bundle", "FILE",
                                      "--format", "torch-library", "--out", out.string(),
                                      "--min-speedup", "1.05", "--untimed", "original",
                                      "--unmeasured", "kernel", "--launch-bound", "timed"}));
  auto unknown = opforge(
      {"export", "--format", "torch-library", "--out", out.string(), "--launch-bound", "kernel"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--launch-bound"));
}

TEST_F(LibraryCli, AnExportWithNothingToExportRunsNoExporter) {
  auto exported =
      opforge({"export", "--format", "backendbench", "--out", "x", "--device-kind", "cuda"});
  EXPECT_EQ(exported.code, 1);
  EXPECT_EQ(exported.err,
            "opforge: the library has no kernels for device kind cuda: nothing to export\n");
  EXPECT_FALSE(fs::exists(dir / "argv"));
  auto bad = opforge({"export", "--format", "wheel", "--out", "x"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--format"));
}
