// Regressions and pending re-validation over the library's kernels, with the toolchains of the
// real drop that worker/tests/test_toolchain_drop.py runs: Triton 3.6.0 and 3.5.1 under one torch.

#include "actors/library/regressions.hpp"
#include "messages/contract.hpp"

#include <gtest/gtest.h>

namespace opforge {
namespace {

const std::map<std::string, std::string> triton_36{
    {"python", "3.11.7"}, {"torch", "2.13.0+cpu"}, {"triton", "3.6.0"}, {"device", "interpreter"}};
const std::map<std::string, std::string> triton_351{
    {"python", "3.11.7"}, {"torch", "2.13.0+cpu"}, {"triton", "3.5.1"}, {"device", "interpreter"}};

contract::toolchain_proof proof(const std::string& fingerprint,
                                const std::map<std::string, std::string>& toolchain,
                                contract::outcome outcome, int64_t at_ms) {
  contract::toolchain_proof made;
  made.fingerprint = fingerprint;
  made.device_kind = "interpreter";
  made.toolchain = toolchain;
  made.outcome = outcome;
  made.tests_run = 3;
  made.tests_passed = outcome == contract::outcome::pass ? 3 : 1;
  made.validated_at_ms = at_ms;
  return made;
}

kernel_version kernel(const std::string& op, const std::string& hash,
                      std::vector<contract::toolchain_proof> proofs_newest_first) {
  kernel_version version;
  version.kernel.op = op;
  version.kernel.wrapper = op;
  version.kernel.hash = hash;
  version.kernel.proofs = std::move(proofs_newest_first);
  version.device_kind = "interpreter";
  version.current = true;
  return version;
}

TEST(ToolchainChange, NamesEachComponentThatDiffersInWords) {
  EXPECT_EQ(toolchain_change(triton_36, triton_351), "triton 3.6.0 -> 3.5.1");
  EXPECT_EQ(toolchain_change(triton_36, triton_36), "");
  auto with_cuda = triton_351;
  with_cuda["cuda"] = "12.8";
  with_cuda["torch"] = "2.12.0";
  EXPECT_EQ(toolchain_change(triton_36, with_cuda),
            "cuda none -> 12.8, torch 2.13.0+cpu -> 2.12.0, triton 3.6.0 -> 3.5.1");
}

TEST(FindRegressions, AKernelThatPassedBeforeAndFailsOnTheNewToolchain) {
  using contract::outcome;
  std::vector<kernel_version> kernels{
      // Uses tl.mul: passes on 3.6, fails on 3.5.1.
      kernel("square", "aaaa000000000001",
             {proof("1a1c5f2a38e568a5", triton_351, outcome::runtime_error, 2000),
              proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 1000)}),
      // Passes on both.
      kernel("exp", "bbbb000000000002",
             {proof("1a1c5f2a38e568a5", triton_351, outcome::pass, 2000),
              proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 1000)}),
      // Never passed anywhere: broken, not regressed.
      kernel("neg", "cccc000000000003",
             {proof("1a1c5f2a38e568a5", triton_351, outcome::accuracy_error, 2000)}),
      // Failed once on 3.5.1, then passed there again: its newest verdict there counts.
      kernel("clone", "dddd000000000004",
             {proof("1a1c5f2a38e568a5", triton_351, outcome::pass, 3000),
              proof("1a1c5f2a38e568a5", triton_351, outcome::timeout, 2000),
              proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 1000)}),
  };

  auto found = find_regressions(kernels);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].op, "square");
  EXPECT_EQ(found[0].hash, "aaaa000000000001");
  EXPECT_EQ(found[0].change, "triton 3.6.0 -> 3.5.1");
  EXPECT_EQ(found[0].before.fingerprint, "7ddb87fa1b81d26b");
  EXPECT_EQ(found[0].before.outcome, outcome::pass);
  EXPECT_EQ(found[0].after.fingerprint, "1a1c5f2a38e568a5");
  EXPECT_EQ(found[0].after.outcome, outcome::runtime_error);
  EXPECT_EQ(found[0].served_by, "");
}

TEST(FindRegressions, StaysListedAfterItsRepairNamingTheKernelThatPassesThere) {
  using contract::outcome;
  auto regressed = kernel("square", "aaaa000000000001",
                          {proof("1a1c5f2a38e568a5", triton_351, outcome::runtime_error, 2000),
                           proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 1000)});
  // Another operator's kernel that passes on 3.5.1 repairs nothing of square's.
  auto other_op = kernel("exp", "bbbb000000000002",
                         {proof("1a1c5f2a38e568a5", triton_351, outcome::pass, 2500)});
  auto repair = kernel("square", "eeee000000000005",
                       {proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 3500),
                        proof("1a1c5f2a38e568a5", triton_351, outcome::pass, 3000)});
  // A repair that then failed there again is no repair.
  auto failed_repair = kernel("square", "ffff000000000006",
                              {proof("1a1c5f2a38e568a5", triton_351, outcome::timeout, 4000),
                               proof("1a1c5f2a38e568a5", triton_351, outcome::pass, 3000)});

  auto before = find_regressions({regressed, other_op, failed_repair});
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(before[0].served_by, "");

  auto after = find_regressions({regressed, other_op, failed_repair, repair});
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].hash, "aaaa000000000001");
  EXPECT_EQ(after[0].served_by, "eeee000000000005");
}

TEST(FindRegressions, AFailureOlderThanThePassIsNoRegression) {
  using contract::outcome;
  // Failed on 3.5.1 first, then was repaired and passed on 3.6: that is progress.
  auto found =
      find_regressions({kernel("square", "aaaa000000000001",
                               {proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 2000),
                                proof("1a1c5f2a38e568a5", triton_351, outcome::crash, 1000)})});
  EXPECT_TRUE(found.empty());
}

TEST(PendingValidations, KernelsWithoutAVerdictOnTheFingerprintOnceEach) {
  using contract::outcome;
  std::vector<kernel_version> kernels{
      kernel("square", "aaaa000000000001",
             {proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 1000)}),
      kernel("exp", "bbbb000000000002",
             {proof("1a1c5f2a38e568a5", triton_351, outcome::accuracy_error, 2000),
              proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 1000)}),
      kernel("square", "aaaa000000000001",
             {proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 1000)}),
      kernel("neg", "cccc000000000003",
             {proof("7ddb87fa1b81d26b", triton_36, outcome::pass, 1000)}),
  };
  kernels.back().device_kind = "cuda";

  // A verdict, failing or not, is done work: after a restart only the rest is pending.
  EXPECT_EQ(pending_validations(kernels, "interpreter", "1a1c5f2a38e568a5"),
            std::vector<std::string>{"aaaa000000000001"});
  EXPECT_EQ(pending_validations(kernels, "interpreter", "7ddb87fa1b81d26b"),
            std::vector<std::string>{});
  EXPECT_EQ(pending_validations(kernels, "cuda", "1a1c5f2a38e568a5"),
            std::vector<std::string>{"cccc000000000003"});
  // Re-validation asked by hand at 1500: the verdicts made before it no longer count.
  EXPECT_EQ(pending_validations(kernels, "interpreter", "7ddb87fa1b81d26b", 1500),
            (std::vector<std::string>{"aaaa000000000001", "bbbb000000000002"}));
  EXPECT_EQ(pending_validations(kernels, "interpreter", "1a1c5f2a38e568a5", 1500),
            std::vector<std::string>{"aaaa000000000001"});
}

} // namespace
} // namespace opforge
