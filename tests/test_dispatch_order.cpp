// The device manager's dispatch rule (dispatch_order): campaign jobs before background ones, and
// a background job that waited long enough before both, so maintenance always makes progress.

#include "actors/fleet/device_manager.hpp"

#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace opforge;
using testing::ElementsAre;

TEST(DispatchOrder, CampaignJobsGoBeforeBackgroundOnesInSubmissionOrder) {
  EXPECT_THAT(dispatch_order({{1, true, 10}, {2, false, 5}, {3, true, 3}, {4, false, 1}}, 30000),
              ElementsAre(2, 4, 1, 3));
}

TEST(DispatchOrder, ABackgroundJobThatWaitedLongEnoughGoesFirst) {
  EXPECT_THAT(
      dispatch_order({{1, false, 40000}, {2, true, 29999}, {3, true, 30000}, {4, false, 0}}, 30000),
      ElementsAre(3, 1, 4, 2));
}

TEST(DispatchOrder, UnderSteadyCampaignLoadEveryBackgroundJobEventuallyRuns) {
  // One free slot every second, and a new campaign job each second: without the rule the
  // background job would wait for ever.
  std::vector<queued_job> queue{{1, true, 0}};
  uint64_t next = 2;
  int64_t ran_at_s = -1;
  for (int64_t second = 0; second < 120 && ran_at_s < 0; ++second) {
    queue.push_back({next++, false, 0});
    auto first = dispatch_order(queue, 30000).front();
    if (first == 1)
      ran_at_s = second;
    std::erase_if(queue, [&](const queued_job& job) { return job.seq == first; });
    for (auto& job : queue)
      job.waited_ms += 1000;
  }
  EXPECT_EQ(ran_at_s, 30);
}

TEST(DispatchOrder, AnEmptyQueueHasNothingToOffer) {
  EXPECT_TRUE(dispatch_order({}, 0).empty());
}
