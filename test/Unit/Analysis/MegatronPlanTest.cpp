//===- MegatronPlanTest.cpp - Megatron partition of a graph -----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// chooseMegatronLoops on a linear pair converted from IR (column- then
// row-parallel, batch on dp) and on a hand-built graph (errors), and
// parseIRStrategy.
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

  llvm::Expected<MegatronLoops> loops =
      chooseMegatronLoops(*graph, /*tp=*/4, /*sequenceParallel=*/false);
  ASSERT_TRUE(bool(loops)) << llvm::toString(loops.takeError());
  EXPECT_TRUE(loops->warnings.empty());
  // fc1: column-parallel (output dim 64, loop 2, on tp), batch (loop 0) on
  // dp.
  EXPECT_EQ(loops->tpLoop[0], 2);
  EXPECT_EQ(loops->batchLoop[0], 0);
  // The bias + activation follows the split.
  EXPECT_EQ(loops->tpLoop[1], 2);
  // fc2: row-parallel (its reduction dim, loop 3, on tp).
  EXPECT_EQ(loops->tpLoop[2], 3);

  // tp = 3 divides none of the dims: the linears stay replicated, with a
  // warning.
  llvm::Expected<MegatronLoops> odd = chooseMegatronLoops(*graph, 3, false);
  ASSERT_TRUE(bool(odd));
  ASSERT_FALSE(odd->warnings.empty());
  EXPECT_NE(odd->warnings[0].find("replicated across tp"), std::string::npos);
  EXPECT_EQ(odd->tpLoop[0], -1);
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

TEST(MegatronPlanTest, Errors) {
  OperatorGraph g = makeLayers({10, 10}, 6);
  llvm::Expected<MegatronLoops> loops = chooseMegatronLoops(g, 4, false);
  ASSERT_FALSE(bool(loops));
  EXPECT_EQ(llvm::toString(loops.takeError()),
            "megatron: tp=4 does not divide the 6 attention heads of layer 0");
  llvm::Expected<MegatronLoops> ok = chooseMegatronLoops(g, 2, false);
  ASSERT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
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
