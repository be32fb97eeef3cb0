//===- CollectivesTest.cpp - ring volumes and alpha-beta times ------------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Hand-computed values on dgx-a100-80g-2: NVSwitch 300 GB/s one way, 5 us;
// InfiniBand 25 GB/s per GPU one way, 10 us.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Collectives.h"

#include <gtest/gtest.h>

using namespace stpar::cost;

namespace {
Cluster dgx() {
  llvm::Expected<Cluster> c = getPreset("dgx-a100-80g-2");
  EXPECT_TRUE(bool(c));
  return *c;
}
AxisPlacement place(int64_t intra, int64_t inter, bool regular = true) {
  AxisPlacement p;
  p.intraNodeSize = intra;
  p.interNodeSize = inter;
  p.regular = regular;
  return p;
}
} // namespace

TEST(CollectivesTest, RingVolumes) {
  // S = 1000 bytes over p = 4: all-reduce 2*3/4*1000 = 1500 B in 6 steps;
  // all-gather / reduce-scatter / all-to-all 750 B in 3 steps; shift and
  // point-to-point 1000 B in 1 step; nothing over 1 device.
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::AllReduce, 1000, 4), 1500);
  EXPECT_EQ(getRingSteps(Collective::AllReduce, 4), 6);
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::AllGather, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::ReduceScatter, 1000, 4), 750);
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::AllToAll, 1000, 4), 750);
  EXPECT_EQ(getRingSteps(Collective::AllToAll, 4), 3);
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::RingShift, 1000, 4), 1000);
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::PointToPoint, 1000, 4), 1000);
  EXPECT_EQ(getRingSteps(Collective::RingShift, 4), 1);
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::AllReduce, 1000, 1), 0);
}

TEST(CollectivesTest, IntraNodeAllReduce) {
  // 1e9 B over 8 GPUs of a node: 14 * 5 us + 1.75e9 B / 3e11 B/s
  // = 7e-5 s + 5.8333e-3 s = 5.90333e-3 s.
  EXPECT_NEAR(getCollectiveTime(Collective::AllReduce, 1e9, place(8, 1), dgx()),
              5.903333e-3, 1e-9);
}

TEST(CollectivesTest, InterNodeAllGather) {
  // Gathered output 8e8 B over 4 nodes: 3 * 10 us + 6e8 B / 2.5e10 B/s
  // = 3e-5 + 0.024 = 0.02403 s.
  EXPECT_NEAR(getCollectiveTime(Collective::AllGather, 8e8, place(1, 4), dgx()),
              0.02403, 1e-9);
}

TEST(CollectivesTest, HierarchicalAllReduce) {
  // 1e9 B over 8 GPUs x 2 nodes: reduce-scatter inside (7 * 5 us +
  // 8.75e8 / 3e11 = 2.951667e-3 s), all-reduce of 1.25e8 B across 2 nodes
  // (2 * 10 us + 1.25e8 / 2.5e10 = 5.02e-3 s), all-gather inside
  // (2.951667e-3 s): 0.010923333 s.
  EXPECT_NEAR(getCollectiveTime(Collective::AllReduce, 1e9, place(8, 2), dgx()),
              0.010923333, 1e-8);
}

TEST(CollectivesTest, HierarchicalAllToAllAndShift) {
  // 8e8 B send buffer over 8 x 2: intra 7 * 5 us + 8e8 * 7/16 / 3e11
  // = 1.2016667e-3 s; inter 10 us + 8e8 / 2 / 2.5e10 = 0.01601 s.
  EXPECT_NEAR(getCollectiveTime(Collective::AllToAll, 8e8, place(8, 2), dgx()),
              0.017211667, 1e-8);
  // A shift of 1e8 B inside a node: 5 us + 1e8 / 3e11 = 3.383333e-4 s;
  // across nodes (slowest level): 10 us + 1e8 / 2.5e10 = 4.01e-3 s.
  EXPECT_NEAR(getCollectiveTime(Collective::RingShift, 1e8, place(4, 1), dgx()),
              3.383333e-4, 1e-9);
  EXPECT_NEAR(getCollectiveTime(Collective::RingShift, 1e8, place(4, 2), dgx()),
              4.01e-3, 1e-9);
}

TEST(CollectivesTest, IrregularIsInterNode) {
  // Irregular axis of 3: flat inter-node ring, all-reduce of 3e8 B:
  // 4 * 10 us + 2 * 2/3 * 3e8 / 2.5e10 = 4e-5 + 0.016 = 0.01604 s.
  EXPECT_NEAR(
      getCollectiveTime(Collective::AllReduce, 3e8, place(1, 3, false), dgx()),
      0.01604, 1e-9);
  EXPECT_EQ(getCollectiveTime(Collective::AllReduce, 3e8, place(1, 1), dgx()),
            0);
}

TEST(CollectivesTest, BroadcastAndReduceAreChains) {
  // FasterMoE's shadowing (Sec. 4.1) moves a shadowed expert's weights from
  // its owner and its gradient back as pipelined chains: every device
  // sends S once, P - 1 start-ups. 1e8 B over 4 GPUs of a node:
  // 3 * 5 us + 1e8 / 3e11 = 3.483333e-4 s; over 4 x 2 (slowest level):
  // 7 * 10 us + 1e8 / 2.5e10 = 4.07e-3 s.
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::Broadcast, 1000, 4), 1000);
  EXPECT_DOUBLE_EQ(getRingVolume(Collective::Reduce, 1000, 4), 1000);
  EXPECT_EQ(getRingSteps(Collective::Broadcast, 4), 3);
  EXPECT_NEAR(getCollectiveTime(Collective::Broadcast, 1e8, place(4, 1), dgx()),
              3.483333e-4, 1e-9);
  EXPECT_NEAR(getCollectiveTime(Collective::Reduce, 1e8, place(4, 2), dgx()),
              4.07e-3, 1e-9);
  EXPECT_EQ(getCollectiveName(Collective::Reduce), "reduce");
}
