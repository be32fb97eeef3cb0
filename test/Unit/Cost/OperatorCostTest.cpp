//===- OperatorCostTest.cpp - roofline, partitions, temporal, re-layout ---===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Hand-computed values on one dgx-a100-80g node (bf16 peak 312e12 FLOP/s,
// HBM 2.039e12 B/s, NVSwitch 3e11 B/s one way, 5 us) with a fixed
// efficiency model (GEMM eta = 0.5 at any size, HBM efficiency 1, no launch
// overhead), so the values do not move when the fit changes.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/OperatorCost.h"

#include <gtest/gtest.h>

using namespace stpar::cost;

namespace {
EfficiencyModel fixedEff() {
  EfficiencyModel e;
  e.matmulMax = 0.5;
  e.matmulHalfFlops = 0; // eta(F) = 0.5 for every F > 0
  e.hbmEfficiency = 1;
  e.kernelLaunch = 0;
  return e;
}
Cluster dgx(int nodes = 1) {
  return *getPreset("dgx-a100-80g-" + std::to_string(nodes));
}
/// Y[s,k] = sum_n X[s,n] W[n,k], s = 2048.
Operator linear(int64_t n, int64_t k, bool splitK, bool splitN) {
  Operator op;
  op.name = "linear";
  op.kind = OpKind::MatMul;
  op.loops = {{"s", 2048, LoopKind::Parallel, {}},
              {"k", k, LoopKind::Parallel, {}},
              {"n", n, LoopKind::Reduction, {}}};
  if (splitK)
    op.loops[1].axes = {0};
  if (splitN)
    op.loops[2].axes = {0};
  op.operands = {{"x", OperandRole::Input, {0, 2}, 2, true},
                 {"w", OperandRole::Parameter, {2, 1}, 2, true},
                 {"y", OperandRole::Output, {0, 1}, 2, true}};
  return op;
}
} // namespace

TEST(OperatorCostTest, EfficiencyCurve) {
  EfficiencyModel e;
  e.matmulMax = 0.8;
  e.matmulHalfFlops = 1e10;
  // eta(1e10) = 0.8 * 1e10 / 2e10 = 0.4; eta(9e10) = 0.8 * 0.9 = 0.72.
  EXPECT_DOUBLE_EQ(e.getMatMulEfficiency(1e10), 0.4);
  EXPECT_DOUBLE_EQ(e.getMatMulEfficiency(9e10), 0.72);
}

TEST(OperatorCostTest, Roofline) {
  // Compute-bound: 3.12e12 FLOP at 312e12 * 0.5 FLOP/s = 0.02 s.
  EXPECT_DOUBLE_EQ(
      getRooflineTime(OpKind::MatMul, 3.12e12, 1e6, dgx(), fixedEff()), 0.02);
  // Memory-bound: 2.039e9 B at 2.039e12 B/s = 1e-3 s (elementwise kinds
  // ignore the GEMM curve).
  EXPECT_DOUBLE_EQ(
      getRooflineTime(OpKind::Elementwise, 1e6, 2.039e9, dgx(), fixedEff()),
      1e-3);
}

TEST(OperatorCostTest, ColumnParallelLinear) {
  // k = 4096 over tp = 4 -> local k = 1024; n = 1024.
  Mesh mesh{{{"tp", 4}}};
  llvm::Expected<OperatorCost> c =
      costOperator(linear(1024, 4096, true, false), mesh, dgx(), fixedEff());
  ASSERT_TRUE(bool(c));
  // F = 2 * 2048 * 1024 * 1024 = 4.294967296e9 FLOP -> / 1.56e14 FLOP/s
  // = 2.7531842e-5 s (bytes 10485760 B take 5.14e-6 s: compute-bound).
  EXPECT_DOUBLE_EQ(c->forwardFlops, 4294967296.0);
  EXPECT_NEAR(c->forward, 2.7531842e-5, 1e-11);
  EXPECT_DOUBLE_EQ(c->backwardInput, c->forward);
  EXPECT_DOUBLE_EQ(c->backwardWeight, c->forward);
  EXPECT_EQ(c->forwardComm, 0);
  // dX = dY W^T sums over the split k: all-reduce of X (2048*1024*2 =
  // 4194304 B) over 4 GPUs: 6 * 5 us + 1.5 * 4194304 / 3e11 = 5.097152e-5 s.
  EXPECT_NEAR(c->backwardComm, 5.097152e-5, 1e-12);
  EXPECT_DOUBLE_EQ(c->parameterBytes, 1024.0 * 1024 * 2);
  EXPECT_DOUBLE_EQ(c->stashBytes, 2048.0 * 1024 * 2);
}

TEST(OperatorCostTest, RowParallelLinear) {
  // n = 4096 over tp = 4: partial sums of Y (2048*1024*2 B) all-reduced.
  Mesh mesh{{{"tp", 4}}};
  llvm::Expected<OperatorCost> c =
      costOperator(linear(4096, 1024, false, true), mesh, dgx(), fixedEff());
  ASSERT_TRUE(bool(c));
  EXPECT_NEAR(c->forwardComm, 5.097152e-5, 1e-12);
  EXPECT_EQ(c->backwardComm, 0);
  // The one communication behind it: an all-reduce of the local Y over tp,
  // each device sending 2 (p-1)/p of it.
  ASSERT_EQ(c->communication.size(), 1u);
  const Communication &m = c->communication[0];
  EXPECT_EQ(m.phase, Phase::Forward);
  EXPECT_EQ(m.kind, Collective::AllReduce);
  EXPECT_EQ(m.axes, std::vector<unsigned>{0});
  EXPECT_DOUBLE_EQ(m.bytes, 2048.0 * 1024 * 2);
  EXPECT_DOUBLE_EQ(getSentBytes(m, mesh), 1.5 * 2048 * 1024 * 2);
  std::vector<GradientSync> syncs =
      getGradientSyncs(linear(4096, 1024, false, true), mesh);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_TRUE(syncs[0].axes.empty()); // W is split, not replicated
}

TEST(OperatorCostTest, DataParallelGradientSync) {
  Mesh mesh{{{"dp", 2}, {"tp", 4}}};
  Operator op = linear(1024, 4096, true, false);
  op.loops[1].axes = {1};
  op.loops[0].axes = {0}; // s over "dp"
  std::vector<GradientSync> syncs = getGradientSyncs(op, mesh);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].axes, std::vector<unsigned>{0});
  EXPECT_DOUBLE_EQ(syncs[0].bytes, 1024.0 * 1024 * 2);
  EXPECT_TRUE(getGradientSyncs(op, mesh, 0u)[0].axes.empty());
}

TEST(OperatorCostTest, GradientGatheredForUnplannedProducer) {
  // An elementwise add whose second input comes from an operator the plan
  // leaves out (Operand::gatherGradient): its gradient, split like the
  // input over dp (on s) and tp (on h), is all-gathered whole in B; the
  // first input, from a planned producer, costs nothing here.
  Mesh mesh{{{"dp", 2}, {"tp", 4}}};
  Operator op;
  op.name = "add";
  op.kind = OpKind::Elementwise;
  op.loops = {{"s", 2048, LoopKind::Parallel, {0}},
              {"h", 1024, LoopKind::Parallel, {1}}};
  op.operands = {{"x", OperandRole::Input, {0, 1}, 2, true},
                 {"pos", OperandRole::Input, {0, 1}, 2, true},
                 {"y", OperandRole::Output, {0, 1}, 2, true}};
  llvm::Expected<OperatorCost> plain =
      costOperator(op, mesh, dgx(), fixedEff());
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_TRUE(plain->communication.empty());
  op.operands[1].gatherGradient = true;
  llvm::Expected<OperatorCost> c = costOperator(op, mesh, dgx(), fixedEff());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  ASSERT_EQ(c->communication.size(), 1u);
  const Communication &m = c->communication[0];
  EXPECT_EQ(m.phase, Phase::InputGrad);
  EXPECT_EQ(m.kind, Collective::AllGather);
  EXPECT_EQ(m.axes, (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(m.operand, 1);
  // The gathered (whole) gradient: 2048 x 1024 bf16.
  EXPECT_DOUBLE_EQ(m.bytes, 2048.0 * 1024 * 2);
  EXPECT_GT(c->backwardComm, 0);
  EXPECT_EQ(c->forwardComm, 0);
  // No gradient, nothing to gather.
  op.operands[1].needsGrad = false;
  llvm::Expected<OperatorCost> n = costOperator(op, mesh, dgx(), fixedEff());
  ASSERT_TRUE(bool(n)) << llvm::toString(n.takeError());
  EXPECT_TRUE(n->communication.empty());
}

TEST(OperatorCostTest, TemporalPrimitive) {
  // q = 2 on a 2x2 sub-mesh of one node; M = N = K = 1024: each step works
  // on 512^3: 2 * 512^3 = 2.68435456e8 FLOP / 1.56e14 = 1.7207401e-6 s.
  // Transfer per F step: I and W slices (512*512*2 = 524288 B) shifted
  // inside the node: 2 * (5 us + 524288 / 3e11) = 1.34952533e-5 s.
  // Start-up 5 us. F = q - 1 = 1 step overlapped with its transfer,
  // max(1.72e-6, 1.3495e-5) + 5e-6, then the last step's compute 1.72e-6
  // (2.02159934e-5 s), plus the alignment of I and W from their blocked
  // layouts into step 0's slices (one point-to-point transfer each,
  // 1.34952533e-5 s): 3.37112468e-5 s.
  Mesh mesh{{{"x", 2}, {"y", 2}}};
  Operator op;
  op.name = "temporal";
  op.kind = OpKind::MatMul;
  op.loops = {{"m", 1024, LoopKind::Parallel, {}},
              {"k", 1024, LoopKind::Parallel, {}},
              {"n", 1024, LoopKind::Reduction, {}}};
  op.operands = {{"x", OperandRole::Input, {0, 2}, 2, true},
                 {"w", OperandRole::Parameter, {2, 1}, 2, true},
                 {"y", OperandRole::Output, {0, 1}, 2, true}};
  op.temporal = TemporalPrimitive{0, 1, 0, 2, 1};
  llvm::Expected<OperatorCost> c = costOperator(op, mesh, dgx(), fixedEff());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_NEAR(c->forward, 3.37112468e-5, 1e-12);
  EXPECT_EQ(c->forwardComm, 0); // no all-reduce
  // What the program must send for it (the plan check): in F one ring
  // shift of I along y and of W along x (q - 1 = 1), and the two
  // alignments; B and G the same way (W and I diagonally, dO along y and
  // x), G with the dW re-layout too.
  unsigned shifts[3] = {0, 0, 0}, p2p[3] = {0, 0, 0};
  for (const Communication &m : c->communication) {
    EXPECT_EQ(m.elementBytes, 2);
    EXPECT_DOUBLE_EQ(m.bytes, 524288.0) << m.what;
    if (m.kind == Collective::RingShift) {
      ++shifts[unsigned(m.phase)];
      EXPECT_EQ(m.count, 1) << m.what;
    } else {
      EXPECT_EQ(m.kind, Collective::PointToPoint) << m.what;
      ++p2p[unsigned(m.phase)];
    }
  }
  EXPECT_EQ(shifts[0], 2u);
  EXPECT_EQ(shifts[1], 1u);
  EXPECT_EQ(shifts[2], 1u);
  EXPECT_EQ(p2p[0], 2u); // alignments of I and W
  EXPECT_EQ(p2p[1], 2u); // diagonal W, dI back
  EXPECT_EQ(p2p[2], 3u); // diagonal I, dW re-layout, dW back
  // F's sent bytes: 2 shifts + 2 alignments of 512 KiB each.
  double sent = 0;
  for (const Communication &m : c->communication)
    if (m.phase == Phase::Forward)
      sent += getSentBytes(m, mesh);
  EXPECT_DOUBLE_EQ(sent, 4 * 524288.0);
  EXPECT_DOUBLE_EQ(c->forwardFlops, 2 * 2.68435456e8);
  // Double buffers: 2 * 3 slices * 524288 B = 3145728 B, plus the output
  // (2 slices of 524288 B).
  EXPECT_DOUBLE_EQ(c->transientBytes, 3145728.0 + 2 * 524288);
  TemporalStepCost step{1e-3, 2e-3, 1e-5};
  EXPECT_DOUBLE_EQ(step.getStepTime(), 2.01e-3);

  Mesh bad{{{"x", 2}, {"y", 4}}};
  llvm::Expected<OperatorCost> e = costOperator(op, bad, dgx(), fixedEff());
  ASSERT_FALSE(bool(e));
  EXPECT_NE(llvm::toString(e.takeError()).find("square"), std::string::npos);
}

TEST(OperatorCostTest, Relayout) {
  // A 1024 x 1024 bf16 tensor (2097152 B) over "tp" = 4 in one node.
  Mesh mesh{{{"tp", 4}}};
  TensorLayout rows{{1024, 1024}, {{0}, {}}, {}, 2};
  TensorLayout cols{{1024, 1024}, {{}, {0}}, {}, 2};
  TensorLayout replicated{{1024, 1024}, {{}, {}}, {}, 2};
  TensorLayout partial{{1024, 1024}, {{}, {}}, {0}, 2};
  // rows -> replicated: all-gather of 2097152 B: 3 * 5 us + 0.75 *
  // 2097152 / 3e11 = 2.024288e-5 s; each device receives 1572864 B.
  llvm::Expected<RelayoutCost> g =
      getRelayoutCost(rows, replicated, mesh, dgx());
  ASSERT_TRUE(bool(g));
  ASSERT_EQ(g->steps.size(), 1u);
  EXPECT_EQ(g->steps[0].kind, Collective::AllGather);
  EXPECT_NEAR(g->seconds, 2.024288e-5, 1e-12);
  EXPECT_DOUBLE_EQ(g->receivedBytes, 1572864);
  // partial -> cols: reduce-scatter of 2097152 B, same time.
  llvm::Expected<RelayoutCost> rs = getRelayoutCost(partial, cols, mesh, dgx());
  ASSERT_TRUE(bool(rs));
  EXPECT_EQ(rs->steps[0].kind, Collective::ReduceScatter);
  EXPECT_NEAR(rs->seconds, 2.024288e-5, 1e-12);
  // rows -> cols: all-to-all of the local 524288 B: 15 us + 0.75 * 524288 /
  // 3e11 = 1.631072e-5 s.
  llvm::Expected<RelayoutCost> a2a = getRelayoutCost(rows, cols, mesh, dgx());
  ASSERT_TRUE(bool(a2a));
  EXPECT_EQ(a2a->steps[0].kind, Collective::AllToAll);
  EXPECT_NEAR(a2a->seconds, 1.631072e-5, 1e-12);
  // replicated -> rows: a local slice, free.
  llvm::Expected<RelayoutCost> free =
      getRelayoutCost(replicated, rows, mesh, dgx());
  ASSERT_TRUE(bool(free));
  EXPECT_TRUE(free->steps.empty());
  EXPECT_EQ(free->seconds, 0);
  EXPECT_FALSE(bool(getRelayoutCost(rows, partial, mesh, dgx())));
}

TEST(OperatorCostTest, RelayoutSecondsAreAffineInBytes) {
  // The search keeps per pair of per-axis uses (seconds at 0 bytes, seconds
  // per byte) and serves every tensor size from them (Solver.cpp,
  // relayoutSeconds): every re-layout between two uses of a 3-axis mesh
  // that spans nodes (hierarchical collectives) must be affine in the bytes
  // per device, s(x) = a + b x for x > 0.
  Mesh mesh{{{"x0", 2}, {"x1", 4}, {"x2", 4}}};
  Cluster cluster = dgx(4);
  llvm::SmallVector<AxisPlacement, 3> placements;
  for (unsigned a = 0; a < 3; ++a)
    placements.push_back(mesh.getPlacement(a, cluster.devicesPerNode));
  using State = AxisUse::State;
  std::vector<AxisUse> uses = {{State::Replicated, 0},
                               {State::Split, 0},
                               {State::Split, 1},
                               {State::Partial, 0}};
  unsigned checked = 0, moving = 0;
  for (unsigned f = 0; f < 64; ++f)
    for (unsigned t = 0; t < 27; ++t) {
      llvm::SmallVector<AxisUse, 3> from, to;
      for (unsigned a = 0, ff = f, tt = t; a < 3; ++a, ff /= 4, tt /= 3) {
        from.push_back(uses[ff % 4]);
        to.push_back(uses[tt % 3]); // a target holds no partial sums
      }
      auto at = [&](double bytes) {
        return getRelayoutSeconds(from, to, bytes, mesh, placements, cluster,
                                  nullptr);
      };
      double s1 = at(1e6), s2 = at(3e6), s3 = at(7e8);
      double b = (s2 - s1) / 2e6, a = s1 - b * 1e6;
      EXPECT_NEAR(s3, a + b * 7e8, 1e-9 * s3) << "uses " << f << " -> " << t;
      EXPECT_GE(a, 0);
      ++checked;
      moving += s1 > 0;
    }
  EXPECT_EQ(checked, 64u * 27u);
  EXPECT_GT(moving, 1000u);
}

TEST(OperatorCostTest, ZeroModelStates) {
  // psi = 1e9 parameters, N_d = 8 (bytes): stage 0 16e9; stage 1 4e9 +
  // 12e9/8 = 5.5e9; stage 2 2e9 + 14e9/8 = 3.75e9; stage 3 16e9/8 = 2e9.
  EXPECT_DOUBLE_EQ(getModelStateBytes(1e9, 8, 0).getTotal(), 16e9);
  EXPECT_DOUBLE_EQ(getModelStateBytes(1e9, 8, 1).getTotal(), 5.5e9);
  EXPECT_DOUBLE_EQ(getModelStateBytes(1e9, 8, 2).getTotal(), 3.75e9);
  EXPECT_DOUBLE_EQ(getModelStateBytes(1e9, 8, 3).getTotal(), 2e9);
}
