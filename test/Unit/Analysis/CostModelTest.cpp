//===- CostModelTest.cpp - IR to operator graph -----------------*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Parses small functions shaped like the ONNX importer's output and checks
// the operators convertToOperatorGraph makes of them: loops, operand dims
// and roles, element bytes, FLOPs, layers and layer kinds.
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

class CostModelTest : public ::testing::Test {
protected:
  CostModelTest() {
    {
      DialectRegistry registry;
      stpar::stp::registerPartitionableOpModels(registry);
      context.appendDialectRegistry(registry);
    }
    context.loadDialect<func::FuncDialect, arith::ArithDialect,
                        linalg::LinalgDialect, math::MathDialect,
                        tensor::TensorDialect, stpar::stp::STPDialect>();
  }

  /// Parses `source` and converts its function @main.
  OperatorGraph convert(StringRef source, ConversionOptions options = {}) {
    module = parseSourceString<ModuleOp>(source, &context);
    EXPECT_TRUE(module);
    if (!module)
      return {};
    auto func = module->lookupSymbol<func::FuncOp>("main");
    FailureOr<OperatorGraph> graph = convertToOperatorGraph(func, options);
    EXPECT_TRUE(succeeded(graph));
    return succeeded(graph) ? *graph : OperatorGraph{};
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

std::vector<int64_t> extents(const Operator &op) {
  std::vector<int64_t> e;
  for (const LoopDim &l : op.loops)
    e.push_back(l.extent);
  return e;
}

constexpr const char *kParam =
    "{stp.param = #stp.param<name = \"w\", data = embedded, trainable = "
    "true>}";

// A linear layer as the importer writes ONNX MatMul: loops b, m, n, k.
TEST_F(CostModelTest, MatMulGeneric) {
  std::string src = std::string(R"mlir(
#x = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#w = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#y = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @main(%x: tensor<2x8x32xf32> {stp.name = "x"},
                %w: tensor<32x96xf32> )mlir") +
                    kParam + R"mlir() -> tensor<2x8x96xf32> {
  %e = tensor.empty() : tensor<2x8x96xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x8x96xf32>) -> tensor<2x8x96xf32>
  %y = linalg.generic {indexing_maps = [#x, #w, #y],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<2x8x32xf32>, tensor<32x96xf32>) outs(%f : tensor<2x8x96xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<2x8x96xf32>
  return %y : tensor<2x8x96xf32>
}
)mlir";
  OperatorGraph g = convert(src);
  ASSERT_EQ(g.ops.size(), 1u);
  const Operator &op = g.ops[0].op;
  EXPECT_EQ(op.kind, OpKind::MatMul);
  EXPECT_EQ(extents(op), (std::vector<int64_t>{2, 8, 96, 32}));
  EXPECT_EQ(op.loops[3].kind, LoopKind::Reduction);
  EXPECT_EQ(op.loops[2].kind, LoopKind::Parallel);
  ASSERT_EQ(op.operands.size(), 3u);
  EXPECT_EQ(op.operands[0].role, OperandRole::Input);
  EXPECT_EQ(op.operands[0].dims, (std::vector<unsigned>{0, 1, 3}));
  EXPECT_FALSE(op.operands[0].needsGrad); // a graph input
  EXPECT_EQ(op.operands[1].role, OperandRole::Parameter);
  EXPECT_EQ(op.operands[1].name, "w");
  EXPECT_EQ(op.operands[1].dims, (std::vector<unsigned>{3, 2}));
  EXPECT_EQ(op.operands[2].role, OperandRole::Output);
  EXPECT_EQ(op.operands[2].dims, (std::vector<unsigned>{0, 1, 2}));
  // Mixed precision: 2 bytes per float element.
  EXPECT_EQ(op.operands[1].elementBytes, 2);
  EXPECT_DOUBLE_EQ(g.getForwardFlops(0), 2.0 * 2 * 8 * 96 * 32);
  EXPECT_DOUBLE_EQ(g.getParameterCount(), 32.0 * 96);
  // No attention: no layers, kinds "other".
  EXPECT_TRUE(g.layers.empty());
  EXPECT_EQ(op.layerKind, "other");

  ConversionOptions fp32;
  fp32.fp32 = true;
  OperatorGraph g32 = convert(src, fp32);
  ASSERT_EQ(g32.ops.size(), 1u);
  EXPECT_EQ(g32.ops[0].op.operands[0].elementBytes, 4);
}

TEST_F(CostModelTest, SoftmaxAndBroadcastElementwise) {
  OperatorGraph g = convert(R"mlir(
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#m = affine_map<(d0, d1, d2, d3) -> (0, 0, d2, d3)>
func.func @main(%s: tensor<2x4x8x8xf32> {stp.name = "s"},
                %mask: tensor<1x1x8x8xf32> {stp.param = #stp.param<name = "mask", data = embedded>}) -> tensor<2x4x8x8xf32> {
  %e = tensor.empty() : tensor<2x4x8x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #m, #id],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s, %mask : tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%e : tensor<2x4x8x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %t = arith.addf %x, %y : f32
    %u = math.exp %t : f32
    linalg.yield %u : f32
  } -> tensor<2x4x8x8xf32>
  %e2 = tensor.empty() : tensor<2x4x8x8xf32>
  %p = linalg.softmax dimension(3) ins(%a : tensor<2x4x8x8xf32>) outs(%e2 : tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %p : tensor<2x4x8x8xf32>
}
)mlir");
  ASSERT_EQ(g.ops.size(), 2u);
  const Operator &add = g.ops[0].op;
  EXPECT_EQ(add.kind, OpKind::Elementwise);
  EXPECT_DOUBLE_EQ(add.flopsPerPoint, 2); // addf + exp
  // The broadcast mask indexes only the last two loops; not trainable, so
  // an input without a gradient.
  EXPECT_EQ(add.operands[1].role, OperandRole::Input);
  EXPECT_EQ(add.operands[1].dims, (std::vector<unsigned>{2, 3}));
  EXPECT_FALSE(add.operands[1].needsGrad);
  const Operator &sm = g.ops[1].op;
  EXPECT_EQ(sm.kind, OpKind::Softmax);
  EXPECT_EQ(extents(sm), (std::vector<int64_t>{2, 4, 8, 8}));
  EXPECT_EQ(sm.loops[3].kind, LoopKind::Reduction);
  EXPECT_EQ(sm.loops[2].kind, LoopKind::Parallel);
  EXPECT_DOUBLE_EQ(g.getForwardFlops(1), 5.0 * 2 * 4 * 8 * 8);
  // Trainable = false: not a parameter.
  EXPECT_DOUBLE_EQ(g.getParameterCount(), 0);
}

TEST_F(CostModelTest, LayerNorm) {
  OperatorGraph g = convert(R"mlir(
func.func @main(%x: tensor<2x8x32xf32> {stp.name = "x"},
                %g: tensor<32xf32> {stp.param = #stp.param<name = "ln.w", data = embedded, trainable = true>},
                %b: tensor<32xf32> {stp.param = #stp.param<name = "ln.b", data = embedded, trainable = true>}) -> tensor<2x8x32xf32> {
  %y = stp.layer_norm %x, %g, %b {axis = 2 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}
)mlir");
  ASSERT_EQ(g.ops.size(), 1u);
  const Operator &ln = g.ops[0].op;
  EXPECT_EQ(ln.kind, OpKind::Norm);
  EXPECT_EQ(ln.layerKind, "norm");
  EXPECT_EQ(ln.loops[2].kind, LoopKind::Reduction);
  EXPECT_EQ(ln.loops[1].kind, LoopKind::Parallel);
  ASSERT_EQ(ln.operands.size(), 4u);
  EXPECT_EQ(ln.operands[1].role, OperandRole::Parameter);
  EXPECT_EQ(ln.operands[1].dims, (std::vector<unsigned>{2}));
  EXPECT_EQ(ln.operands[2].name, "ln.b");
  EXPECT_EQ(ln.operands[3].role, OperandRole::Output);
  EXPECT_DOUBLE_EQ(g.getForwardFlops(0), 8.0 * 2 * 8 * 32);
  EXPECT_DOUBLE_EQ(g.getParameterCount(), 64);
}

// stp.attention becomes scores, softmax and context, with Megatron's
// FLOPs (4 b h sq sk d) and a layer of 4 heads.
TEST_F(CostModelTest, Attention) {
  OperatorGraph g = convert(R"mlir(
func.func @main(%x: tensor<2x8x32xf32> {stp.name = "x"},
                %g: tensor<32xf32> {stp.param = #stp.param<name = "ln.w", data = embedded, trainable = true>},
                %q: tensor<2x4x8x16xf32>, %k: tensor<2x4x10x16xf32>,
                %v: tensor<2x4x10x16xf32>) -> tensor<2x4x8x16xf32> {
  %y = stp.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %o = stp.attention %q, %k, %v {scale = 0.25 : f32, causal}
      : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x16xf32>)
      -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}
)mlir");
  ASSERT_EQ(g.ops.size(), 4u);
  EXPECT_EQ(g.ops[0].op.kind, OpKind::Norm);
  EXPECT_DOUBLE_EQ(g.getForwardFlops(0), 6.0 * 2 * 8 * 32);
  const Operator &scores = g.ops[1].op;
  const Operator &softmax = g.ops[2].op;
  const Operator &context = g.ops[3].op;
  EXPECT_EQ(scores.kind, OpKind::MatMul);
  EXPECT_EQ(extents(scores), (std::vector<int64_t>{2, 4, 8, 10, 16}));
  EXPECT_EQ(scores.loops[4].kind, LoopKind::Reduction);
  EXPECT_EQ(softmax.kind, OpKind::Softmax);
  EXPECT_EQ(softmax.loops[3].kind, LoopKind::Reduction);
  EXPECT_EQ(context.kind, OpKind::MatMul);
  EXPECT_EQ(extents(context), (std::vector<int64_t>{2, 4, 8, 16, 10}));
  EXPECT_EQ(context.operands[1].dims, (std::vector<unsigned>{0, 1, 4, 3}));
  double matmuls = g.getForwardFlops(1) + g.getForwardFlops(3);
  EXPECT_DOUBLE_EQ(matmuls, 4.0 * 2 * 4 * 8 * 10 * 16);
  // One layer (the norm before the attention starts it), 4 heads.
  ASSERT_EQ(g.layers.size(), 1u);
  EXPECT_EQ(g.layers[0].begin, 0u);
  EXPECT_EQ(g.layers[0].end, 4u);
  EXPECT_EQ(g.layers[0].heads, 4);
  EXPECT_EQ(scores.layerKind, "attention");
  EXPECT_TRUE(g.ops[0].op.checkpoint);
  EXPECT_TRUE(context.recomputable);
}

// A gather from a parameter table is an embedding whose table rows are a
// reduction loop; the int64 ids keep 8 bytes and need no gradient.
TEST_F(CostModelTest, Embedding) {
  OperatorGraph g = convert(R"mlir(
#ids = affine_map<(d0, d1, d2) -> (d0, d1)>
#out = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @main(%ids: tensor<2x8xi64> {stp.name = "input_ids"},
                %wte: tensor<100x32xf32> {stp.param = #stp.param<name = "wte", data = embedded, trainable = true>}) -> tensor<2x8x32xf32> {
  %e = tensor.empty() : tensor<2x8x32xf32>
  %y = linalg.generic {indexing_maps = [#ids, #out],
      iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<2x8xi64>) outs(%e : tensor<2x8x32xf32>) {
  ^bb0(%i: i64, %o: f32):
    %r = arith.index_cast %i : i64 to index
    %c = linalg.index 2 : index
    %v = tensor.extract %wte[%r, %c] : tensor<100x32xf32>
    linalg.yield %v : f32
  } -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}
)mlir");
  ASSERT_EQ(g.ops.size(), 1u);
  const Operator &op = g.ops[0].op;
  EXPECT_EQ(op.kind, OpKind::Embedding);
  EXPECT_EQ(op.layerKind, "embedding");
  EXPECT_EQ(extents(op), (std::vector<int64_t>{2, 8, 32, 100}));
  EXPECT_EQ(op.loops[3].kind, LoopKind::Reduction);
  ASSERT_EQ(op.operands.size(), 3u);
  EXPECT_EQ(op.operands[0].elementBytes, 8);
  EXPECT_FALSE(op.operands[0].needsGrad);
  EXPECT_EQ(op.operands[1].role, OperandRole::Parameter);
  EXPECT_EQ(op.operands[1].dims, (std::vector<unsigned>{3, 2}));
  EXPECT_DOUBLE_EQ(g.getForwardFlops(0), 0);
  // The graph input's dim 0 is its batch dim.
  EXPECT_EQ(g.tensors[0].batchDim, 0u);
}

// A transposed parameter stays a parameter (free view); a transposed
// activation is a copy operator.
TEST_F(CostModelTest, TransposeOfParameterIsFree) {
  OperatorGraph g = convert(std::string(R"mlir(
#x = affine_map<(d0, d1, d2) -> (d0, d2)>
#w = affine_map<(d0, d1, d2) -> (d2, d1)>
#y = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @main(%x: tensor<8x32xf32> {stp.name = "x"},
                %w: tensor<100x32xf32> )mlir") +
                            kParam + R"mlir() -> tensor<100x8xf32> {
  %e = tensor.empty() : tensor<32x100xf32>
  %wt = linalg.transpose ins(%w : tensor<100x32xf32>) outs(%e : tensor<32x100xf32>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<8x100xf32>
  %y = linalg.generic {indexing_maps = [#x, #w, #y],
      iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %wt : tensor<8x32xf32>, tensor<32x100xf32>) outs(%e2 : tensor<8x100xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %c, %m : f32
    linalg.yield %s : f32
  } -> tensor<8x100xf32>
  %e3 = tensor.empty() : tensor<100x8xf32>
  %t = linalg.transpose ins(%y : tensor<8x100xf32>) outs(%e3 : tensor<100x8xf32>) permutation = [1, 0]
  return %t : tensor<100x8xf32>
}
)mlir");
  ASSERT_EQ(g.ops.size(), 2u);
  EXPECT_EQ(g.views.size(), 1u);
  EXPECT_EQ(g.ops[0].op.operands[1].role, OperandRole::Parameter);
  EXPECT_EQ(g.ops[0].op.operands[1].name, "w");
  const Operator &copy = g.ops[1].op;
  EXPECT_EQ(copy.kind, OpKind::Elementwise);
  EXPECT_DOUBLE_EQ(copy.flopsPerPoint, 0);
  EXPECT_EQ(copy.operands[0].dims, (std::vector<unsigned>{1, 0}));
  EXPECT_DOUBLE_EQ(g.getParameterCount(), 3200);
}

TEST_F(CostModelTest, DynamicShapeFails) {
  module = parseSourceString<ModuleOp>(R"mlir(
func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  return %x : tensor<?x8xf32>
}
)mlir",
                                       &context);
  ASSERT_TRUE(module);
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    message = d.str();
    return success();
  });
  auto func = module->lookupSymbol<func::FuncOp>("main");
  EXPECT_TRUE(failed(convertToOperatorGraph(func, {})));
  EXPECT_NE(message.find("not a statically shaped tensor"), std::string::npos);
}

} // namespace
