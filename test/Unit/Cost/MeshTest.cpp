//===- MeshTest.cpp - mesh placement without MLIR -------------------------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// The same cases as test/Transforms/print-mesh-placement.mlir, through the
// Cost library's reimplementation of MeshAttr::getAxisPlacement.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Mesh.h"

#include <gtest/gtest.h>

using namespace stpar::cost;

static AxisPlacement make(int64_t intra, int64_t inter, bool regular = true) {
  AxisPlacement p;
  p.intraNodeSize = intra;
  p.interNodeSize = inter;
  p.regular = regular;
  return p;
}

TEST(MeshTest, TwoDGXNodes) {
  // 2 nodes x 8: "dp" = 2 (stride 8) crosses nodes, "tp" = 8 stays inside.
  Mesh mesh{{{"dp", 2}, {"tp", 8}}};
  EXPECT_EQ(mesh.getStride(0), 8);
  EXPECT_EQ(mesh.getStride(1), 1);
  EXPECT_EQ(mesh.getPlacement(0, 8), make(1, 2));
  EXPECT_EQ(mesh.getPlacement(1, 8), make(8, 1));
}

TEST(MeshTest, PrimeParTestbedHierarchical) {
  // 8 nodes x 4 V100: "x" = 4 (stride 8) inter-node only; "y" = 8 (stride
  // 1) spans 4 devices of a node x 2 nodes.
  Mesh mesh{{{"x", 4}, {"y", 8}}};
  EXPECT_EQ(mesh.getPlacement(0, 4), make(1, 4));
  EXPECT_EQ(mesh.getPlacement(1, 4), make(4, 2));
  EXPECT_TRUE(mesh.getPlacement(1, 4).crossesIntraNode());
  EXPECT_TRUE(mesh.getPlacement(1, 4).crossesInterNode());
}

TEST(MeshTest, IrregularAndSizeOne) {
  // Nodes of 8, mesh [a=8, b=3, one=1]: groups of 3 straddle nodes.
  Mesh mesh{{{"a", 8}, {"b", 3}, {"one", 1}}};
  EXPECT_EQ(mesh.getStride(0), 3);
  EXPECT_EQ(mesh.getPlacement(0, 8), make(1, 8, false));
  EXPECT_EQ(mesh.getPlacement(1, 8), make(1, 3, false));
  EXPECT_EQ(mesh.getPlacement(2, 8), make(1, 1));
  EXPECT_FALSE(mesh.getPlacement(2, 8).crossesInterNode());
}

TEST(MeshTest, MegatronOrder) {
  // ["pp"=4, "dp"=4, "tp"=8] on nodes of 8: tp fills a node, dp and pp
  // cross nodes (strides 8 and 32).
  Mesh mesh{{{"pp", 4}, {"dp", 4}, {"tp", 8}}};
  EXPECT_EQ(mesh.getNumDevices(), 128);
  EXPECT_EQ(*mesh.findAxis("dp"), 1u);
  EXPECT_FALSE(mesh.findAxis("ep").has_value());
  EXPECT_EQ(mesh.getPlacement(0, 8), make(1, 4));
  EXPECT_EQ(mesh.getPlacement(1, 8), make(1, 4));
  EXPECT_EQ(mesh.getPlacement(2, 8), make(8, 1));
  // tp = 2 on nodes of 8 with dp = 8: dp (stride 2) has 4 per node x 2.
  Mesh small{{{"dp", 8}, {"tp", 2}}};
  EXPECT_EQ(small.getPlacement(0, 8), make(4, 2));
}
