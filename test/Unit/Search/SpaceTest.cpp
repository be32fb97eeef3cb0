//===- SpaceTest.cpp - mesh factorizations and partition spaces -----------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/Space.h"
#include "stpar/Search/GPTProblem.h"

#include "gtest/gtest.h"

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;

namespace {

TEST(MeshShapes, HandCountedFactorizations) {
  // 8: [8] [2,4] [4,2] [2,2,2].
  EXPECT_EQ(enumerateMeshShapes(8, 3).size(), 4u);
  // 12: [12] [2,6] [6,2] [3,4] [4,3] [2,2,3] [2,3,2] [3,2,2].
  auto twelve = enumerateMeshShapes(12, 3);
  EXPECT_EQ(twelve.size(), 8u);
  EXPECT_NE(std::find(twelve.begin(), twelve.end(),
                      std::vector<int64_t>{3, 4}),
            twelve.end());
  EXPECT_NE(std::find(twelve.begin(), twelve.end(),
                      std::vector<int64_t>{2, 3, 2}),
            twelve.end());
  // 16 with at most two axes: [16] [2,8] [8,2] [4,4].
  EXPECT_EQ(enumerateMeshShapes(16, 2).size(), 4u);
  // 32 = 2^5: the compositions of 5, 2^4 = 16.
  EXPECT_EQ(enumerateMeshShapes(32, 5).size(), 16u);
  // A prime: one axis. One device: one empty shape.
  EXPECT_EQ(enumerateMeshShapes(7, 3).size(), 1u);
  ASSERT_EQ(enumerateMeshShapes(1, 3).size(), 1u);
  EXPECT_TRUE(enumerateMeshShapes(1, 3).front().empty());
  for (const auto &s : enumerateMeshShapes(24, 4)) {
    int64_t n = 1;
    for (int64_t f : s) {
      EXPECT_GE(f, 2);
      n *= f;
    }
    EXPECT_EQ(n, 24);
  }
}

Operator linear(int64_t b, int64_t k, int64_t n) {
  Operator op;
  op.name = "fc";
  op.kind = OpKind::MatMul;
  op.loops = {{"b", b, LoopKind::Parallel, {}},
              {"k", k, LoopKind::Parallel, {}},
              {"n", n, LoopKind::Reduction, {}}};
  op.operands = {{"x", OperandRole::Input, {0, 2}, 2, true},
                 {"w", OperandRole::Parameter, {2, 1}, 2, true},
                 {"y", OperandRole::Output, {0, 1}, 2, true}};
  return op;
}

TEST(PartitionSpace, HandCountedLinear) {
  Mesh mesh = makeSearchMesh(1, {2, 2});
  // Each of the two axes: unused, b, k or n -> 16 spatial; temporal on
  // (x0,x1) and (x1,x0) with the one triple (m=b, n=n, k=k) -> 2.
  EXPECT_EQ(enumeratePartitions(linear(4, 4, 4), mesh, {}).size(), 18u);
  SpaceOptions spatial;
  spatial.temporal = false;
  EXPECT_EQ(enumeratePartitions(linear(4, 4, 4), mesh, spatial).size(), 16u);
  // b = 2 cannot take both axes (excluded, not padded): 15 + 2.
  EXPECT_EQ(enumeratePartitions(linear(2, 4, 4), mesh, {}).size(), 17u);
  // b = 3: no axis on b; 9 spatial; temporal needs q | local b: none.
  EXPECT_EQ(enumeratePartitions(linear(3, 4, 4), mesh, {}).size(), 9u);
  // Unequal axes 2 x 4: no temporal primitive; 4 x 4 choices minus the
  // three that put both axes (8) on one loop of extent 4.
  EXPECT_EQ(enumeratePartitions(linear(4, 4, 4), makeSearchMesh(1, {2, 4}), {})
                .size(),
            13u);
}

TEST(PartitionSpace, LayoutsFollowIndexingMaps) {
  Operator op = linear(4, 4, 4);
  Partition p;
  p.loopAxes = {{1}, {}, {2}}; // b on x0, n on x1
  LayoutCode y = getOperandLayout(op, 2, p, 3);
  EXPECT_EQ(y, (LayoutCode{kReplicated, 0, kPartial}));
  LayoutCode x = getOperandLayout(op, 0, p, 3);
  EXPECT_EQ(x, (LayoutCode{kReplicated, 0, 1}));
  Partition t;
  t.loopAxes = {{}, {}, {}};
  t.temporal = TemporalPrimitive{1, 2, 0, 2, 1};
  EXPECT_EQ(getOperandLayout(op, 0, t, 3), (LayoutCode{kReplicated, 0, 1}));
  EXPECT_EQ(getOperandLayout(op, 2, t, 3), (LayoutCode{kReplicated, 0, 1}));
  // Column-parallel (k on x1): x is replicated over x1 and its gradient
  // comes back partial over it; the output is split, not partial.
  Partition c;
  c.loopAxes = {{1}, {2}, {}};
  EXPECT_EQ(getOperandLayout(op, 0, c, 3),
            (LayoutCode{kReplicated, 0, kPartialGradient}));
  EXPECT_EQ(getOperandLayout(op, 2, c, 3), (LayoutCode{kReplicated, 0, 1}));
  // An input that needs no gradient is plainly replicated.
  op.operands[0].needsGrad = false;
  EXPECT_EQ(getOperandLayout(op, 0, c, 3),
            (LayoutCode{kReplicated, 0, kReplicated}));
}

} // namespace

TEST(Space, MoEExpertLoopTakesTokenAxes) {
  // E = 4 experts; each of x0 (2) and x1 (4) is unused or splits b (8), s
  // (32) or f (the experts' hidden dim, 256): 16 partitions. Each also
  // comes with the experts over every subset of the axes splitting b or s
  // whose sizes divide 4: {x0} or {x1} alone, never both (8), never an
  // axis on f or an unused one. Partitions whose token axes are {}, {x0},
  // {x1}, {x0,x1} (4 of each) add 0, 1, 1 and 2: 16 + 16 = 32.
  TransformerShape s;
  s.model = {1, 64, 4, 256, 128, 32, 8};
  s.moe = TransformerShape::MoE{};
  s.moe->experts = 4;
  Problem p = buildTransformerProblem(s, "dgx-a100-80g-1", 8);
  const Operator &moe = p.ops[9];
  ASSERT_EQ(moe.kind, OpKind::MoE);
  Mesh mesh = makeSearchMesh(1, {2, 4});
  std::vector<Partition> parts = enumeratePartitions(moe, mesh, {});
  EXPECT_EQ(parts.size(), 32u);
  unsigned ep = 0, tp = 0;
  for (const Partition &part : parts) {
    EXPECT_FALSE(part.temporal.has_value());
    EXPECT_TRUE(part.loopAxes[2].empty());
    for (unsigned axis : part.loopAxes[3])
      EXPECT_TRUE(is_contained(part.loopAxes[0], axis) ||
                  is_contained(part.loopAxes[1], axis));
    ep += !part.loopAxes[3].empty();
    tp += !part.loopAxes[4].empty();
  }
  EXPECT_EQ(ep, 16u);
  // f split: on x0 with x1 unused, on b, on s or on f too (x0 then x1: 8
  // divides 256), or on x1 with x0 unused, on b or on s: 7; and the 4
  // expert-parallel variants of those whose other axis splits b or s.
  EXPECT_EQ(tp, 7u + 4u);
}
