// The campaigns that repair regressions, over the library's `list` reply as `opforge repair` and
// the maintenance actor read it, with the toolchains of the real drop (Triton 3.6.0 -> 3.5.1
// under one torch, worker/tests/test_toolchain_drop.py).

#include "actors/library/repair.hpp"
#include "messages/contract.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace opforge {
namespace {

using contract::outcome;
using ::testing::HasSubstr;

const std::string on_36 = "7ddb87fa1b81d26b";
const std::string on_351 = "1a1c5f2a38e568a5";
const std::map<std::string, std::string> triton_36{
    {"python", "3.11.7"}, {"torch", "2.13.0+cpu"}, {"triton", "3.6.0"}, {"device", "interpreter"}};
const std::map<std::string, std::string> triton_351{
    {"python", "3.11.7"}, {"torch", "2.13.0+cpu"}, {"triton", "3.5.1"}, {"device", "interpreter"}};

const std::string uses_tl_mul = "def square(input):\n    return tl.mul(x, x)\n";
const std::string sums = "def sum(input):\n    return tl.sum(x)\n";

contract::toolchain_proof proof(const std::string& fingerprint, outcome verdict, int64_t at_ms,
                                std::string detail = {}) {
  contract::toolchain_proof made;
  made.fingerprint = fingerprint;
  made.device_kind = "interpreter";
  made.toolchain = fingerprint == on_36 ? triton_36 : triton_351;
  made.outcome = verdict;
  made.tests_run = 3;
  made.tests_passed = verdict == outcome::pass ? 3 : 0;
  made.validated_at_ms = at_ms;
  made.detail = std::move(detail);
  return made;
}

kernel_version kernel(const std::string& op, const std::string& variant, const std::string& hash,
                      const std::string& source, uint32_t version,
                      std::vector<contract::toolchain_proof> proofs_newest_first) {
  kernel_version v;
  v.kernel.op = op;
  v.kernel.variant = variant;
  v.kernel.wrapper = op;
  v.kernel.source = source;
  v.kernel.hash = hash;
  v.kernel.dtypes = {contract::dtype::float32, contract::dtype::bfloat16};
  v.kernel.proofs = std::move(proofs_newest_first);
  v.version = version;
  v.device_kind = "interpreter";
  v.current = true;
  return v;
}

const std::string mul_missing =
    "float32: AttributeError: module 'triton.language' has no attribute 'mul'";

TEST(RepairCampaigns, OneCampaignPerRegressedFingerprintSeededWithTheKernelAndItsFailure) {
  std::vector<kernel_version> kernels{
      kernel("square", "", "aaaa000000000001", uses_tl_mul, 1,
             {proof(on_351, outcome::runtime_error, 2000, mul_missing),
              proof(on_36, outcome::pass, 1000)}),
      // Passes on both: nothing to repair.
      kernel("exp", "", "bbbb000000000002", "def exp(input): ...\n", 1,
             {proof(on_351, outcome::pass, 2000), proof(on_36, outcome::pass, 1000)}),
      kernel("sum", "dim", "cccc000000000003", sums, 1,
             {proof(on_351, outcome::accuracy_error, 2000, "float32 sample_inputs #1: mismatch"),
              proof(on_36, outcome::pass, 1000)}),
  };

  auto campaigns = repair_campaigns(find_regressions(kernels), kernels);

  ASSERT_EQ(campaigns.size(), 1u);
  const auto& c = campaigns[0];
  EXPECT_EQ(c.fingerprint, on_351);
  EXPECT_EQ(c.device_kind, "interpreter");
  // Seeds select the operators; a name would also select sum's other variants.
  EXPECT_TRUE(c.names.empty());
  EXPECT_EQ(c.dtypes, (std::vector<std::string>{"bfloat16", "float32"}));
  EXPECT_TRUE(c.endpoint.empty()); // the daemon's default unless `opforge repair --endpoint`
  ASSERT_EQ(c.seeds.size(), 2u);
  EXPECT_EQ(c.seeds[0].op, "square");
  EXPECT_EQ(c.seeds[0].variant, "");
  EXPECT_EQ(c.seeds[0].kernel, uses_tl_mul);
  EXPECT_EQ(c.seeds[0].feedback,
            "This kernel passed every test on the toolchain it was accepted on and fails since the "
            "toolchain changed (triton 3.6.0 -> 3.5.1).\n"
            "Its test ended runtime_error (0 of 3 samples passed).\n" +
                mul_missing +
                "\n"
                "Change it so that it works on the new toolchain.\n");
  EXPECT_EQ(c.seeds[1].op, "sum");
  EXPECT_EQ(c.seeds[1].variant, "dim");
  EXPECT_EQ(c.seeds[1].kernel, sums);
  EXPECT_THAT(c.seeds[1].feedback, HasSubstr("ended accuracy_error (0 of 3 samples passed).\n"
                                             "float32 sample_inputs #1: mismatch\n"));
}

TEST(RepairCampaigns, EachRegressedFingerprintGetsItsOwnCampaignPinnedThere) {
  const std::string on_cuda_drop = "c0c0c0c0c0c0c0c0";
  auto failed_on_cuda_drop = proof(on_cuda_drop, outcome::compile_error, 3000, "ptxas died");
  failed_on_cuda_drop.toolchain = triton_36;
  failed_on_cuda_drop.toolchain["cuda"] = "13.0";
  std::vector<kernel_version> kernels{
      kernel("square", "", "aaaa000000000001", uses_tl_mul, 1,
             {failed_on_cuda_drop, proof(on_351, outcome::runtime_error, 2000, mul_missing),
              proof(on_36, outcome::pass, 1000)}),
  };

  auto campaigns = repair_campaigns(find_regressions(kernels), kernels);

  ASSERT_EQ(campaigns.size(), 2u);
  std::set<std::string> fingerprints{campaigns[0].fingerprint, campaigns[1].fingerprint};
  EXPECT_EQ(fingerprints, (std::set<std::string>{on_351, on_cuda_drop}));
  for (const auto& c : campaigns) {
    ASSERT_EQ(c.seeds.size(), 1u);
    EXPECT_EQ(c.seeds[0].kernel, uses_tl_mul);
    if (c.fingerprint == on_cuda_drop)
      EXPECT_THAT(c.seeds[0].feedback, HasSubstr("(cuda none -> 13.0).\nIts test ended "
                                                 "compile_error (0 of 3 samples passed).\nptxas "
                                                 "died\n"));
  }
}

TEST(RepairCampaigns, ARegressionAlreadyServedOnItsToolchainIsNotRepairedAgain) {
  std::vector<kernel_version> kernels{
      kernel("square", "", "aaaa000000000001", uses_tl_mul, 1,
             {proof(on_351, outcome::runtime_error, 2000, mul_missing),
              proof(on_36, outcome::pass, 1000)}),
      // The repair: a newer version, origin repair, proved on 3.5.1.
      kernel("square", "", "dddd000000000004", "def square(input):\n    return x * x\n", 2,
             {proof(on_351, outcome::pass, 4000)}),
  };

  EXPECT_EQ(find_regressions(kernels).size(), 1u); // the old kernel still fails there
  EXPECT_TRUE(repair_campaigns(find_regressions(kernels), kernels).empty());
}

TEST(RepairCampaigns, OfSeveralRegressedVersionsTheNewestSeedsTheSession) {
  std::vector<kernel_version> kernels{
      kernel("square", "", "aaaa000000000001", uses_tl_mul, 1,
             {proof(on_351, outcome::runtime_error, 2000, mul_missing),
              proof(on_36, outcome::pass, 1000)}),
      kernel("square", "", "eeee000000000005",
             "def square(input):\n    return tl.mul(x, x)  # v2\n", 2,
             {proof(on_351, outcome::runtime_error, 2100, mul_missing),
              proof(on_36, outcome::pass, 1500)}),
  };

  auto campaigns = repair_campaigns(find_regressions(kernels), kernels);

  ASSERT_EQ(campaigns.size(), 1u);
  ASSERT_EQ(campaigns[0].seeds.size(), 1u);
  EXPECT_EQ(campaigns[0].seeds[0].kernel, kernels[1].kernel.source);
}

TEST(RepairCampaigns, NothingToRepairWithoutRegressionsOrWithoutTheirSources) {
  std::vector<kernel_version> kernels{
      kernel("square", "", "aaaa000000000001", uses_tl_mul, 1,
             {proof(on_351, outcome::runtime_error, 2000, mul_missing),
              proof(on_36, outcome::pass, 1000)}),
  };
  EXPECT_TRUE(repair_campaigns({}, kernels).empty());
  // A `list` without sources cannot seed a session.
  auto without_sources = kernels;
  without_sources[0].kernel.source.clear();
  EXPECT_TRUE(repair_campaigns(find_regressions(kernels), without_sources).empty());
}

contract::kernel_timing timing(const std::string& fingerprint, double kernel_us) {
  return {.fingerprint = fingerprint,
          .device_kind = "interpreter",
          .dtype = contract::dtype::float32,
          .shape_class = "n<=1M",
          .baseline = "aten",
          .kernel_us = kernel_us,
          .baseline_us = 40,
          .speedup = 40 / kernel_us,
          .noise = 0.02,
          .measured_at_ms = 1};
}

// A kernel that still passes on 3.5.1 but got slower there is repaired like a failing one, in the
// same campaign per fingerprint, told its times rather than a failure; once a faster version is
// timed there it is not repaired again.
TEST(RepairCampaigns, ASpeedRegressionIsSeededWithItsTimesOnBothToolchains) {
  auto slowed = kernel("square", "", "aaaa000000000001", uses_tl_mul, 1,
                       {proof(on_351, outcome::pass, 2000), proof(on_36, outcome::pass, 1000)});
  slowed.kernel.timings = {timing(on_36, 20), timing(on_351, 30)};
  auto broken = kernel(
      "sum", "", "bbbb000000000002", sums, 1,
      {proof(on_351, outcome::runtime_error, 2000, "boom"), proof(on_36, outcome::pass, 1000)});
  std::vector<kernel_version> kernels{slowed, broken};
  auto slower = find_speed_regressions(kernels, 0.10);
  ASSERT_EQ(slower.size(), 1u);
  auto campaigns = repair_campaigns(find_regressions(kernels), kernels, slower);
  ASSERT_EQ(campaigns.size(), 1u);
  EXPECT_EQ(campaigns[0].fingerprint, on_351);
  ASSERT_EQ(campaigns[0].seeds.size(), 2u);
  const auto& seed = campaigns[0].seeds[0]; // by operator id
  EXPECT_EQ(seed.op, "square");
  EXPECT_EQ(seed.kernel, uses_tl_mul);
  EXPECT_THAT(seed.feedback, HasSubstr("passes every test on the new toolchain (triton 3.6.0 -> "
                                       "3.5.1) but runs slower there"));
  EXPECT_THAT(seed.feedback, HasSubstr("- float32 n<=1M: 30.0 us, was 20.0 us (1.50x the time; "
                                       "noise 2% and 2%)"));
  EXPECT_THAT(seed.feedback, HasSubstr("kept only when it is timed faster there"));
  EXPECT_THAT(campaigns[0].seeds[1].feedback, HasSubstr("boom"));

  auto repaired = kernel("square", "", "cccc000000000003", "def square(input):\n    return x\n", 2,
                         {proof(on_351, outcome::pass, 3000)});
  repaired.kernel.timings = {timing(on_351, 18)};
  kernels.push_back(repaired);
  slower = find_speed_regressions(kernels, 0.10);
  ASSERT_EQ(slower.size(), 1u); // still listed, served
  auto again = repair_campaigns({}, kernels, slower);
  EXPECT_TRUE(again.empty());
}

} // namespace
} // namespace opforge
