//===- PipelineScheduleTest.cpp - Pipeline schedules and their costs ------===//

#include "stpar/Cost/PipelineSchedule.h"

#include "gtest/gtest.h"

using namespace stpar::cost;

namespace {

std::vector<std::string> names(const std::vector<ScheduleSlot> &list,
                               bool chunks) {
  std::vector<std::string> out;
  for (const ScheduleSlot &s : list)
    out.push_back(s.str(chunks));
  return out;
}

std::vector<std::vector<ScheduleSlot>> build(ScheduleShape shape) {
  auto r = buildSchedule(shape);
  EXPECT_TRUE(bool(r)) << llvm::toString(r.takeError());
  return r ? *r : std::vector<std::vector<ScheduleSlot>>{};
}

// PipeDream-Flush / Megatron 1F1B with p = 2, m = 4 (SC'21 Fig. 4 top, two
// ranks): rank 0 warms up with one forward, rank 1 with none.
TEST(PipelineSchedule, OneFOneBLists) {
  auto ranks = build({ScheduleKind::OneFOneB, 2, 4, 1});
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(names(ranks[0], false),
            (std::vector<std::string>{"F0", "F1", "B0", "F2", "B1", "F3", "B2",
                                      "B3"}));
  EXPECT_EQ(names(ranks[1], false),
            (std::vector<std::string>{"F0", "B0", "F1", "B1", "F2", "B2", "F3",
                                      "B3"}));
}

TEST(PipelineSchedule, GPipeLists) {
  auto ranks = build({ScheduleKind::GPipe, 2, 3, 1});
  EXPECT_EQ(names(ranks[1], false),
            (std::vector<std::string>{"F0", "F1", "F2", "B0", "B1", "B2"}));
}

// Interleaved, p = 2, v = 2, m = 4: forwards in groups of p through chunk
// 0 then chunk 1; rank 0 warms up with (p - 1) * 2 + (v - 1) * p = 4.
TEST(PipelineSchedule, InterleavedLists) {
  auto ranks = build({ScheduleKind::Interleaved, 2, 4, 2});
  EXPECT_EQ(
      names(ranks[0], true),
      (std::vector<std::string>{"F0.0", "F1.0", "F0.1", "F1.1", "F2.0", "B0.1",
                                "F3.0", "B1.1", "F2.1", "B0.0", "F3.1", "B1.0",
                                "B2.1", "B3.1", "B2.0", "B3.0"}));
}

// The closed forms the cost model charges equal what the lists take:
// F = 1, B = 2 per micro-batch and stage; every rank idles exactly the
// bubble's slots x (F + B), and keeps getInFlight micro-batches.
TEST(PipelineSchedule, BubbleAndInFlightMatchTheSimulation) {
  unsigned cases = 0;
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
    for (int64_t p : {1, 2, 3, 4, 8})
      for (int64_t m : {1, 2, 4, 8, 16, 24})
        for (int64_t v : {1, 2, 3, 4}) {
          ScheduleShape shape{kind, p, m, v};
          auto ranks = buildSchedule(shape);
          if (!ranks) {
            llvm::consumeError(ranks.takeError());
            continue;
          }
          auto run = simulateSchedule(shape, *ranks, 1.0, 2.0);
          ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
          double bubble = getBubbleSlots(shape) * 3.0;
          for (int64_t r = 0; r < p; ++r) {
            EXPECT_NEAR(run->idle[r], bubble, 1e-9)
                << getScheduleName(kind).str() << " p=" << p << " m=" << m
                << " v=" << v << " rank " << r;
            EXPECT_NEAR(run->peakInFlight[r], getInFlight(shape, r), 1e-9)
                << getScheduleName(kind).str() << " p=" << p << " m=" << m
                << " v=" << v << " rank " << r;
          }
          ++cases;
        }
  EXPECT_GT(cases, 80u);
}

TEST(PipelineSchedule, Errors) {
  auto bad = [](ScheduleShape s) {
    auto r = buildSchedule(s);
    if (r)
      return std::string();
    return llvm::toString(r.takeError());
  };
  EXPECT_NE(bad({ScheduleKind::Interleaved, 4, 6, 2}).find("not a multiple"),
            std::string::npos);
  EXPECT_NE(bad({ScheduleKind::OneFOneB, 4, 8, 2}).find("one model chunk"),
            std::string::npos);
  EXPECT_NE(bad({ScheduleKind::Interleaved, 4, 8, 1}).find("v >= 2"),
            std::string::npos);
  EXPECT_NE(bad({ScheduleKind::GPipe, 0, 8, 1}).find(">= 1"),
            std::string::npos);
  // A list that waits on itself deadlocks; one that drops a slot is
  // refused.
  ScheduleShape s{ScheduleKind::OneFOneB, 2, 2, 1};
  auto ranks = build(s);
  std::swap(ranks[1][0], ranks[1][1]); // B0 before F0 on the last rank
  auto run = simulateSchedule(s, ranks, 1, 2);
  ASSERT_FALSE(bool(run));
  EXPECT_NE(llvm::toString(run.takeError()).find("deadlocks"),
            std::string::npos);
  ranks = build(s);
  ranks[0].pop_back();
  run = simulateSchedule(s, ranks, 1, 2);
  ASSERT_FALSE(bool(run));
  EXPECT_NE(llvm::toString(run.takeError()).find("slots, not"),
            std::string::npos);
}

} // namespace
