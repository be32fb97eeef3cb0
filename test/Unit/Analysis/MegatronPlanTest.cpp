//===- MegatronPlanTest.cpp - Megatron partition of a graph -----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// assignMegatron on a linear pair converted from IR (column- then
// row-parallel, batch on dp) and on hand-built graphs (stage cuts, errors),
// and parseIRStrategy.
//
//===----------------------------------------------------------------------===//

#include "stpar/Analysis/CostModel.h"

#include "stpar/Dialect/STP/IR/PartitionableOpInterface.h"
#include "stpar/Dialect/STP/IR/STPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace stpar::analysis;
using namespace stpar::cost;

namespace {

constexpr unsigned kDP = 1, kTP = 2;

// x -> fc1 (32 -> 64) -> +bias -> GeLU-ish -> fc2 (64 -> 32): the MLP pair.
constexpr const char *kMLP = R"mlir(
#x = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#w = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#y = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#b = affine_map<(d0, d1, d2) -> (d2)>
func.func @main(%x: tensor<2x8x32xf32> {stp.name = "x"},
    %w1: tensor<32x64xf32> {stp.param = #stp.param<name = "fc1.w", data = embedded, trainable = true>},
    %b1: tensor<64xf32> {stp.param = #stp.param<name = "fc1.b", data = embedded, trainable = true>},
    %w2: tensor<64x32xf32> {stp.param = #stp.param<name = "fc2.w", data = embedded, trainable = true>}) -> tensor<2x8x32xf32> {
  %e = tensor.empty() : tensor<2x8x64xf32>
  %h = linalg.generic {indexing_maps = [#x, #w, #y],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w1 : tensor<2x8x32xf32>, tensor<32x64xf32>) outs(%e : tensor<2x8x64xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x8x64xf32>
  %e1 = tensor.empty() : tensor<2x8x64xf32>
  %g = linalg.generic {indexing_maps = [#b, #id, #id],
      iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%b1, %h : tensor<64xf32>, tensor<2x8x64xf32>) outs(%e1 : tensor<2x8x64xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<2x8x64xf32>
  %e2 = tensor.empty() : tensor<2x8x32xf32>
  %y = linalg.generic {indexing_maps = [#x, #w, #y],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%g, %w2 : tensor<2x8x64xf32>, tensor<64x32xf32>) outs(%e2 : tensor<2x8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}
)mlir";

IRStrategy strategy(int64_t tp, int64_t pp, int64_t dp) {
  IRStrategy s;
  s.megatron.tp = tp;
  s.megatron.pp = pp;
  s.megatron.dp = dp;
  return s;
}

TEST(MegatronPlanTest, ColumnThenRowParallelAndBatchOnDP) {
  MLIRContext context;
  {
    DialectRegistry registry;
    stpar::stp::registerPartitionableOpModels(registry);
    context.appendDialectRegistry(registry);
  }
  context.loadDialect<func::FuncDialect, arith::ArithDialect,
                      linalg::LinalgDialect, math::MathDialect,
                      tensor::TensorDialect, stpar::stp::STPDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(kMLP, &context);
  ASSERT_TRUE(module);
  ConversionOptions options;
  options.batchSize = 2;
  FailureOr<OperatorGraph> graph = convertToOperatorGraph(
      module->lookupSymbol<func::FuncOp>("main"), options);
  ASSERT_TRUE(succeeded(graph));
  ASSERT_EQ(graph->ops.size(), 3u);

  llvm::Expected<MegatronPlan> plan =
      assignMegatron(*graph, strategy(4, 1, 8), /*microBatch=*/2);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_TRUE(plan->warnings.empty());
  const std::vector<Operator> &ops = plan->problem.ops;
  // fc1: column-parallel (output dim 64 on tp), batch 2*8 on dp.
  EXPECT_EQ(ops[0].loops[2].axes, (std::vector<unsigned>{kTP}));
  EXPECT_TRUE(ops[0].loops[3].axes.empty());
  EXPECT_EQ(ops[0].loops[0].axes, (std::vector<unsigned>{kDP}));
  EXPECT_EQ(ops[0].loops[0].extent, 16);
  // The bias + activation follows the split (and so does the bias).
  EXPECT_EQ(ops[1].loops[2].axes, (std::vector<unsigned>{kTP}));
  // fc2: row-parallel (its reduction dim on tp).
  EXPECT_EQ(ops[2].loops[3].axes, (std::vector<unsigned>{kTP}));
  EXPECT_TRUE(ops[2].loops[2].axes.empty());
  EXPECT_EQ(plan->problem.mesh.getNumDevices(), 32);
  EXPECT_EQ(plan->problem.config.microBatches, 1);

  // tp = 3 divides none of the dims: the linears stay replicated, with a
  // warning.
  llvm::Expected<MegatronPlan> odd =
      assignMegatron(*graph, strategy(3, 1, 1), 2);
  ASSERT_TRUE(bool(odd));
  ASSERT_FALSE(odd->warnings.empty());
  EXPECT_NE(odd->warnings[0].find("replicated across tp"), std::string::npos);
  EXPECT_TRUE(odd->problem.ops[0].loops[2].axes.empty());
}

/// A hand-built graph: an embedding-like op, `layers` layers of one op with
/// `flops[l]` forward FLOPs each, a head op.
OperatorGraph makeLayers(const std::vector<int64_t> &flops, int64_t heads) {
  OperatorGraph g;
  GraphTensor t;
  t.shape = {1};
  g.tensors.push_back(t);
  auto add = [&](int64_t extent, int layer) {
    GraphOperator gop;
    gop.op.name = "op" + std::to_string(g.ops.size());
    gop.op.kind = OpKind::Elementwise;
    gop.op.flopsPerPoint = 1;
    gop.op.loops = {{"d0", extent, LoopKind::Parallel, {}}};
    gop.op.operands = {{"y", OperandRole::Output, {0}, 2, true}};
    gop.tensors = {0};
    gop.tensorDimLoops = {{0}};
    gop.layer = layer;
    g.ops.push_back(gop);
  };
  add(1, -1);
  for (unsigned l = 0; l < flops.size(); ++l) {
    g.layers.push_back(
        {unsigned(g.ops.size()), unsigned(g.ops.size() + 1), heads});
    add(flops[l], int(l));
  }
  add(1, -1);
  return g;
}

TEST(MegatronPlanTest, StagesBalanceFlopsAtLayerBoundaries) {
  OperatorGraph g = makeLayers({10, 10, 10, 30}, 4);
  llvm::Expected<MegatronPlan> plan = assignMegatron(g, strategy(1, 2, 1), 1);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  std::vector<unsigned> stages;
  for (const Operator &op : plan->problem.ops)
    stages.push_back(op.stage);
  // {embedding, 10, 10, 10} | {30, head}: max 31 (an even split would be 41).
  EXPECT_EQ(stages, (std::vector<unsigned>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(plan->problem.config.pipelineStages, 2);
  EXPECT_EQ(plan->problem.config.pipelineAxis, 0u);
}

TEST(MegatronPlanTest, Errors) {
  OperatorGraph g = makeLayers({10, 10}, 6);
  auto message = [&](const IRStrategy &s, int64_t mb) {
    llvm::Expected<MegatronPlan> plan = assignMegatron(g, s, mb);
    return plan ? std::string() : llvm::toString(plan.takeError());
  };
  EXPECT_EQ(message(strategy(4, 1, 1), 1),
            "megatron: tp=4 does not divide the 6 attention heads of layer 0");
  EXPECT_EQ(message(strategy(2, 3, 1), 1),
            "megatron: pp=3 exceeds the 2 transformer layers found in the "
            "model");
  IRStrategy gb = strategy(1, 1, 4);
  gb.globalBatch = 30;
  EXPECT_EQ(message(gb, 2), "megatron: gb=30 must be a multiple of mb*dp=8");
  gb.globalBatch = 32;
  llvm::Expected<MegatronPlan> ok = assignMegatron(g, gb, 2);
  ASSERT_TRUE(bool(ok));
  EXPECT_EQ(ok->problem.config.microBatches, 4);
  IRStrategy mb = strategy(1, 1, 1);
  mb.megatron.mb = 4;
  mb.microBatchGiven = true;
  EXPECT_NE(message(mb, 2).find("mb=4 but the model's batch dim is bound to 2"),
            std::string::npos);
}

TEST(MegatronPlanTest, ParseStrategy) {
  llvm::Expected<IRStrategy> s =
      parseIRStrategy("megatron:tp=2,pp=4,dp=8,gb=512,zero=1");
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->megatron.tp, 2);
  EXPECT_EQ(s->megatron.pp, 4);
  EXPECT_EQ(s->megatron.zeroStage, 1);
  EXPECT_EQ(s->globalBatch, 512);
  EXPECT_FALSE(s->microBatchGiven);
  llvm::Expected<IRStrategy> mb = parseIRStrategy("megatron:tp=1,mb=2");
  ASSERT_TRUE(bool(mb));
  EXPECT_TRUE(mb->microBatchGiven);
  llvm::Expected<IRStrategy> bad = parseIRStrategy("megatron:tp=2,foo=1");
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()), "unknown megatron key 'foo'");
  llvm::Expected<IRStrategy> badGB = parseIRStrategy("megatron:gb=0");
  ASSERT_FALSE(bool(badGB));
  llvm::consumeError(badGB.takeError());
}

} // namespace
