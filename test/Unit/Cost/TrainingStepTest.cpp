//===- TrainingStepTest.cpp - step, pipeline, sync, memory, GPT -----------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/TrainingStep.h"
#include "stpar/Cost/GPTModel.h"

#include <gtest/gtest.h>

using namespace stpar::cost;

namespace {
EfficiencyModel fixedEff() {
  EfficiencyModel e;
  e.matmulMax = 0.5;
  e.matmulHalfFlops = 0;
  e.hbmEfficiency = 1;
  e.kernelLaunch = 0;
  return e;
}
/// Y[s,k] = sum_n X[s,n] W[n,k] with s over axis 0 ("dp"): 2048 x 1024 x
/// 1024, 2 * 2048 * 1024 * 1024 / 2 devices = 2.147483648e9 FLOP each.
Operator dpLinear(unsigned stage, const std::string &w) {
  Operator op;
  op.name = "linear" + std::to_string(stage);
  op.kind = OpKind::MatMul;
  op.layerKind = "mlp";
  op.stage = stage;
  op.loops = {{"s", 2048, LoopKind::Parallel, {0}},
              {"k", 1024, LoopKind::Parallel, {}},
              {"n", 1024, LoopKind::Reduction, {}}};
  op.operands = {{"x", OperandRole::Input, {0, 2}, 2, true},
                 {w, OperandRole::Parameter, {2, 1}, 2, true},
                 {"y", OperandRole::Output, {0, 1}, 2, true}};
  return op;
}
} // namespace

TEST(TrainingStepTest, DataParallelStep) {
  // Mesh ["dp" = 2] over 2 nodes (dgx-a100-80g-2, devices 0 and 8 would be
  // a stride-8 axis; here a 2-device mesh with nodes of 1 keeps it simple).
  Cluster c = *getPreset("dgx-a100-80g-2");
  c.devicesPerNode = 1;
  Mesh mesh{{{"dp", 2}}};
  TrainingConfig config;
  config.microBatches = 4;
  llvm::Expected<StepBreakdown> b =
      evaluateTrainingStep({dpLinear(0, "w")}, mesh, c, config, fixedEff());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  // F = 2.147483648e9 FLOP / 1.56e14 FLOP/s = 1.3765921e-5 s; B = G = F.
  double f = 2.147483648e9 / 1.56e14;
  EXPECT_NEAR(b->criticalStage.forward, f, 1e-12);
  EXPECT_NEAR(b->microBatchTime, 3 * f, 1e-12);
  EXPECT_NEAR(b->pipelineTime, 4 * 3 * f, 1e-12);
  EXPECT_EQ(b->bubble, 0);
  // Gradient all-reduce of W (2097152 B) across 2 nodes: 2 * 10 us +
  // 2097152 / 2.5e10 = 1.0388608e-4 s; hidden behind B + G = 2f, the rest
  // exposed.
  EXPECT_NEAR(b->gradSync, 1.0388608e-4, 1e-12);
  EXPECT_NEAR(b->gradSyncExposed, 1.0388608e-4 - 2 * f, 1e-12);
  // Adam: 1048576 params * 28 B / 2.039e12 B/s = 1.43994e-5 s.
  EXPECT_NEAR(b->optimizer, 1048576.0 * 28 / 2.039e12, 1e-12);
  EXPECT_NEAR(b->stepTime, b->pipelineTime + b->gradSyncExposed + b->optimizer,
              1e-15);
  // Model FLOPs: 3 * 2 * 2048 * 1024^2 * 4 micro-batches = 5.1539608e10.
  EXPECT_DOUBLE_EQ(b->modelFlops, 3.0 * 2 * 2048 * 1024 * 1024 * 4);
  EXPECT_DOUBLE_EQ(b->hardwareFlops, b->modelFlops); // no recomputation
  EXPECT_NEAR(b->mfu, b->modelFlops / b->stepTime / 2 / 312e12, 1e-12);
  // Memory: psi = 1048576 -> 16 psi = 16777216 B of model states; stash
  // X (1024 * 1024 * 2 B) for 1 micro-batch in flight (p = 1).
  EXPECT_DOUBLE_EQ(b->peakMemory.parameters + b->peakMemory.gradients +
                       b->peakMemory.optimizer,
                   16.0 * 1048576);
  EXPECT_DOUBLE_EQ(b->peakMemory.activations, 1024.0 * 1024 * 2);

  config.zeroStage = 1; // optimizer states / N_d = 2
  llvm::Expected<StepBreakdown> z =
      evaluateTrainingStep({dpLinear(0, "w")}, mesh, c, config, fixedEff());
  ASSERT_TRUE(bool(z));
  EXPECT_DOUBLE_EQ(z->peakMemory.optimizer, 6.0 * 1048576);
  EXPECT_NEAR(z->optimizer, b->optimizer / 2, 1e-15);
}

TEST(TrainingStepTest, PipelineBubbleAndRecompute) {
  Cluster c = *getPreset("dgx-a100-80g-1");
  Mesh mesh{{{"pp", 2}, {"dp", 2}}};
  TrainingConfig config;
  config.microBatches = 6;
  config.pipelineStages = 2;
  config.pipelineAxis = 0;
  std::vector<Operator> ops = {dpLinear(0, "w0"), dpLinear(1, "w1")};
  for (Operator &op : ops)
    op.loops[0].axes = {1};
  llvm::Expected<StepBreakdown> b =
      evaluateTrainingStep(ops, mesh, c, config, fixedEff());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  // 1F1B: bubble fraction (p - 1) / (m + p - 1) = 1/7.
  EXPECT_NEAR(b->bubble / b->pipelineTime, 1.0 / 7, 1e-12);
  // Stage sends: 2 * (5 us + X local 1024*1024*2 B / 3e11) per micro-batch
  // ("pp" stride 2 lies inside the node).
  EXPECT_NEAR(b->pipelineSend, 2 * (5e-6 + 2097152 / 3e11), 1e-12);
  // Stage 0 keeps p - 0 = 2 micro-batches of X in flight.
  EXPECT_EQ(b->peakMemoryStage, 0u);
  EXPECT_DOUBLE_EQ(b->peakMemory.activations, 2 * 2097152.0);

  config.interleave = 2; // bubble (p - 1) / v micro-batch slots
  llvm::Expected<StepBreakdown> v =
      evaluateTrainingStep(ops, mesh, c, config, fixedEff());
  ASSERT_TRUE(bool(v));
  EXPECT_NEAR(v->bubble, 0.5 * v->microBatchTime, 1e-15);

  config.interleave = 1;
  config.recompute = Recompute::Full;
  for (Operator &op : ops)
    op.recomputable = op.checkpoint = true;
  llvm::Expected<StepBreakdown> r =
      evaluateTrainingStep(ops, mesh, c, config, fixedEff());
  ASSERT_TRUE(bool(r));
  EXPECT_NEAR(r->criticalStage.recompute, r->criticalStage.forward, 1e-15);
  EXPECT_DOUBLE_EQ(r->hardwareFlops, r->modelFlops * 4 / 3);

  // Selective: only the attention core re-runs (here op 0), and the others
  // keep their stashes.
  config.recompute = Recompute::Selective;
  ops[0].attentionCore = true;
  llvm::Expected<StepBreakdown> sel =
      evaluateTrainingStep(ops, mesh, c, config, fixedEff());
  ASSERT_TRUE(bool(sel));
  llvm::Expected<OperatorCost> core = costOperator(ops[0], mesh, c, fixedEff());
  ASSERT_TRUE(bool(core));
  EXPECT_NEAR(sel->criticalStage.recompute, core->forward, 1e-15);
  EXPECT_GT(sel->hardwareFlops, sel->modelFlops);
  EXPECT_LT(sel->hardwareFlops, r->hardwareFlops);
  ops[0].attentionCore = false;

  ops[1].stage = 5;
  EXPECT_FALSE(bool(evaluateTrainingStep(ops, mesh, c, config, fixedEff())));
}

TEST(TrainingStepTest, GPTBuilderCountsMegatronFlops) {
  llvm::Expected<GPTConfig> m = parseGPTSpec(
      "gpt:layers=4,hidden=1024,heads=16,seq=2048,vocab=51200,batch=16");
  ASSERT_TRUE(bool(m));
  EXPECT_EQ(m->ffn, 4096);
  llvm::Expected<MegatronStrategy> s =
      parseMegatronSpec("megatron:tp=2,pp=2,dp=2,mb=1");
  ASSERT_TRUE(bool(s));
  EXPECT_EQ(s->recompute, Recompute::Full); // the default
  for (auto [text, r] : {std::pair{"none", Recompute::None},
                         {"0", Recompute::None},
                         {"full", Recompute::Full},
                         {"1", Recompute::Full},
                         {"selective", Recompute::Selective}}) {
    llvm::Expected<MegatronStrategy> t =
        parseMegatronSpec(std::string("megatron:tp=2,recompute=") + text);
    ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
    EXPECT_EQ(t->recompute, r) << text;
  }
  llvm::Expected<MegatronStrategy> badName =
      parseMegatronSpec("megatron:tp=2,recompute=some");
  ASSERT_FALSE(bool(badName));
  EXPECT_EQ(llvm::toString(badName.takeError()),
            "megatron key 'recompute': expected none, selective or full, "
            "got 'some'");
  llvm::Expected<CostProblem> p = buildMegatronGPT(*m, *s);
  ASSERT_TRUE(bool(p));
  EXPECT_EQ(p->ops.size(), 1 + 4 * 12 + 3u);
  EXPECT_EQ(p->config.microBatches, 8); // 16 / (mb 1 * dp 2)
  EXPECT_EQ(p->mesh.getNumDevices(), 8);
  llvm::Expected<StepBreakdown> b =
      evaluateTrainingStep(p->ops, p->mesh, *getPreset("dgx-a100-80g-1"),
                           p->config, getDefaultEfficiency());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  // Megatron (SC'21 Eq. 3) with recomputation: 96 B s l h^2 (1 + s/(6h) +
  // V/(16 l h)) = 96*16*2048*4*1024^2*(1 + 1/3 + 0.78125) = 2.7917e15
  // FLOP; ours adds norm/softmax/elementwise FLOPs (a few per element), so
  // within 3%.
  double B = 16, sq = 2048, l = 4, h = 1024, V = 51200;
  double megatron =
      96 * B * sq * l * h * h * (1 + sq / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(b->hardwareFlops / megatron, 1.0, 0.03);
  EXPECT_GT(b->hardwareFlops, megatron);
  EXPECT_GT(b->stepTime, 0);
  EXPECT_TRUE(b->fitsMemory);

  EXPECT_FALSE(bool(parseGPTSpec("gpt:layers=4,hidden=1024")));
  llvm::Expected<MegatronStrategy> bad = parseMegatronSpec("megatron:tq=2");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()), "unknown megatron key 'tq'");
  s->tp = 3;
  EXPECT_FALSE(bool(buildMegatronGPT(*m, *s)));
}
