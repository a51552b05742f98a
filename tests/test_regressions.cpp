// Regressions, speed regressions and pending re-validation and timing over the library's kernels,
// with the toolchains of the real drop that worker/tests/test_toolchain_drop.py runs: Triton 3.6.0
// and 3.5.1 under one torch.

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

constexpr const char* on_36 = "7ddb87fa1b81d26b";
constexpr const char* on_351 = "1a1c5f2a38e568a5";

contract::kernel_timing timing(const std::string& fingerprint, const std::string& shape_class,
                               double kernel_us, double noise, bool launch_bound = false) {
  return {.fingerprint = fingerprint,
          .device_kind = "interpreter",
          .dtype = contract::dtype::float32,
          .shape_class = shape_class,
          .baseline = "aten",
          .kernel_us = kernel_us,
          .baseline_us = 50,
          .speedup = 50 / kernel_us,
          .noise = noise,
          .launch_bound = launch_bound,
          .measured_at_ms = 1};
}

// Passed on 3.6.0 (at 1000), then on 3.5.1 (at 2000), timed on both.
kernel_version timed_kernel(const std::string& op, const std::string& hash,
                            std::vector<contract::kernel_timing> timings) {
  using contract::outcome;
  auto k = kernel(op, hash,
                  {proof(on_351, triton_351, outcome::pass, 2000),
                   proof(on_36, triton_36, outcome::pass, 1000)});
  k.kernel.timings = std::move(timings);
  return k;
}

// The threshold is 10%, and each side's noise widens it: 3.5.1's time must stay above 1.1 times
// 3.6.0's even at the low end of its spread and the high end of 3.6.0's.
TEST(FindSpeedRegressions, SlowerBeyondTheThresholdAndTheNoiseOfBothOnly) {
  std::vector<kernel_version> kernels{
      // 20 -> 30 us with 2% noise each: 29.4 > 22.44.
      timed_kernel("square", "aaaa000000000001",
                   {timing(on_36, "n<=1M", 20, 0.02), timing(on_351, "n<=1M", 30, 0.02),
                    // 2x slower but launch-bound: a launch measured, not the kernel.
                    timing(on_36, "n<=4K", 4, 0.01, true), timing(on_351, "n<=4K", 8, 0.01, true),
                    // Faster on 3.5.1.
                    timing(on_36, "n<=16M", 300, 0.01), timing(on_351, "n<=16M", 200, 0.01)}),
      // 20 -> 25 us is 25% slower, but with 10% noise each 22.5 < 24.2: within the noise.
      timed_kernel("exp", "bbbb000000000002",
                   {timing(on_36, "n<=1M", 20, 0.1), timing(on_351, "n<=1M", 25, 0.1)}),
      // 20 -> 22.5 us with no noise: 12.5% slower, just beyond 10%.
      timed_kernel("neg", "cccc000000000003",
                   {timing(on_36, "n<=1M", 20, 0), timing(on_351, "n<=1M", 22.5, 0)}),
      // 20 -> 21.9 us with no noise: 9.5%, within the threshold.
      timed_kernel("abs", "dddd000000000004",
                   {timing(on_36, "n<=1M", 20, 0), timing(on_351, "n<=1M", 21.9, 0)}),
      // Timed on one toolchain only: nothing to compare.
      timed_kernel("sin", "eeee000000000005", {timing(on_351, "n<=1M", 99, 0)}),
  };
  auto found = find_speed_regressions(kernels, 0.10);
  ASSERT_EQ(found.size(), 2u);
  const auto& square = found[0];
  EXPECT_EQ(square.op, "square");
  EXPECT_EQ(square.hash, "aaaa000000000001");
  EXPECT_EQ(square.change, "triton 3.6.0 -> 3.5.1");
  EXPECT_EQ(square.before.fingerprint, on_36);
  EXPECT_EQ(square.after.fingerprint, on_351);
  ASSERT_EQ(square.slower.size(), 1u);
  EXPECT_EQ(square.slower[0].after.shape_class, "n<=1M");
  EXPECT_DOUBLE_EQ(square.slower[0].before.kernel_us, 20);
  EXPECT_DOUBLE_EQ(square.slower[0].after.kernel_us, 30);
  EXPECT_DOUBLE_EQ(square.slower[0].ratio, 1.5);
  EXPECT_EQ(square.served_by, "");
  EXPECT_EQ(found[1].op, "neg");
  // A looser threshold lets 12.5% pass; a stricter one catches 9.5%.
  EXPECT_EQ(find_speed_regressions(kernels, 0.20).size(), 1u);
  EXPECT_EQ(find_speed_regressions(kernels, 0.05).size(), 3u);
}

TEST(FindSpeedRegressions, TheSlowestClassFirstAndOnlyWhereTheKernelStillPasses) {
  using contract::outcome;
  auto square = timed_kernel("square", "aaaa000000000001",
                             {timing(on_36, "n<=1M", 20, 0), timing(on_351, "n<=1M", 30, 0),
                              timing(on_36, "n<=16M", 100, 0), timing(on_351, "n<=16M", 300, 0)});
  auto found = find_speed_regressions({square}, 0.10);
  ASSERT_EQ(found.size(), 1u);
  ASSERT_EQ(found[0].slower.size(), 2u);
  EXPECT_EQ(found[0].slower[0].after.shape_class, "n<=16M");
  EXPECT_DOUBLE_EQ(found[0].slower[0].ratio, 3);
  // Failing on 3.5.1 since: a correctness regression, not a speed one.
  square.kernel.proofs.insert(square.kernel.proofs.begin(),
                              proof(on_351, triton_351, outcome::accuracy_error, 3000));
  EXPECT_TRUE(find_speed_regressions({square}, 0.10).empty());
  EXPECT_EQ(find_regressions({square}).size(), 1u);
}

TEST(FindSpeedRegressions, ServedOnceAnotherVersionThatPassesThereIsTimedFasterThere) {
  auto regressed = timed_kernel("square", "aaaa000000000001",
                                {timing(on_36, "n<=1M", 20, 0), timing(on_351, "n<=1M", 30, 0)});
  // A repair as slow as the regressed kernel on 3.5.1 serves nothing.
  auto as_slow = timed_kernel("square", "ffff000000000006", {timing(on_351, "n<=1M", 30, 0)});
  auto found = find_speed_regressions({regressed, as_slow}, 0.10);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].served_by, "");
  // One faster there does, and stays listed against the regressed kernel.
  auto faster = timed_kernel("square", "9999000000000007", {timing(on_351, "n<=1M", 25, 0)});
  found = find_speed_regressions({regressed, as_slow, faster}, 0.10);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].served_by, "9999000000000007");
  // Another operator's faster kernel serves nothing of it.
  faster.kernel.op = "cube";
  EXPECT_EQ(find_speed_regressions({regressed, faster}, 0.10).at(0).served_by, "");
}

TEST(PendingTimings, KernelsPassingOnTheFingerprintWithoutATimingThereOnceEach) {
  using contract::outcome;
  std::vector<kernel_version> kernels{
      kernel("square", "aaaa000000000001", {proof(on_36, triton_36, outcome::pass, 1000)}),
      kernel("exp", "bbbb000000000002",
             {proof(on_351, triton_351, outcome::accuracy_error, 2000),
              proof(on_36, triton_36, outcome::pass, 1000)}),
      kernel("square", "aaaa000000000001", {proof(on_36, triton_36, outcome::pass, 1000)}),
      kernel("neg", "cccc000000000003", {proof(on_36, triton_36, outcome::pass, 1000)}),
  };
  kernels[1].kernel.timings = {timing(on_36, "n<=1M", 10, 0)}; // measured at 1
  kernels.back().device_kind = "cuda";
  EXPECT_EQ(pending_timings(kernels, "interpreter", on_36),
            std::vector<std::string>{"aaaa000000000001"});
  // No pass there yet, or a failure: nothing to time.
  EXPECT_EQ(pending_timings(kernels, "interpreter", on_351), std::vector<std::string>{});
  EXPECT_EQ(pending_timings(kernels, "cuda", on_36), std::vector<std::string>{"cccc000000000003"});
  // Asked by hand at 500: the timing from before does not count, the verdict from after does.
  EXPECT_EQ(pending_timings(kernels, "interpreter", on_36, 500),
            (std::vector<std::string>{"aaaa000000000001", "bbbb000000000002"}));
  // Asked at 1500: the verdicts are older too, so re-validation comes first.
  EXPECT_EQ(pending_timings(kernels, "interpreter", on_36, 1500), std::vector<std::string>{});
}

} // namespace
} // namespace opforge
