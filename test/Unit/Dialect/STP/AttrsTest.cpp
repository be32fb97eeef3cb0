//===- AttrsTest.cpp - unit tests of the stp attributes ---------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Checks the derived queries of the stp attributes against hand-computed
// values: mesh axis placement over nodes, PrimePar's slice-index rules and
// their ring-shift neighbours, and the verifiers' C++ entry points.
//
//===----------------------------------------------------------------------===//

#include "stpar/Dialect/STP/IR/STPAttrs.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace stpar::stp;

namespace {

class STPAttrsTest : public ::testing::Test {
protected:
  STPAttrsTest() { ctx.loadDialect<STPDialect>(); }

  /// An A100-like cluster of `nodes` x `perNode` devices.
  ClusterAttr cluster(int64_t nodes, int64_t perNode) {
    auto device = DeviceAttr::get(&ctx, F64Value(19.5e12), std::nullopt,
                                  F64Value(312e12), std::nullopt,
                                  80LL << 30, F64Value(2.0e12));
    auto nvlink = LinkAttr::get(&ctx, F64Value(300e9), F64Value(5e-6));
    auto ib = LinkAttr::get(&ctx, F64Value(25e9), F64Value(1e-5));
    return ClusterAttr::get(&ctx, "test", nodes, perNode, device, nvlink, ib);
  }

  MeshAttr mesh(ClusterAttr c,
                ArrayRef<std::pair<StringRef, int64_t>> axes) {
    SmallVector<AxisAttr> attrs;
    for (auto [name, size] : axes)
      attrs.push_back(AxisAttr::get(&ctx, StringAttr::get(&ctx, name), size));
    return MeshAttr::get(&ctx, c, attrs);
  }

  /// Runs `fn` with diagnostics captured; returns the first error message.
  template <typename Fn> std::string firstError(Fn fn) {
    std::string message;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      if (message.empty())
        message = diag.str();
      return success();
    });
    fn();
    return message;
  }

  MLIRContext ctx;
};

TEST_F(STPAttrsTest, ClusterCountsDevices) {
  EXPECT_EQ(cluster(8, 4).getNumDevices(), 32);
  EXPECT_EQ(cluster(1, 8).getNumDevices(), 8);
}

TEST_F(STPAttrsTest, AxisPlacementInsideAndAcrossNodes) {
  // 2 nodes x 8: ["dp" = 2, "tp" = 8]. tp: stride 1, 8 devices in one node.
  // dp: stride 8 = one node apart, 2 nodes.
  MeshAttr m = mesh(cluster(2, 8), {{"dp", 2}, {"tp", 8}});
  EXPECT_EQ(m.getAxisStride(0), 8);
  EXPECT_EQ(m.getAxisStride(1), 1);
  AxisPlacement dp = m.getAxisPlacement(0), tp = m.getAxisPlacement(1);
  EXPECT_EQ(dp.intraNodeSize, 1);
  EXPECT_EQ(dp.interNodeSize, 2);
  EXPECT_TRUE(dp.crossesInterNode());
  EXPECT_FALSE(dp.crossesIntraNode());
  EXPECT_EQ(tp.intraNodeSize, 8);
  EXPECT_EQ(tp.interNodeSize, 1);
  EXPECT_TRUE(dp.regular && tp.regular);
}

TEST_F(STPAttrsTest, AxisPlacementHierarchical) {
  // 4 nodes x 4 devices (16), axes ["a" = 8, "b" = 2]: b has stride 1 and
  // stays in a node; a has stride 2, so 4/2 = 2 members per node and
  // 8/2 = 4 nodes: hierarchical 2 x 4.
  MeshAttr m = mesh(cluster(4, 4), {{"a", 8}, {"b", 2}});
  AxisPlacement a = m.getAxisPlacement(0);
  EXPECT_EQ(a.intraNodeSize, 2);
  EXPECT_EQ(a.interNodeSize, 4);
  EXPECT_TRUE(a.crossesIntraNode() && a.crossesInterNode());
  EXPECT_EQ(m.getAxisPlacement(1).intraNodeSize, 2);
}

TEST_F(STPAttrsTest, AxisPlacementIrregular) {
  // 3 nodes x 8 = 24 devices, axes ["a" = 8, "b" = 3]: b's groups
  // {0,1,2} {3,4,5} {6,7,8} straddle the node boundary at 8.
  MeshAttr m = mesh(cluster(3, 8), {{"a", 8}, {"b", 3}});
  AxisPlacement b = m.getAxisPlacement(1);
  EXPECT_FALSE(b.regular);
  EXPECT_EQ(b.interNodeSize, 3);
  // a: stride 3, not aligned with nodes of 8 either.
  EXPECT_FALSE(m.getAxisPlacement(0).regular);
}

TEST_F(STPAttrsTest, SizeOneAxisCrossesNothing) {
  MeshAttr m = mesh(cluster(1, 4), {{"one", 1}, {"tp", 4}});
  AxisPlacement one = m.getAxisPlacement(0);
  EXPECT_FALSE(one.crossesIntraNode());
  EXPECT_FALSE(one.crossesInterNode());
}

TEST_F(STPAttrsTest, MeshVerifierRejectsWrongProduct) {
  std::string error = firstError([&] {
    AxisAttr axes[] = {AxisAttr::get(&ctx, StringAttr::get(&ctx, "x"), 3)};
    EXPECT_FALSE(MeshAttr::getChecked(
        [&] { return emitError(UnknownLoc::get(&ctx)); }, &ctx,
        cluster(1, 4), ArrayRef<AxisAttr>(axes)));
  });
  EXPECT_EQ(error, "mesh axis sizes multiply to 3 but the cluster has 4 "
                   "devices (1 nodes x 4)");
}

TEST_F(STPAttrsTest, PrimeParForwardRuleMatchesDesign) {
  // F: (M, N, K) = (r, r + c + t, c) mod q, q = 4.
  auto rule = TemporalAttr::get(&ctx, "x", "y", "m", "n", "k", 4).getForward();
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 4; ++c)
      for (int64_t t = 0; t < 4; ++t) {
        std::array<int64_t, 3> s = evaluateTemporalRule(rule, r, c, t, 4);
        EXPECT_EQ(s[0], r);
        EXPECT_EQ(s[1], (r + c + t) % 4);
        EXPECT_EQ(s[2], c);
      }
}

TEST_F(STPAttrsTest, PrimeParWeightGradRuleShiftsAtLastStep) {
  // G: (r + t, r + c - 1 + d, c - 1 + d), d = 1 only at t = q - 1. q = 3,
  // device (0, 0): t=0 -> (0, 2, 2); t=1 -> (1, 2, 2); t=2 -> (2, 0, 0).
  auto rule =
      TemporalAttr::get(&ctx, "x", "y", "m", "n", "k", 3).getWeightGrad();
  EXPECT_EQ(evaluateTemporalRule(rule, 0, 0, 0, 3),
            (std::array<int64_t, 3>{0, 2, 2}));
  EXPECT_EQ(evaluateTemporalRule(rule, 0, 0, 1, 3),
            (std::array<int64_t, 3>{1, 2, 2}));
  EXPECT_EQ(evaluateTemporalRule(rule, 0, 0, 2, 3),
            (std::array<int64_t, 3>{2, 0, 0}));
}

/// The ring shifts the partitioner will emit rely on these neighbour
/// relations (../shared/DESIGN.md): the slice a device uses at step t + 1 is
/// the one a fixed neighbour used at step t.
TEST_F(STPAttrsTest, PrimeParRulesMoveSlicesBetweenNeighbours) {
  for (int64_t q : {2, 3, 4, 5, 8}) {
    auto attr = TemporalAttr::get(&ctx, "x", "y", "m", "n", "k", q);
    auto at = [&](AffineMap rule, int64_t r, int64_t c, int64_t t) {
      return evaluateTemporalRule(rule, (r + q) % q, (c + q) % q, t, q);
    };
    for (int64_t r = 0; r < q; ++r)
      for (int64_t c = 0; c < q; ++c)
        for (int64_t t = 0; t + 1 < q; ++t) {
          auto f1 = at(attr.getForward(), r, c, t + 1);
          // F: I[M,N] comes from (r, c+1), W[N,K] from (r+1, c).
          auto fI = at(attr.getForward(), r, c + 1, t);
          auto fW = at(attr.getForward(), r + 1, c, t);
          EXPECT_EQ(f1[0], fI[0]);
          EXPECT_EQ(f1[1], fI[1]);
          EXPECT_EQ(f1[1], fW[1]);
          EXPECT_EQ(f1[2], fW[2]);
          // B: W[N,K] comes from (r-1, c+1).
          auto b1 = at(attr.getInputGrad(), r, c, t + 1);
          auto bW = at(attr.getInputGrad(), r - 1, c + 1, t);
          EXPECT_EQ(b1[1], bW[1]);
          EXPECT_EQ(b1[2], bW[2]);
          // G: I[M,N] comes from (r+1, c-1) (before the last step's shift).
          if (t + 1 < q - 1) {
            auto g1 = at(attr.getWeightGrad(), r, c, t + 1);
            auto gI = at(attr.getWeightGrad(), r + 1, c - 1, t);
            EXPECT_EQ(g1[0], gI[0]);
            EXPECT_EQ(g1[1], gI[1]);
          }
        }
  }
}

TEST_F(STPAttrsTest, PrimeParRulesAreValidSchedules) {
  // Exact cover and no replication, for powers of two and others.
  for (int64_t q = 1; q <= 8; ++q) {
    auto attr = TemporalAttr::get(&ctx, "x", "y", "m", "n", "k", q);
    for (Phase phase : {Phase::Forward, Phase::InputGrad, Phase::WeightGrad}) {
      std::string error = firstError([&] {
        EXPECT_TRUE(succeeded(verifyTemporalRule(
            [&] { return emitError(UnknownLoc::get(&ctx)); }, phase,
            attr.getRule(phase), q)))
            << "q=" << q << " phase=" << stringifyPhase(phase).str();
      });
      EXPECT_EQ(error, "");
    }
  }
}

TEST_F(STPAttrsTest, BrokenRuleIsRejected) {
  // (r, r + t, c): device (0, 0) and (0, 1) hold the same I slice at step 0.
  AffineExpr r = getAffineDimExpr(0, &ctx), c = getAffineDimExpr(1, &ctx),
             t = getAffineDimExpr(2, &ctx);
  AffineMap broken = AffineMap::get(3, 0, {r, r + t, c}, &ctx);
  std::string error = firstError([&] {
    EXPECT_TRUE(failed(verifyTemporalRule(
        [&] { return emitError(UnknownLoc::get(&ctx)); }, Phase::Forward,
        broken, 2)));
  });
  EXPECT_EQ(error, "temporal rule 'forward' replicates slice (M=0, N=0) of "
                   "operand I at step 0: devices (0, 0) and (0, 1) both use "
                   "it");
}

TEST_F(STPAttrsTest, SpecCountsPieces) {
  // Mesh 2 x 2 x 2 on one node of 8; "n" split by "dp" and in time by q = 2.
  MeshAttr m = mesh(cluster(1, 8), {{"dp", 2}, {"x", 2}, {"y", 2}});
  auto loop = [&](StringRef name, int64_t extent, LoopKind kind,
                  ArrayRef<StringRef> split) {
    SmallVector<StringAttr> axes;
    for (StringRef axis : split)
      axes.push_back(StringAttr::get(&ctx, axis));
    return LoopDimAttr::get(&ctx, StringAttr::get(&ctx, name), extent, kind,
                            axes, false);
  };
  SmallVector<LoopDimAttr> loops = {
      loop("m", 8, LoopKind::Parallel, {"dp"}),
      loop("n", 16, LoopKind::Reduction, {}),
      loop("k", 4, LoopKind::Parallel, {}), loop("h", 3, LoopKind::Parallel, {})};
  auto temporal = TemporalAttr::get(&ctx, "x", "y", "m", "n", "k", 2);
  auto spec = PartitionSpecAttr::get(&ctx, m, loops, temporal);
  EXPECT_EQ(spec.getNumPieces(spec.findLoop("m")), 4);
  EXPECT_EQ(spec.getNumPieces(spec.findLoop("n")), 2);
  EXPECT_EQ(spec.getNumPieces(spec.findLoop("h")), 1);
  EXPECT_FALSE(spec.findLoop("zz"));
}

TEST_F(STPAttrsTest, F64ValueHashesByBits) {
  EXPECT_EQ(F64Value(1.5), F64Value(1.5));
  EXPECT_NE(F64Value(1.5), F64Value(2.5));
  EXPECT_EQ(hash_value(F64Value(3.0e11)), hash_value(F64Value(3.0e11)));
  double d = F64Value(4.25);
  EXPECT_EQ(d, 4.25);
}

} // namespace
